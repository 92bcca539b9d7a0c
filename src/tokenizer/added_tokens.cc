#include "tokenizer/added_tokens.h"

#include <fmt/format.h>

#include <limits>

namespace drift::tokenizer {
namespace {

Expected<AddedToken> read_added_token(const JsonField& field) {
  AddedToken token;
  DRIFT_ASSIGN_OR_RETURN(const JsonField id, field.required("id"));
  DRIFT_ASSIGN_OR_RETURN(const int64_t id_value, id.as_int());
  if (id_value < 0 || id_value >= std::numeric_limits<int32_t>::max()) {
    return id.invalid(fmt::format("id {} is out of range", id_value));
  }
  token.id = int32_t(id_value);
  DRIFT_ASSIGN_OR_RETURN(const JsonField content, field.required("content"));
  DRIFT_ASSIGN_OR_RETURN(token.content, content.as_string());
  if (token.content.empty()) return content.invalid("empty added token");
  DRIFT_ASSIGN_OR_RETURN(token.special, field.bool_member("special", false));
  DRIFT_ASSIGN_OR_RETURN(token.single_word, field.bool_member("single_word", false));
  DRIFT_ASSIGN_OR_RETURN(token.lstrip, field.bool_member("lstrip", false));
  DRIFT_ASSIGN_OR_RETURN(token.rstrip, field.bool_member("rstrip", false));
  // Hugging Face's default: special tokens are matched as written, others after normalization.
  DRIFT_ASSIGN_OR_RETURN(token.normalized, field.bool_member("normalized", !token.special));
  return token;
}

}  // namespace

Expected<std::vector<AddedToken>> read_added_tokens(const JsonField& root) {
  std::vector<AddedToken> tokens;
  const std::optional<JsonField> list = root.optional("added_tokens");
  if (!list) return tokens;
  if (!list->json().is_array())
    return list->invalid(fmt::format("expected an array, got {}", list->json().type_name()));
  for (size_t i = 0; i < list->json().size(); ++i) {
    DRIFT_ASSIGN_OR_RETURN(AddedToken token, read_added_token(list->element(i)));
    tokens.push_back(std::move(token));
  }
  return tokens;
}

}  // namespace drift::tokenizer
