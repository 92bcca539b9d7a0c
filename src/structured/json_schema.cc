#include "structured/json_schema.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

namespace drift::structured {

using Json = nlohmann::json;

class SchemaCompiler {
 public:
  SchemaCompiler(CompiledSchema& out, const Json& document) : out_(out), document_(document) {}

  Expected<const SchemaNode*> node(const Json& s, const std::string& where, int depth) {
    if (depth > 32) return invalid_argument(fmt::format("{}: the schema nests deeper than 32 levels", where));
    if (s.is_boolean()) {
      if (!s.get<bool>()) return invalid_argument(fmt::format("{}: a false schema admits no value", where));
      return make();
    }
    if (!s.is_object()) return invalid_argument(fmt::format("{}: a schema must be an object", where));
    DRIFT_RETURN_IF_ERROR(check_keywords(s, where));
    if (auto ref = s.find("$ref"); ref != s.end()) return resolve(*ref, where, depth);
    SchemaNode* n = make();
    DRIFT_RETURN_IF_ERROR(read_types(s, where, *n));
    DRIFT_RETURN_IF_ERROR(read_literals(s, where, *n));
    for (const char* key : {"anyOf", "oneOf"}) {
      if (!s.contains(key)) continue;
      if (!s[key].is_array() || s[key].empty()) return invalid_argument(fmt::format("{}: {} must be a non-empty array", where, key));
      for (size_t i = 0; i < s[key].size(); ++i) {
        DRIFT_ASSIGN_OR_RETURN(const SchemaNode* branch, node(s[key][i], fmt::format("{}/{}/{}", where, key, i), depth + 1));
        n->any_of.push_back(branch);
      }
    }
    tag_union(s, *n);
    DRIFT_RETURN_IF_ERROR(read_object(s, where, depth, *n));
    DRIFT_RETURN_IF_ERROR(read_array(s, where, depth, *n));
    DRIFT_RETURN_IF_ERROR(read_string(s, where, *n));
    return n;
  }

 private:
  SchemaNode* make() {
    out_.nodes_.push_back(std::make_unique<SchemaNode>());
    return out_.nodes_.back().get();
  }

  // An anyOf whose branches are all {"name": {"const": tag}, key: schema}, both required, nothing else,
  // the same key in each and distinct tags: a tagged union, matched by its tag (anyOf alone picks a branch
  // by the first byte, and these all start with '{').
  static void tag_union(const Json& s, SchemaNode& n) {
    if (n.any_of.size() < 2 || n.any_of.size() > kMaxLiterals || !s.contains("anyOf")) return;
    const Json& branches = s["anyOf"];
    std::string value_key;
    std::vector<std::string> tags;
    for (size_t i = 0; i < branches.size(); ++i) {
      const Json& b = branches[i];
      if (!b.is_object()) return;
      const Json props = b.value("properties", Json::object());
      const Json required = b.value("required", Json::array());
      if (b.value("type", Json()) != "object" || b.value("additionalProperties", true) != false || props.size() != 2 ||
          required.size() != 2 || !props.contains("name") || !props["name"].is_object() ||
          !props["name"].contains("const") || !props["name"]["const"].is_string())
        return;
      for (const auto& [key, value] : props.items())
        if (key != "name" && (i == 0 || key == value_key)) value_key = key;
      if (value_key.empty() || !props.contains(value_key)) return;
      const std::string tag = props["name"]["const"].dump();
      if (std::find(tags.begin(), tags.end(), tag) != tags.end()) return;
      tags.push_back(tag);
    }
    for (const SchemaNode* b : n.any_of) {
      const auto& names = b->property_names;
      n.tagged_values.push_back(b->property_schemas[names[0] == "name" ? 1 : 0]);
    }
    n.tags = std::move(tags);
    n.tag_head = "\"name\": ";
    n.tag_middle = ", " + Json(value_key).dump() + ": ";
  }

  static Status check_keywords(const Json& s, const std::string& where) {
    static const std::set<std::string> known = {
        "type", "properties", "required", "additionalProperties", "items", "minItems", "maxItems", "minLength",
        "maxLength", "enum", "const", "anyOf", "oneOf", "$ref", "$defs", "definitions", "title", "description",
        "default", "examples", "$schema", "$id", "$comment", "strict", "name"};
    for (const auto& [key, value] : s.items())
      if (!known.count(key))
        return unsupported(fmt::format("{}: the keyword '{}' is not supported in structured output", where, key));
    return Status::Ok();
  }

  Expected<const SchemaNode*> resolve(const Json& ref, const std::string& where, int depth) {
    if (!ref.is_string()) return invalid_argument(fmt::format("{}: $ref must be a string", where));
    const std::string r = ref.get<std::string>();
    for (const char* base : {"#/$defs/", "#/definitions/"}) {
      if (r.rfind(base, 0) != 0) continue;
      const std::string name = r.substr(std::string(base).size());
      const Json& defs = document_[std::string(base).substr(2, std::string(base).size() - 3)];
      if (!defs.is_object() || !defs.contains(name)) break;
      // Each use compiles its own copy; a recursive definition hits the depth cap with a named error.
      return node(defs[name], r, depth + 1);
    }
    return unsupported(fmt::format("{}: $ref '{}' does not name a local #/$defs or #/definitions entry", where, r));
  }

