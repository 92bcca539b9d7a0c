// The subset of JSON Schema that structured output accepts, compiled into a tree the matcher walks.
// Supported: type (object, array, string, number, integer, boolean, null, or a list of them), properties,
// required, additionalProperties (false, or true/absent: any further keys; strict schemas say false),
// items, minItems, maxItems, minLength, maxLength, enum, const, anyOf/oneOf, $ref to #/$defs or
// #/definitions, and the annotations (title, description, default, examples, $schema). Anything else
// (pattern, format, numeric ranges, ...) is refused with the keyword named: a schema the output may
// violate would break the guarantee that it validates.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "drift/status.h"

namespace drift::structured {

enum TypeBits : uint8_t {
  kObject = 1, kArray = 2, kString = 4, kNumber = 8, kInteger = 16, kBoolean = 32, kNull = 64,
  kAnyType = 127,
};

// enum values and object properties are tracked in 64-bit sets.
constexpr size_t kMaxLiterals = 64;

struct SchemaNode {
  uint8_t types = kAnyType;
  // enum/const: the allowed values, each as compact JSON text; empty: no such restriction.
  std::vector<std::string> literals;
  // object
  std::vector<std::string> property_names;  // in the schema's order
  std::vector<std::string> quoted_property_names;  // each as a JSON string: what a key must spell
  std::vector<const SchemaNode*> property_schemas;
  std::vector<bool> required;
  bool additional_properties = true;
  const SchemaNode* additional_schema = nullptr;  // for keys beyond `properties`; nullptr: any value
  // array
  const SchemaNode* items = nullptr;  // nullptr: any value
  int64_t min_items = 0, max_items = -1;
  // string
  int64_t min_length = 0, max_length = -1;
  // anyOf/oneOf: a value must match one branch (the branches' first bytes must tell them apart).
  std::vector<const SchemaNode*> any_of;
  // anyOf of objects tagged by a const "name" with one other property each (tool calls): written as
  // {"name": <tag>, "<value_key>": <the tag's schema>}, the tag choosing the schema. Empty: not tagged.
  std::vector<std::string> tags;  // each tag as a JSON string, quotes included
  std::vector<const SchemaNode*> tagged_values;
  std::string tag_head;    // "\"name\": " after the '{'
  std::string tag_middle;  // ", \"<value_key>\": " between the tag and its value
};

// Owns the nodes; root() is the whole document's schema.
class CompiledSchema {
 public:
  // `schema` null (response_format json_object): any JSON object.
  static Expected<CompiledSchema> compile(const nlohmann::json& schema);
  const SchemaNode* root() const { return root_; }

 private:
  std::vector<std::unique_ptr<SchemaNode>> nodes_;
  const SchemaNode* root_ = nullptr;
  friend class SchemaCompiler;
};

}  // namespace drift::structured
