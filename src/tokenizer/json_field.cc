#include "tokenizer/json_field.h"

#include <fmt/format.h>

namespace drift::tokenizer {

namespace {

std::string field_message(std::string_view source, std::string_view path, std::string_view problem) {
  return path.empty() ? fmt::format("{}: {}", source, problem) : fmt::format("{}: {}: {}", source, path, problem);
}

}  // namespace

std::string JsonField::child_path(std::string_view key) const {
  return path_.empty() ? std::string(key) : fmt::format("{}.{}", path_, key);
}

Expected<JsonField> JsonField::required(std::string_view key) const {
  if (!value_->is_object()) return invalid(fmt::format("expected an object, got {}", value_->type_name()));
  const auto it = value_->find(key);
  if (it == value_->end() || it->is_null()) return invalid_argument(field_message(source_, child_path(key), "missing"));
  return JsonField(*it, source_, child_path(key));
}

std::optional<JsonField> JsonField::optional(std::string_view key) const {
  if (!value_->is_object()) return std::nullopt;
  const auto it = value_->find(key);
  if (it == value_->end() || it->is_null()) return std::nullopt;
  return JsonField(*it, source_, child_path(key));
}

JsonField JsonField::element(size_t i) const { return {(*value_)[i], source_, fmt::format("{}[{}]", path_, i)}; }

Expected<std::string> JsonField::type() const {
  DRIFT_ASSIGN_OR_RETURN(const JsonField field, required("type"));
  return field.as_string();
}

Expected<std::string> JsonField::as_string() const {
  if (!value_->is_string()) return invalid(fmt::format("expected a string, got {}", value_->type_name()));
  return value_->get<std::string>();
}

Expected<int64_t> JsonField::as_int() const {
  if (!value_->is_number_integer()) return invalid(fmt::format("expected an integer, got {}", value_->type_name()));
  return value_->get<int64_t>();
}

Expected<bool> JsonField::bool_member(std::string_view key, bool fallback) const {
  const std::optional<JsonField> field = optional(key);
  if (!field) return fallback;
  if (!field->json().is_boolean()) {
    return field->invalid(fmt::format("expected a boolean, got {}", field->json().type_name()));
  }
  return field->json().get<bool>();
}

Status JsonField::invalid(std::string_view problem) const {
  return invalid_argument(field_message(source_, path_, problem));
}

Status JsonField::unsupported(std::string_view problem) const {
  return drift::unsupported(field_message(source_, path_, problem));
}

}  // namespace drift::tokenizer
