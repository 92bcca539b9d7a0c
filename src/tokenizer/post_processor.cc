#include "tokenizer/post_processor.h"

#include <fmt/format.h>

#include <limits>

namespace drift::tokenizer {
namespace {

// The ids of special_tokens[name]["ids"].
Expected<std::vector<int32_t>> special_token_ids(const JsonField& special_tokens, const std::string& name) {
  const std::optional<JsonField> entry = special_tokens.optional(name);
  if (!entry) return special_tokens.invalid(fmt::format("no entry for '{}', which the template uses", name));
  DRIFT_ASSIGN_OR_RETURN(const JsonField ids, entry->required("ids"));
  if (!ids.json().is_array()) return ids.invalid(fmt::format("expected an array, got {}", ids.json().type_name()));
  std::vector<int32_t> out;
  for (size_t i = 0; i < ids.json().size(); ++i) {
    DRIFT_ASSIGN_OR_RETURN(const int64_t id, ids.element(i).as_int());
    if (id < 0 || id >= std::numeric_limits<int32_t>::max()) return ids.element(i).invalid("id out of range");
    out.push_back(int32_t(id));
  }
  return out;
}

}  // namespace

Expected<PostProcessor> PostProcessor::from_json(const JsonField& root) {
  PostProcessor post;
  if (const auto field = root.optional("post_processor")) DRIFT_RETURN_IF_ERROR(post.read_step(*field));
  return post;
}

Status PostProcessor::read_step(const JsonField& field) {
  DRIFT_ASSIGN_OR_RETURN(const std::string type, field.type());
  if (type == "TemplateProcessing") return read_template(field);
  if (type == "ByteLevel") return Status::Ok();  // it only adjusts offsets, which Drift does not keep
  if (type == "Sequence") {
    DRIFT_ASSIGN_OR_RETURN(const JsonField steps, field.required("processors"));
    if (!steps.json().is_array())
      return steps.invalid(fmt::format("expected an array, got {}", steps.json().type_name()));
    for (size_t i = 0; i < steps.json().size(); ++i) DRIFT_RETURN_IF_ERROR(read_step(steps.element(i)));
    return Status::Ok();
  }
  DRIFT_ASSIGN_OR_RETURN(const JsonField type_field, field.required("type"));
  return type_field.unsupported(
      fmt::format("post-processor type '{}' is not supported (only TemplateProcessing, ByteLevel, Sequence)", type));
}

Status PostProcessor::read_template(const JsonField& field) {
  if (has_template_) return field.unsupported("more than one TemplateProcessing");
  has_template_ = true;
  DRIFT_ASSIGN_OR_RETURN(const JsonField single, field.required("single"));
  DRIFT_ASSIGN_OR_RETURN(const JsonField special_tokens, field.required("special_tokens"));
  if (!single.json().is_array())
    return single.invalid(fmt::format("expected an array, got {}", single.json().type_name()));
  bool seen_sequence = false;
  for (size_t i = 0; i < single.json().size(); ++i) {
    const JsonField item = single.element(i);
    if (const auto sequence = item.optional("Sequence")) {
      DRIFT_ASSIGN_OR_RETURN(const JsonField id, sequence->required("id"));
      DRIFT_ASSIGN_OR_RETURN(const std::string name, id.as_string());
      if (name != "A") return id.invalid(fmt::format("the single template can only hold sequence A, got '{}'", name));
      if (seen_sequence) return item.unsupported("sequence A appears twice in the template");
      seen_sequence = true;
    } else if (const auto special = item.optional("SpecialToken")) {
      DRIFT_ASSIGN_OR_RETURN(const JsonField id, special->required("id"));
      DRIFT_ASSIGN_OR_RETURN(const std::string name, id.as_string());
      DRIFT_ASSIGN_OR_RETURN(const std::vector<int32_t> ids, special_token_ids(special_tokens, name));
      std::vector<int32_t>& side = seen_sequence ? after_ : before_;
      side.insert(side.end(), ids.begin(), ids.end());
    } else {
      return item.invalid("expected {\"Sequence\": ...} or {\"SpecialToken\": ...}");
    }
  }
  if (!seen_sequence) return single.invalid("the template has no sequence A");
  return Status::Ok();
}

void PostProcessor::apply(std::vector<int32_t>& ids) const {
  ids.insert(ids.begin(), before_.begin(), before_.end());
  ids.insert(ids.end(), after_.begin(), after_.end());
}

}  // namespace drift::tokenizer
