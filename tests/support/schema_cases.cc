#include "schema_cases.h"

#include <algorithm>
#include <string_view>
#include <vector>

namespace drift::structured::testing {

namespace {

template <class T>
T pick(std::mt19937& rng, std::initializer_list<T> options) {
  std::uniform_int_distribution<size_t> d(0, options.size() - 1);
  return *(options.begin() + d(rng));
}

bool chance(std::mt19937& rng, double p) { return std::uniform_real_distribution<double>(0, 1)(rng) < p; }

}  // namespace

Json random_schema(std::mt19937& rng, int depth) {
  const std::string kind = depth >= 3 ? pick<std::string>(rng, {"string", "number", "integer", "boolean", "null", "enum"})
                                      : pick<std::string>(rng, {"object", "object", "array", "string", "number",
                                                                "integer", "boolean", "enum", "anyOf"});
  Json s;
  if (kind == "object") {
    s["type"] = "object";
    const int n = std::uniform_int_distribution<int>(0, 4)(rng);
    Json props = Json::object(), required = Json::array();
    for (int i = 0; i < n; ++i) {
      const std::string name = pick<std::string>(rng, {"a", "ab", "name", "n\u00e4me", "x\"q", "id", "id2"}) + std::to_string(i);
      props[name] = random_schema(rng, depth + 1);
      if (chance(rng, 0.6)) required.push_back(name);
    }
    if (n > 0 || chance(rng, 0.5)) s["properties"] = props;
    if (!required.empty()) s["required"] = required;
    s["additionalProperties"] = n > 0 ? false : chance(rng, 0.5);
  } else if (kind == "array") {
    s["type"] = "array";
    s["items"] = random_schema(rng, depth + 1);
    if (chance(rng, 0.5)) s["minItems"] = std::uniform_int_distribution<int>(0, 2)(rng);
    s["maxItems"] = s.value("minItems", 0) + std::uniform_int_distribution<int>(0, 3)(rng);
  } else if (kind == "string") {
    s["type"] = "string";
    if (chance(rng, 0.4)) s["minLength"] = std::uniform_int_distribution<int>(0, 3)(rng);
    s["maxLength"] = s.value("minLength", 0) + std::uniform_int_distribution<int>(0, 12)(rng);
  } else if (kind == "enum") {
    s["enum"] = pick<Json>(rng, {Json::array({"red", "green", "gre"}), Json::array({1, 12, 2.5, nullptr}),
                                 Json::array({true, "true", Json::array({1, 2})}), Json::array({Json{{"k", "v"}}})});
  } else if (kind == "anyOf") {
    s["anyOf"] = Json::array({Json{{"type", "string"}, {"maxLength", 5}}, Json{{"type", "integer"}},
                              random_schema(rng, depth + 1)});
  } else {
    s["type"] = kind;
  }
  if (chance(rng, 0.2)) s["description"] = "noise";
  return s;
}

std::string random_document(const SchemaNode* root, std::mt19937& rng, size_t max_bytes) {
  static const std::vector<std::string> alphabet = [] {
    std::vector<std::string> a;
    for (char c : std::string_view("{}[]\",:-+.eE0123456789 \ntrufalsn\\/buabcxyzAQkvdghijmopqw")) a.emplace_back(1, c);
    for (const char* multi : {"\u00e4", "\u20ac", "\U0001F600"}) a.emplace_back(multi);
    return a;
  }();
  JsonMatcher m(root, 2);
  std::string text;
  while (!m.finished() && text.size() < max_bytes) {
    if (m.can_end() && chance(rng, 0.3)) break;
    std::vector<const std::string*> ok;
    for (const std::string& c : alphabet) {
      JsonMatcher trial = m;
      if (trial.advance(c)) ok.push_back(&c);
    }
    if (ok.empty()) break;
    // Closing bytes are favoured so that documents end.
    const std::string* c = ok[std::uniform_int_distribution<size_t>(0, ok.size() - 1)(rng)];
    for (const std::string* o : ok)
      if ((*o == "}" || *o == "]" || *o == "\"") && chance(rng, 0.15)) c = o;
    m.advance(*c);
    text += *c;
  }
  return m.can_end() ? text : std::string();
}

bool validates(const Json& v, const Json& s, const Json& doc) {
  if (s.contains("$ref")) {
    const std::string ref = s["$ref"];
    return validates(v, doc["$defs"][ref.substr(8)], doc);
  }
  if (s.contains("const") && v != s["const"]) return false;
  if (s.contains("enum") && std::find(s["enum"].begin(), s["enum"].end(), v) == s["enum"].end()) return false;
  if (s.contains("anyOf")) {
    bool any = false;
    for (const Json& b : s["anyOf"]) any = any || validates(v, b, doc);
    if (!any) return false;
  }
  if (s.contains("type")) {
    const std::string t = s["type"];
    const bool ok = (t == "object" && v.is_object()) || (t == "array" && v.is_array()) || (t == "string" && v.is_string()) ||
                    (t == "number" && v.is_number()) || (t == "integer" && v.is_number_integer()) ||
                    (t == "boolean" && v.is_boolean()) || (t == "null" && v.is_null());
    if (!ok) return false;
  }
  if (v.is_object()) {
    const Json props = s.value("properties", Json::object());
    for (const Json& r : s.value("required", Json::array()))
      if (!v.contains(r.get<std::string>())) return false;
    for (const auto& [k, value] : v.items()) {
      if (props.contains(k)) {
        if (!validates(value, props[k], doc)) return false;
      } else if (s.value("additionalProperties", true) == false) {
        return false;
      }
    }
  }
  if (v.is_array()) {
    if (v.size() < s.value("minItems", size_t(0)) || (s.contains("maxItems") && v.size() > s["maxItems"].get<size_t>()))
      return false;
    if (s.contains("items"))
      for (const Json& item : v)
        if (!validates(item, s["items"], doc)) return false;
  }
  if (v.is_string()) {
    // Characters as JSON Schema counts them: code points.
    size_t n = 0;
    for (char c : v.get<std::string>()) n += (uint8_t(c) & 0xC0) != 0x80;
    if (n < s.value("minLength", size_t(0)) || (s.contains("maxLength") && n > s["maxLength"].get<size_t>())) return false;
  }
  return true;
}

}  // namespace drift::structured::testing
