#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace drift::tokenizer {

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool skip_special_tokens)
    : tokenizer_(tokenizer), skip_special_tokens_(skip_special_tokens) {}

// Decoding is a pure function of the byte stream, so running decode()'s repair incrementally and holding
// back only an unfinished character gives exactly decode()'s text, split at safe points.
std::string StreamDecoder::push(int32_t id) {
  if (skip_special_tokens_ && tokenizer_.is_special(id)) return {};
  pending_.append(tokenizer_.token_bytes(id));
  std::string text;
  const size_t consumed = append_utf8_lossy(pending_, /*at_end=*/false, text);
  pending_.erase(0, consumed);
  return text;
}

std::string StreamDecoder::flush() {
  std::string text;
  append_utf8_lossy(pending_, /*at_end=*/true, text);
  pending_.clear();
  return text;
}

}  // namespace drift::tokenizer
