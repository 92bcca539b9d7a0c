// Tokenizer::encode and decode: added tokens out first, then normalize, pre-tokenize, merge; decode
// concatenates each token's bytes and repairs invalid UTF-8.
#include "tokenizer/tokenizer.h"

#include <deque>

#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/utf8.h"

namespace drift::tokenizer {

void TokenizerImpl::encode_pieces(std::string_view text, std::vector<int32_t>& ids) const {
  std::vector<std::string_view> pieces;
  std::deque<std::string> storage;
  pre_tokenizer.split(text, pieces, storage);
  for (std::string_view piece : pieces) model.encode_piece(piece, ids);
}

void TokenizerImpl::encode_plain(std::string_view text, std::vector<int32_t>& ids) const {
  std::string storage;
  const std::string_view normalized = normalizer.apply(text, storage);
  if (normalized_matcher.empty()) {
    encode_pieces(normalized, ids);
    return;
  }
  std::vector<Segment> segments;
  normalized_matcher.split(normalized, segments);
  for (const Segment& s : segments) {
    if (s.is_token()) {
      ids.push_back(s.token_id);
    } else {
      encode_pieces(s.text, ids);
    }
  }
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  std::string repaired;
  if (!is_valid_utf8(text)) {
    append_utf8_lossy(text, /*at_end=*/true, repaired);
    text = repaired;
  }
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  std::vector<Segment> segments;
  impl_->input_matcher.split(text, segments);
  for (const Segment& s : segments) {
    if (s.is_token()) {
      ids.push_back(s.token_id);
    } else {
      impl_->encode_plain(s.text, ids);
    }
  }
  if (add_special_tokens) impl_->post_processor.apply(ids);
  return ids;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  std::string bytes;
  for (int32_t id : ids) {
    if (skip_special_tokens && is_special(id)) continue;
    bytes.append(token_bytes(id));
  }
  std::string text;
  text.reserve(bytes.size());
  append_utf8_lossy(bytes, /*at_end=*/true, text);
  return text;
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  if (const auto it = impl_->added_ids.find(token); it != impl_->added_ids.end()) return it->second;
  if (const auto it = impl_->model.vocab().find(token); it != impl_->model.vocab().end()) return it->second;
  return std::nullopt;
}

int32_t Tokenizer::vocab_size() const { return int32_t(impl_->tokens.size()); }

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && size_t(id) < impl_->tokens.size() && impl_->tokens[size_t(id)].special;
}

std::string_view Tokenizer::token_text(int32_t id) const {
  if (id < 0 || size_t(id) >= impl_->tokens.size()) return {};
  return impl_->tokens[size_t(id)].text;
}

std::string_view Tokenizer::token_bytes(int32_t id) const {
  if (id < 0 || size_t(id) >= impl_->tokens.size()) return {};
  return impl_->tokens[size_t(id)].bytes;
}

}  // namespace drift::tokenizer