  static Status read_types(const Json& s, const std::string& where, SchemaNode& n) {
    auto t = s.find("type");
    if (t == s.end()) return Status::Ok();
    static const std::map<std::string, uint8_t> bits = {{"object", kObject}, {"array", kArray}, {"string", kString},
                                                        {"number", kNumber | kInteger}, {"integer", kInteger},
                                                        {"boolean", kBoolean}, {"null", kNull}};
    const Json list = t->is_array() ? *t : Json::array({*t});
    n.types = 0;
    for (const Json& name : list) {
      auto it = name.is_string() ? bits.find(name.get<std::string>()) : bits.end();
      if (it == bits.end()) return invalid_argument(fmt::format("{}: unknown type {}", where, name.dump()));
      n.types |= it->second;
    }
    return Status::Ok();
  }

  static Status read_literals(const Json& s, const std::string& where, SchemaNode& n) {
    if (s.contains("const")) n.literals.push_back(s["const"].dump());
    if (auto e = s.find("enum"); e != s.end()) {
      if (!e->is_array() || e->empty()) return invalid_argument(fmt::format("{}: enum must be a non-empty array", where));
      for (const Json& v : *e) n.literals.push_back(v.dump());
    }
    if (n.literals.size() > kMaxLiterals)
      return unsupported(fmt::format("{}: enum has {} values; at most {} are supported", where, n.literals.size(), kMaxLiterals));
    return Status::Ok();
  }

  Status read_object(const Json& s, const std::string& where, int depth, SchemaNode& n) {
    if (auto p = s.find("properties"); p != s.end()) {
      if (!p->is_object()) return invalid_argument(fmt::format("{}: properties must be an object", where));
      for (const auto& [name, sub] : p->items()) {
        DRIFT_ASSIGN_OR_RETURN(const SchemaNode* child, node(sub, where + "/properties/" + name, depth + 1));
        n.property_names.push_back(name);
        n.quoted_property_names.push_back(Json(name).dump());
        n.property_schemas.push_back(child);
        n.required.push_back(false);
      }
    }
    if (n.property_names.size() > kMaxLiterals)
      return unsupported(fmt::format("{}: {} properties; at most {} are supported", where, n.property_names.size(), kMaxLiterals));
    if (auto r = s.find("required"); r != s.end()) {
      if (!r->is_array()) return invalid_argument(fmt::format("{}: required must be an array", where));
      for (const Json& name : *r) {
        size_t i = 0;
        while (i < n.property_names.size() && !(name.is_string() && n.property_names[i] == name.get<std::string>())) ++i;
        if (i == n.property_names.size())
          return unsupported(fmt::format("{}: required property {} is not in properties", where, name.dump()));
        n.required[i] = true;
      }
    }
    if (auto a = s.find("additionalProperties"); a != s.end()) {
      if (a->is_boolean()) {
        n.additional_properties = a->get<bool>();
      } else {
        DRIFT_ASSIGN_OR_RETURN(n.additional_schema, node(*a, where + "/additionalProperties", depth + 1));
      }
    }
    return Status::Ok();
  }

  Status read_array(const Json& s, const std::string& where, int depth, SchemaNode& n) {
    if (auto i = s.find("items"); i != s.end()) {
      DRIFT_ASSIGN_OR_RETURN(n.items, node(*i, where + "/items", depth + 1));
    }
    if (s.contains("minItems")) n.min_items = s["minItems"].get<int64_t>();
    if (s.contains("maxItems")) n.max_items = s["maxItems"].get<int64_t>();
    if (n.min_items < 0 || (n.max_items >= 0 && n.max_items < n.min_items))
      return invalid_argument(fmt::format("{}: minItems/maxItems admit no array", where));
    return Status::Ok();
  }

  static Status read_string(const Json& s, const std::string& where, SchemaNode& n) {
    if (s.contains("minLength")) n.min_length = s["minLength"].get<int64_t>();
    if (s.contains("maxLength")) n.max_length = s["maxLength"].get<int64_t>();
    if (n.min_length < 0 || (n.max_length >= 0 && n.max_length < n.min_length))
      return invalid_argument(fmt::format("{}: minLength/maxLength admit no string", where));
    return Status::Ok();
  }

  CompiledSchema& out_;
  const Json& document_;
};

Expected<CompiledSchema> CompiledSchema::compile(const Json& schema) {
  CompiledSchema out;
  if (schema.is_null()) {
    out.nodes_.push_back(std::make_unique<SchemaNode>());
    out.nodes_.back()->types = kObject;
    out.root_ = out.nodes_.back().get();
    return out;
  }
  SchemaCompiler compiler(out, schema);
  try {
    DRIFT_ASSIGN_OR_RETURN(out.root_, compiler.node(schema, "#", 0));
  } catch (const Json::exception& e) {
    return invalid_argument(fmt::format("the schema has a value of the wrong type: {}", e.what()));
  }
  return out;
}

}  // namespace drift::structured
