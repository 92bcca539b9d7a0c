// Tokenizer::from_tiktoken on hand-made rank files: the 256 single bytes take ranks 0-255 (rank = byte
// value), the test's multi-byte tokens follow, so each expected split follows from tiktoken's rule by hand:
// merge the adjacent pair whose joined bytes form the lowest-ranked token, leftmost on ties.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace drift::tokenizer {
namespace {

using ::testing::HasSubstr;

// Splits on spaces only, so each test controls its pieces.
constexpr std::string_view kPattern = R"([^ ]+| +)";

std::string base64(std::string_view bytes) {
  static constexpr char kDigits[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (size_t i = 0; i < bytes.size(); i += 3) {
    uint32_t group = uint32_t(uint8_t(bytes[i])) << 16;
    if (i + 1 < bytes.size()) group |= uint32_t(uint8_t(bytes[i + 1])) << 8;
    if (i + 2 < bytes.size()) group |= uint32_t(uint8_t(bytes[i + 2]));
    for (size_t k = 0; k < 4; ++k) out += i + k <= bytes.size() ? kDigits[(group >> (18 - 6 * k)) & 63] : '=';
  }
  return out;
}

// The 256 single bytes, then `extra` in order (ranks 256, 257, ...).
std::vector<std::string> with_bytes(const std::vector<std::string>& extra) {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.emplace_back(1, char(b));
  tokens.insert(tokens.end(), extra.begin(), extra.end());
  return tokens;
}

std::string tiktoken_file(const std::vector<std::string>& tokens) {
  std::string text;
  for (size_t rank = 0; rank < tokens.size(); ++rank) text += base64(tokens[rank]) + " " + std::to_string(rank) + "\n";
  return text;
}

// The file is named after the running test too: ctest runs each test in its own process, several at a
// time, and two of them rewriting one shared file under the other's mapping failed (a bus error) in CI.
std::string write_file(const std::string& name, const std::string& contents) {
  const ::testing::TestInfo* test = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::filesystem::path path =
      std::filesystem::path(::testing::TempDir()) / (std::string(test->test_suite_name()) + "." + test->name() + "." + name);
  std::ofstream(path, std::ios::binary) << contents;
  return path.string();
}

Tokenizer load(const std::vector<std::string>& extra, const std::vector<SpecialToken>& specials = {}) {
  const std::string path = write_file("ranks.tiktoken", tiktoken_file(with_bytes(extra)));
  Expected<Tokenizer> t = Tokenizer::from_tiktoken(path, kPattern, specials);
  if (!t.ok()) ADD_FAILURE() << t.status().to_string();
  return std::move(t).value();
}

Status load_error(const std::string& contents, std::string_view pattern = kPattern,
                  const std::vector<SpecialToken>& specials = {}) {
  const std::string path = write_file("bad.tiktoken", contents);
  const Expected<Tokenizer> t = Tokenizer::from_tiktoken(path, pattern, specials);
  EXPECT_FALSE(t.ok());
  return t.status();
}

std::vector<int32_t> bytes_of(std::string_view text) {
  std::vector<int32_t> ids;
  for (char c : text) ids.push_back(uint8_t(c));
  return ids;
}

TEST(Tiktoken, EqualRanksMergeLeftmostFirst) {
  const Tokenizer t = load({"aa"});  // 256
  EXPECT_EQ(t.encode("aaa"), (std::vector<int32_t>{256, 'a'}));
  EXPECT_EQ(t.encode("aaaa"), (std::vector<int32_t>{256, 256}));
}

TEST(Tiktoken, TheLowestRankedJoinWinsWhereverItIs) {
  const Tokenizer t = load({"bc", "ab"});  // bc 256, ab 257
  // In "abx" only (a,b) joins; in "abcx" (b,c) ranks lower than (a,b), so "bc" forms and "ab" cannot.
  EXPECT_EQ(t.encode("abx"), (std::vector<int32_t>{257, 'x'}));
  EXPECT_EQ(t.encode("abcx"), (std::vector<int32_t>{'a', 256, 'x'}));
}

TEST(Tiktoken, AnyTwoTokensWhoseBytesFormATokenJoin) {
  // No list says "ab + cd -> abcd": the ranks alone allow it, and "abc"/"bcd" do not exist.
  const Tokenizer t = load({"ab", "cd", "abcd"});  // 256, 257, 258
  EXPECT_EQ(t.encode("abcdx"), (std::vector<int32_t>{258, 'x'}));
  // With "bc" ranked first, "a" + "bc" joins into "abc" however the token was trained.
  const Tokenizer u = load({"bc", "ab", "abc"});  // 256, 257, 258
  EXPECT_EQ(u.encode("abcx"), (std::vector<int32_t>{258, 'x'}));
}

TEST(Tiktoken, APieceThatIsATokenIsTakenWhole) {
  // "abc" has no two-token split, so merging never reaches it; as a whole piece it is one token.
  const Tokenizer t = load({"abc"});  // 256
  EXPECT_EQ(t.encode("abc"), (std::vector<int32_t>{256}));
  EXPECT_EQ(t.encode("abcd"), bytes_of("abcd"));
  EXPECT_EQ(t.encode("abc abc"), (std::vector<int32_t>{256, ' ', 256}));
}

TEST(Tiktoken, WithoutMergesEveryByteIsItsOwnToken) {
  const Tokenizer t = load({});
  std::string ascii;
  for (int b = 1; b < 128; ++b) ascii += char(b);
  EXPECT_EQ(t.encode(ascii), bytes_of(ascii));
  const std::string text = "plain \xC3\xA9 \xE6\x97\xA5 \xF0\x9F\x98\x80";
  EXPECT_EQ(t.encode(text), bytes_of(text));
  EXPECT_EQ(t.decode(t.encode(text)), text);
  EXPECT_EQ(t.token_bytes(0xFF), "\xFF");
  EXPECT_EQ(t.token_text(' '), "\xC4\xA0");  // the byte-level visible form, as tokenizer.json stores it
  EXPECT_EQ(t.vocab_size(), 256);
}

TEST(Tiktoken, SpecialTokensAreCutOutFirst) {
  const Tokenizer t = load({"hi"}, {{"<|end|>", 300}, {"<|start|>", 299}});
  EXPECT_EQ(t.encode("<|start|>hi<|end|>hi"), (std::vector<int32_t>{299, 256, 300, 256}));
  EXPECT_EQ(t.encode("<|end|"), bytes_of("<|end|"));
  EXPECT_EQ(t.vocab_size(), 301);
  EXPECT_TRUE(t.is_special(300));
  EXPECT_FALSE(t.is_special(256));
  EXPECT_EQ(t.token_to_id("<|end|>"), 300);
  EXPECT_EQ(t.token_to_id("hi"), 256);
  EXPECT_EQ(t.token_text(257), "");  // no token has id 257
  const std::vector<int32_t> ids = {299, 256, 300};
  EXPECT_EQ(t.decode(ids), "<|start|>hi<|end|>");
  EXPECT_EQ(t.decode(ids, /*skip_special_tokens=*/true), "hi");
}

TEST(Tiktoken, ReadsTheNpmPackageJsonLayout) {
  // bpe_ranks lines are "<label> <first rank> <base64>...": here ranks 0-255, then "ab" and "cd" at 300-301.
  std::string line = "! 0";
  for (int b = 0; b < 256; ++b) {
    line += ' ';
    line += base64(std::string(1, char(b)));
  }
  std::string json = R"({"pat_str": "ignored", "special_tokens": {}, "bpe_ranks": ")";
  json += line + "\\n? 300 " + base64("ab") + " " + base64("cd") + "\"}";
  const Expected<Tokenizer> t = Tokenizer::from_tiktoken(write_file("ranks.json", json), kPattern, {});
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(t->encode("abcd ab"), (std::vector<int32_t>{300, 301, ' ', 300}));
  EXPECT_EQ(t->vocab_size(), 302);
}

TEST(TiktokenErrors, MissingFile) {
  const Expected<Tokenizer> t = Tokenizer::from_tiktoken("/nonexistent/o200k_base.tiktoken", kPattern, {});
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kNotFound);
  EXPECT_THAT(t.status().message(), HasSubstr("/nonexistent/o200k_base.tiktoken"));
}

