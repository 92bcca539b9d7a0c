// JSON Schema -> harmony's TypeScript-like declarations. format.md gives the shape (argument `_` with an
// inline type, descriptions as comments above fields, `?` for optional fields, defaults as trailing
// comments, an empty line after each function); the finer rules (enums, unions, oneOf, nullable, titles,
// examples, nested objects indented by four) follow what openai/harmony's renderer writes, since that is
// the text the model was trained to read. Properties keep the schema's order.
#include "tokenizer/harmony_tools.h"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <string_view>
#include <vector>

namespace drift::tokenizer::harmony {
namespace {

using Schema = nlohmann::ordered_json;

// The lines of `text` as Rust's str::lines() gives them: a trailing newline adds no empty line.
std::vector<std::string_view> lines_of(std::string_view text) {
  std::vector<std::string_view> lines;
  while (!text.empty()) {
    const size_t end = text.find('\n');
    std::string_view line = text.substr(0, end);
    if (line.ends_with('\r')) line.remove_suffix(1);
    lines.push_back(line);
    if (end == std::string_view::npos) break;
    text.remove_prefix(end + 1);
  }
  return lines;
}

const std::string* string_member(const Schema& schema, const char* key) {
  const auto it = schema.find(key);
  return it != schema.end() && it->is_string() ? &it->get_ref<const std::string&>() : nullptr;
}

const Schema* array_member(const Schema& schema, const char* key) {
  const auto it = schema.find(key);
  return it != schema.end() && it->is_array() ? &*it : nullptr;
}

bool is_enum(const Schema& schema) {
  const Schema* values = array_member(schema, "enum");
  return values && !values->empty();
}

bool is_nullable(const Schema& schema) {
  const auto it = schema.find("nullable");
  return it != schema.end() && it->is_boolean() && it->get<bool>();
}

// "default: ..." for a schema with a default: strings quoted unless they name an enum value.
std::string default_comment(const Schema& schema) {
  const Schema& value = schema.at("default");
  if (!value.is_string()) return "default: " + value.dump();
  const std::string& text = value.get_ref<const std::string&>();
  return is_enum(schema) ? "default: " + text : fmt::format("default: \"{}\"", text);
}

std::string with_null(const Schema& schema, std::string type) {
  if (is_nullable(schema) && type.find("null") == std::string::npos) type += " | null";
  return type;
}

std::string type_of(const Schema& schema, const std::string& indent);

// One variant of a oneOf: its type, then its description (unless hidden, or the same as the property's)
// and its default as a trailing comment.
std::string variant_line(const Schema& variant, const std::string& indent, bool describe,
                         const std::string* property_description) {
  std::string out = with_null(variant, type_of(variant, indent + "   "));
  std::vector<std::string> comments;
  const std::string* d = string_member(variant, "description");
  if (describe && d && !(property_description && *d == *property_description)) comments.push_back(*d);
  if (variant.contains("default")) comments.push_back(default_comment(variant));
  if (!comments.empty()) out += fmt::format(" // {}", fmt::join(comments, " "));
  return out;
}

// A property whose type is a oneOf: comments above, then one variant per line.
void one_of_property(const std::string& key, const Schema& value, const Schema& variants, bool required,
                     const std::string& indent, std::string& out) {
  const std::string* description = string_member(value, "description");
  const std::string* first_description = variants.empty() ? nullptr : string_member(variants.front(), "description");
  // A description the first variant repeats is said once, after that variant.
  const bool description_above = description && !(first_description && *first_description == *description);
  if (description_above) out += fmt::format("{}// {}\n", indent, *description);
  if (value.contains("default")) out += fmt::format("{}// {}\n", indent, default_comment(value));
  out += fmt::format("{}{}{}:\n", indent, key, required ? "" : "?");
  for (size_t i = 0; i < variants.size(); ++i) {
    const bool describe = !(i == 0 && description_above);
    out += fmt::format("{} | {}\n", indent, variant_line(variants[i], indent, describe, description));
  }
  out += fmt::format("{},\n", indent);
}

void property(const std::string& key, const Schema& value, bool required, const std::string& indent, std::string& out) {
  if (const std::string* title = string_member(value, "title")) out += fmt::format("{0}// {1}\n{0}//\n", indent, *title);
  const Schema* one_of = array_member(value, "oneOf");
  const std::string* description = string_member(value, "description");
  if (description && !one_of) out += fmt::format("{}// {}\n", indent, *description);
  if (const Schema* examples = array_member(value, "examples"); examples && !examples->empty()) {
    out += fmt::format("{}// Examples:\n", indent);
    for (const Schema& example : *examples) {
      if (example.is_string()) out += fmt::format("{}// - \"{}\"\n", indent, example.get_ref<const std::string&>());
    }
  }
  if (one_of) {
    one_of_property(key, value, *one_of, required, indent, out);
    return;
  }
  out += fmt::format("{}{}{}: {},", indent, key, required ? "" : "?", with_null(value, type_of(value, indent + "    ")));
  if (value.contains("default")) out += " // " + default_comment(value);
  out += '\n';
}

std::string object_type(const Schema& schema, const std::string& indent) {
  std::string out;
  if (const std::string* d = string_member(schema, "description")) out += fmt::format("{}// {}\n", indent, *d);
  out += "{\n";
  const auto properties = schema.find("properties");
  if (properties != schema.end() && properties->is_object()) {
    std::vector<std::string> required;
    if (const Schema* names = array_member(schema, "required")) {
      for (const Schema& n : *names) {
        if (n.is_string()) required.push_back(n.get<std::string>());
      }
    }
    for (const auto& [key, value] : properties->items()) {
      property(key, value, std::find(required.begin(), required.end(), key) != required.end(), indent, out);
    }
  }
  return out + indent + "}";
}

std::string type_of(const Schema& schema, const std::string& indent) {
  if (const Schema* variants = array_member(schema, "oneOf")) {
    std::string out;
    for (const Schema& variant : *variants) {
      out += fmt::format("\n{} | {}", indent, variant_line(variant, indent, /*describe=*/true, nullptr));
    }
    return out;
  }
  if (const Schema* types = array_member(schema, "type")) {
    std::vector<std::string> names;
    for (const Schema& t : *types) {
      if (t.is_string()) names.push_back(t == "integer" ? "number" : t.get<std::string>());
    }
    if (!names.empty()) return fmt::format("{}", fmt::join(names, " | "));
  }
  const std::string* type = string_member(schema, "type");
  if (!type) return "any";
  if (*type == "object") return object_type(schema, indent);
  if (*type == "string") {
    std::vector<std::string> values;
    if (const Schema* e = array_member(schema, "enum")) {
      for (const Schema& v : *e) {
        if (v.is_string()) values.push_back(fmt::format("\"{}\"", v.get_ref<const std::string&>()));
      }
    }
    return values.empty() ? "string" : fmt::format("{}", fmt::join(values, " | "));
  }
  if (*type == "number" || *type == "integer") return "number";
  if (*type == "boolean") return "boolean";
  if (*type == "array") {
    const auto items = schema.find("items");
    return items == schema.end() ? "Array<any>" : type_of(*items, indent) + "[]";
  }
  return "any";
}

}  // namespace

Expected<std::string> render_tools_section(std::span<const Tool> tools) {
  std::string out = "# Tools\n\n## functions\n\nnamespace functions {\n\n";
  for (size_t i = 0; i < tools.size(); ++i) {
    const Tool& tool = tools[i];
    if (tool.name.empty()) return invalid_argument(fmt::format("developer.tools[{}]: the tool has no name", i));
    for (std::string_view line : lines_of(tool.description)) out += fmt::format("// {}\n", line);
    if (tool.parameters_json.empty()) {
      out += fmt::format("type {} = () => any;\n\n", tool.name);
      continue;
    }
    Schema parameters;
    try {
      parameters = Schema::parse(tool.parameters_json);
    } catch (const Schema::parse_error& e) {
      return invalid_argument(
          fmt::format("developer.tools[{}] ({}): parameters: invalid JSON: {}", i, tool.name, e.what()));
    }
    if (!parameters.is_object()) {
      return invalid_argument(
          fmt::format("developer.tools[{}] ({}): parameters: expected a JSON Schema object", i, tool.name));
    }
    out += fmt::format("type {} = (_: {}) => any;\n\n", tool.name, type_of(parameters, ""));
  }
  return out + "} // namespace functions";
}

}  // namespace drift::tokenizer::harmony
