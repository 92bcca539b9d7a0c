#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace drift::tokenizer {
namespace {

const std::string kFffd = "\xEF\xBF\xBD";

// The llama3 fixture's 640-token vocabulary has no emoji, so each emoji is four byte tokens.
Tokenizer llama3() {
  Expected<Tokenizer> t = Tokenizer::from_file(std::string(DRIFT_FIXTURES_DIR) + "/tokenizers/llama3/tokenizer.json");
  if (!t.ok()) ADD_FAILURE() << t.status().to_string();
  return std::move(t).value();
}

TEST(StreamDecoder, HoldsBackAnEmojiUntilItsLastByte) {
  const Tokenizer t = llama3();
  const std::vector<int32_t> ids = t.encode("\xF0\x9F\x99\x82\xF0\x9F\x9A\x80");  // 🙂🚀
  ASSERT_EQ(ids.size(), 8u);
  StreamDecoder stream(t);
  std::vector<std::string> chunks;
  for (int32_t id : ids) chunks.push_back(stream.push(id));
  EXPECT_EQ(chunks, (std::vector<std::string>{"", "", "", "\xF0\x9F\x99\x82", "", "", "", "\xF0\x9F\x9A\x80"}));
  EXPECT_EQ(stream.flush(), "");
}

TEST(StreamDecoder, ReplacesWhatCanNeverBecomeACharacter) {
  const Tokenizer t = llama3();
  const int32_t lead = t.token_to_id("\xC3\xB0").value();  // "ð" stands for byte 0xF0, a 4-byte lead
  const int32_t a = t.token_to_id("a").value();
  StreamDecoder stream(t);
  EXPECT_EQ(stream.push(lead), "");
  EXPECT_EQ(stream.push(a), kFffd + "a");
  EXPECT_EQ(stream.push(lead), "");
  EXPECT_EQ(stream.flush(), kFffd);  // the stream ended inside a character, as decode() would report
  EXPECT_EQ(t.decode(std::vector<int32_t>{lead, a, lead}), kFffd + "a" + kFffd);
}

TEST(StreamDecoder, SkipsSpecialTokensWhenAsked) {
  const Tokenizer t = llama3();
  const std::vector<int32_t> ids = t.encode("<|im_start|>hi<|im_end|>");
  std::string kept;
  std::string skipped;
  StreamDecoder keep(t);
  StreamDecoder skip(t, /*skip_special_tokens=*/true);
  for (int32_t id : ids) {
    kept += keep.push(id);
    skipped += skip.push(id);
  }
  EXPECT_EQ(kept + keep.flush(), "<|im_start|>hi<|im_end|>");
  EXPECT_EQ(skipped + skip.flush(), "hi");
}

TEST(StreamDecoder, UnknownIdsAddNothing) {
  const Tokenizer t = llama3();
  StreamDecoder stream(t);
  EXPECT_EQ(stream.push(-1), "");
  EXPECT_EQ(stream.push(t.vocab_size() + 100), "");
  EXPECT_EQ(stream.push(t.token_to_id("a").value()), "a");
}

}  // namespace
}  // namespace drift::tokenizer
