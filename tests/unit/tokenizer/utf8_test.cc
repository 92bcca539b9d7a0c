#include "tokenizer/utf8.h"

#include <gtest/gtest.h>

namespace drift::tokenizer {
namespace {

const std::string kFffd = "\xEF\xBF\xBD";

std::string repair(std::string_view bytes) {
  std::string out;
  EXPECT_EQ(append_utf8_lossy(bytes, /*at_end=*/true, out), bytes.size());
  return out;
}

TEST(Utf8, ValidTextIsCopied) {
  const std::string text = "a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x99\x82";  // a é € 🙂
  EXPECT_TRUE(is_valid_utf8(text));
  EXPECT_EQ(repair(text), text);
}

// The example of the Unicode Standard, chapter 3 ("U+FFFD Substitution of Maximal Subparts").
TEST(Utf8, EachMaximalSubpartBecomesOneReplacement) {
  const std::string bytes = "\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64";
  EXPECT_FALSE(is_valid_utf8(bytes));
  EXPECT_EQ(repair(bytes), "a" + kFffd + kFffd + kFffd + "b" + kFffd + "c" + kFffd + kFffd + "d");
}

TEST(Utf8, OverlongSurrogateAndOutOfRangeFormsAreInvalid) {
  EXPECT_EQ(repair("\xC0\xAF"), kFffd + kFffd);
  EXPECT_EQ(repair("\xE0\x80\xAF"), kFffd + kFffd + kFffd);
  EXPECT_EQ(repair("\xED\xA0\x80"), kFffd + kFffd + kFffd);
  EXPECT_EQ(repair("\xF4\x90\x80\x80"), kFffd + kFffd + kFffd + kFffd);
  EXPECT_EQ(repair("\xFF"), kFffd);
}

TEST(Utf8, UnfinishedCharacterWaitsUnlessAtEnd) {
  std::string out;
  EXPECT_EQ(append_utf8_lossy("ab\xF0\x9F\x99", /*at_end=*/false, out), 2u);
  EXPECT_EQ(out, "ab");
  out.clear();
  EXPECT_EQ(append_utf8_lossy("ab\xF0\x9F\x99", /*at_end=*/true, out), 5u);
  EXPECT_EQ(out, "ab" + kFffd);
  // A byte that cannot continue the sequence settles it at once, even before the end.
  out.clear();
  EXPECT_EQ(append_utf8_lossy("\xF0\x9F"
                              "a",
                              /*at_end=*/false, out),
            3u);
  EXPECT_EQ(out, kFffd + "a");
}

TEST(Utf8, CodePointsRoundTrip) {
  for (char32_t cp : {char32_t(0x41), char32_t(0xE9), char32_t(0x20AC), char32_t(0x1F642), char32_t(0x10FFFF)}) {
    std::string s;
    append_code_point(cp, s);
    EXPECT_TRUE(is_valid_utf8(s));
    size_t pos = 0;
    EXPECT_EQ(next_code_point(s, pos), cp);
    EXPECT_EQ(pos, s.size());
  }
}

}  // namespace
}  // namespace drift::tokenizer