TEST(TiktokenErrors, BadLinesNameTheLine) {
  const std::string good = tiktoken_file(with_bytes({}));
  EXPECT_THAT(load_error(good + "YWI= x\n").message(), HasSubstr("line 257: expected '<base64> <rank>'"));
  EXPECT_THAT(load_error(good + "Y*I= 256\n").message(), HasSubstr("line 257: 'Y*I=' is not base64"));
  EXPECT_THAT(load_error(good + base64("a") + " 256\n").message(),
              HasSubstr("line 257: token 'YQ==' has ranks 97 and 256"));
  EXPECT_THAT(load_error(good + base64("ab") + " 5\n").message(), HasSubstr("rank 5 is given to two tokens"));
  EXPECT_THAT(load_error(good + base64("ab") + " 99999\n").message(), HasSubstr("ranks go up to 99999"));
  EXPECT_THAT(load_error("").message(), HasSubstr("no tokens"));
}

TEST(TiktokenErrors, EveryByteNeedsAToken) {
  std::vector<std::string> tokens = with_bytes({});
  tokens.erase(tokens.begin() + 0x8F);
  EXPECT_THAT(load_error(tiktoken_file(tokens)).message(), HasSubstr("no token for the single byte 0x8F"));
}

TEST(TiktokenErrors, SpecialTokensMustNotCollide) {
  const std::string good = tiktoken_file(with_bytes({}));
  EXPECT_THAT(load_error(good, kPattern, {{"<|x|>", 65}}).message(), HasSubstr("id 65, which is taken by 'A'"));
  EXPECT_THAT(load_error(good, kPattern, {{"<|x|>", 300}, {"<|x|>", 301}}).message(), HasSubstr("has ids 300 and 301"));
  EXPECT_THAT(load_error(good, kPattern, {{"<|x|>", 300}, {"<|y|>", 300}}).message(), HasSubstr("taken by '<|x|>'"));
}

TEST(TiktokenErrors, BadPatternAndJson) {
  const std::string good = tiktoken_file(with_bytes({}));
  EXPECT_THAT(load_error(good, "([a-z").message(), HasSubstr("tiktoken pattern"));
  EXPECT_THAT(load_error("{\"bpe_ranks\": 5}").message(), HasSubstr("expected an object with a string \"bpe_ranks\""));
  EXPECT_THAT(load_error("{\"bpe_ranks\": ").message(), HasSubstr("invalid JSON"));
  EXPECT_THAT(load_error("{\"bpe_ranks\": \"! x YQ==\"}").message(), HasSubstr("bpe_ranks line 1: expected"));
}

}  // namespace
}  // namespace drift::tokenizer
