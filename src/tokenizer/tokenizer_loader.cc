// Tokenizer::from_file and from_json_string: reads each tokenizer.json component, then builds the id tables.
#include <fmt/format.h>

#include <algorithm>

#include "base/mapped_file.h"
#include "tokenizer/added_tokens.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/json_field.h"
#include "tokenizer/tokenizer_impl.h"

namespace drift::tokenizer {
namespace {

// Decoding is fixed to the ByteLevel rule, so the decoder entry is only checked to be that.
Status check_decoder(const JsonField& decoder) {
  DRIFT_ASSIGN_OR_RETURN(const std::string type, decoder.type());
  if (type == "ByteLevel") return Status::Ok();
  if (type == "Sequence") {
    DRIFT_ASSIGN_OR_RETURN(const JsonField steps, decoder.required("decoders"));
    if (!steps.json().is_array())
      return steps.invalid(fmt::format("expected an array, got {}", steps.json().type_name()));
    for (size_t i = 0; i < steps.json().size(); ++i) DRIFT_RETURN_IF_ERROR(check_decoder(steps.element(i)));
    return Status::Ok();
  }
  DRIFT_ASSIGN_OR_RETURN(const JsonField type_field, decoder.required("type"));
  return type_field.unsupported(fmt::format("decoder type '{}' is not supported (only ByteLevel)", type));
}

// "<0x0A>" -> 0x0A: the tokens a byte_fallback model spells unknown bytes with.
std::optional<uint8_t> fallback_byte(std::string_view token) {
  if (token.size() != 6 || !token.starts_with("<0x") || !token.ends_with(">")) return std::nullopt;
  int value = 0;
  for (char c : token.substr(3, 2)) {
    const int digit = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    if (digit < 0) return std::nullopt;
    value = value * 16 + digit;
  }
  return uint8_t(value);
}

Expected<std::vector<TokenEntry>> build_token_table(const JsonField& root, const BpeModel& model,
                                                    const std::vector<AddedToken>& added,
                                                    const Normalizer& normalizer) {
  int32_t max_id = -1;
  for (const auto& [text, id] : model.vocab()) max_id = std::max(max_id, id);
  for (const AddedToken& t : added) max_id = std::max(max_id, t.id);
  // The table has a slot per id up to the largest; a stray huge id must not make it gigabytes.
  const size_t num_tokens = model.vocab().size() + added.size();
  if (size_t(max_id) >= 2 * num_tokens + 1024) {
    return root.invalid(
        fmt::format("model.vocab and added_tokens hold {} tokens but ids go up to {}", num_tokens, max_id));
  }
  std::vector<TokenEntry> tokens(size_t(max_id + 1));
  for (const auto& [text, id] : model.vocab()) {
    TokenEntry& e = tokens[size_t(id)];
    e.text = text;
    // Hugging Face's ByteLevel decoder would print a fallback token literally; the byte is what it means.
    const std::optional<uint8_t> byte = model.byte_fallback() ? fallback_byte(text) : std::nullopt;
    e.bytes = byte ? std::string(1, char(*byte)) : visible_to_bytes(text);
  }
  for (const AddedToken& t : added) {
    TokenEntry& e = tokens[size_t(t.id)];
    e.text = t.content;
    e.special = t.special;
    // Decoding reads a normalized token in its normalized form, as Hugging Face does.
    std::string storage;
    e.bytes = visible_to_bytes(t.normalized ? normalizer.apply(t.content, storage) : std::string_view(t.content));
  }
  return tokens;
}

// Added tokens with normalized=false are found in the input; the others in the normalized text, by their
// normalized content. Kept as two passes (as Hugging Face does) even when normalization changes nothing.
void split_added_tokens(const std::vector<AddedToken>& added, const Normalizer& normalizer,
                        std::vector<AddedToken>& input, std::vector<AddedToken>& normalized) {
  for (const AddedToken& t : added) {
    if (!t.normalized) {
      input.push_back(t);
      continue;
    }
    AddedToken n = t;
    std::string storage;
    n.content = std::string(normalizer.apply(t.content, storage));
    normalized.push_back(std::move(n));
  }
}

Expected<TokenizerImpl> read_tokenizer(const JsonField& root) {
  if (!root.json().is_object())
    return root.invalid(fmt::format("expected a JSON object, got {}", root.json().type_name()));
  DRIFT_ASSIGN_OR_RETURN(const JsonField model_field, root.required("model"));
  DRIFT_ASSIGN_OR_RETURN(BpeModel model, BpeModel::from_json(model_field));
  DRIFT_ASSIGN_OR_RETURN(Normalizer normalizer, Normalizer::from_json(root));
  DRIFT_ASSIGN_OR_RETURN(PreTokenizer pre_tokenizer, PreTokenizer::from_json(root));
  DRIFT_ASSIGN_OR_RETURN(PostProcessor post_processor, PostProcessor::from_json(root));
  const std::optional<JsonField> decoder = root.optional("decoder");
  if (!decoder) return root.unsupported("decoder is null; byte-level BPE needs the ByteLevel decoder");
  DRIFT_RETURN_IF_ERROR(check_decoder(*decoder));
  DRIFT_ASSIGN_OR_RETURN(const std::vector<AddedToken> added, read_added_tokens(root));

  std::vector<AddedToken> input_tokens;
  std::vector<AddedToken> normalized_tokens;
  split_added_tokens(added, normalizer, input_tokens, normalized_tokens);
  DRIFT_ASSIGN_OR_RETURN(std::vector<TokenEntry> tokens, build_token_table(root, model, added, normalizer));
  StringMap<int32_t> added_ids;
  for (const AddedToken& t : added) added_ids[t.content] = t.id;
  return TokenizerImpl{AddedTokenMatcher(std::move(input_tokens)),
                       std::move(normalizer),
                       AddedTokenMatcher(std::move(normalized_tokens)),
                       std::move(pre_tokenizer),
                       std::move(model),
                       std::move(post_processor),
                       std::move(tokens),
                       std::move(added_ids)};
}

}  // namespace

Expected<Tokenizer> Tokenizer::from_file(const std::string& tokenizer_json_path) {
  DRIFT_ASSIGN_OR_RETURN(const MappedFile file, MappedFile::open(tokenizer_json_path));
  const std::span<const std::byte> bytes = file.bytes();
  return from_json_string(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()),
                          tokenizer_json_path);
}

Expected<Tokenizer> Tokenizer::from_json_string(std::string_view json, std::string_view source_name) {
  Json root;
  try {
    root = Json::parse(json);
  } catch (const Json::parse_error& e) {
    return invalid_argument(fmt::format("{}: invalid JSON: {}", source_name, e.what()));
  }
  DRIFT_ASSIGN_OR_RETURN(TokenizerImpl impl, read_tokenizer(JsonField(root, source_name)));
  return Tokenizer(std::make_shared<const TokenizerImpl>(std::move(impl)));
}

}  // namespace drift::tokenizer
