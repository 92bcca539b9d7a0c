// The matcher accepts exactly the JSON texts that validate: hand-written cases at the byte where they must
// fail, and 300 random schemas with random documents walked through the matcher, each parsed by
// nlohmann::json and checked by an independent validator.
#include "structured/json_matcher.h"

#include <gtest/gtest.h>

#include <tuple>

#include "schema_cases.h"

namespace drift::structured {
namespace {

using testing::Json;

CompiledSchema compile(const Json& schema) {
  auto c = CompiledSchema::compile(schema);
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  return std::move(*c);
}

// How many bytes of `text` the matcher takes, and whether the whole is a complete document.
std::pair<size_t, bool> run(const CompiledSchema& schema, std::string_view text, int32_t ws = 2) {
  JsonMatcher m(schema.root(), ws);
  for (size_t i = 0; i < text.size(); ++i)
    if (!m.advance(uint8_t(text[i]))) return {i, false};
  return {text.size(), m.can_end()};
}

TEST(JsonMatcher, ObjectsFollowTheirSchema) {
  const CompiledSchema s = compile(Json::parse(R"({"type": "object", "properties": {"name": {"type": "string",
      "maxLength": 3}, "age": {"type": "integer"}, "tags": {"type": "array", "items": {"enum": ["a", "b"]},
      "maxItems": 2}}, "required": ["name"], "additionalProperties": false})"));
  const std::string valid = R"({"name": "Bob", "age": -12, "tags": ["a","b"]})";
  EXPECT_EQ(run(s, valid), std::make_pair(valid.size(), true));
  EXPECT_EQ(run(s, R"({"age":1})").first, 8u) << "'}' before the required name";
  EXPECT_EQ(run(s, R"({"nam":1})").first, 5u) << "no such key";
  EXPECT_EQ(run(s, R"({"name":"Bobby"})").first, 12u) << "maxLength 3";
  EXPECT_EQ(run(s, R"({"name":"B","name":"C"})").first, 13u) << "a key twice";
  EXPECT_EQ(run(s, R"({"name":"B","age":1.5})").first, 19u) << "integer";
  EXPECT_EQ(run(s, R"({"name":"B","tags":["a","b","a"]})").first, 27u) << "maxItems 2";
  EXPECT_EQ(run(s, R"({"name":"B"} )").first, 12u) << "nothing after the document";
  EXPECT_EQ(run(s, "{   \"name\":\"B\"}").first, 3u) << "at most 2 blanks in a row";
}

TEST(JsonMatcher, ScalarsLiteralsAndStrings) {
  const CompiledSchema any = compile(Json::parse(R"({"type": ["number", "string", "boolean", "null"]})"));
  EXPECT_FALSE(run(any, "1e100").second) << "exponents stay within 2 digits: every parser reads the value";
  for (const char* ok : {"0", "-0.5e+10", "12", "true", "false", "null", R"("a\"\\\u00e9\n")", "\"\xc3\xa4\""})
    EXPECT_TRUE(run(any, ok).second) << ok;
  for (const char* bad : {"01", "-", "1.", "1e", "tru", "nul", "\"\\x\"", "\"\\ud800\"", "\"\xc3\"", "\"\xed\xa0\x80\""})
    EXPECT_FALSE(run(any, bad).second) << bad;
  const CompiledSchema e = compile(Json::parse(R"({"enum": [1, 12, "x", [true]]})"));
  for (const char* ok : {"1", "12", "\"x\"", "[true]"}) EXPECT_TRUE(run(e, ok).second) << ok;
  for (const char* bad : {"2", "123", "\"y\"", "[false]"}) EXPECT_FALSE(run(e, bad).second) << bad;
}

TEST(JsonMatcher, JsonObjectModeIsAnyObject) {
  const CompiledSchema s = compile(nullptr);
  EXPECT_TRUE(run(s, R"({"k": [1, {"z": null}], "q": "v"})").second);
  EXPECT_FALSE(run(s, "[1]").second);
  EXPECT_FALSE(run(s, "\"str\"").second);
}

TEST(JsonMatcher, UnsupportedKeywordsAreNamed) {
  for (const char* keyword : {"pattern", "format", "minimum", "patternProperties", "allOf"}) {
    const auto c = CompiledSchema::compile(Json{{"type", "string"}, {keyword, 1}});
    ASSERT_FALSE(c.ok()) << keyword;
    EXPECT_NE(c.status().message().find(keyword), std::string::npos) << c.status().message();
  }
  EXPECT_FALSE(CompiledSchema::compile(Json::parse(R"({"$ref": "#/$defs/n", "$defs": {"n": {"type": "array",
      "items": {"$ref": "#/$defs/n"}}}})")).ok()) << "recursion is refused, not looped over";
}

TEST(JsonMatcher, RandomSchemasGiveDocumentsThatParseAndValidate) {
  std::mt19937 rng(20261124);
  int documents = 0;
  for (int i = 0; i < 300; ++i) {
    const Json schema = testing::random_schema(rng);
    const CompiledSchema compiled = compile(schema);
    for (int k = 0; k < 5; ++k) {
      const std::string text = testing::random_document(compiled.root(), rng);
      if (text.empty()) continue;
      ++documents;
      const Json value = Json::parse(text, nullptr, false);
      ASSERT_FALSE(value.is_discarded()) << "does not parse: " << text << "\nschema " << schema;
      EXPECT_TRUE(testing::validates(value, schema, schema)) << text << "\nschema " << schema;
    }
  }
  EXPECT_GT(documents, 1000) << "too few documents finished to mean anything";
}

}  // namespace
}  // namespace drift::structured

namespace drift::structured {
namespace {

// A forced tool call: the document inside fixed text, nothing but that text around it.
TEST(JsonMatcher, PrefixAndSuffixWrapTheDocument) {
  const auto schema = CompiledSchema::compile(Json::parse(R"({"type": "object", "properties": {"n": {"type": "integer"}},
      "required": ["n"], "additionalProperties": false})"));
  ASSERT_TRUE(schema.ok());
  const std::string prefix = "<tool_call>\n", suffix = "\n</tool_call>";
  auto take = [&](std::string_view text) {
    JsonMatcher m(schema->root(), 2, &prefix, &suffix);
    size_t i = 0;
    while (i < text.size() && m.advance(uint8_t(text[i]))) ++i;
    return std::make_tuple(i, m.can_end(), m.finished());
  };
  const std::string whole = "<tool_call>\n{\"n\": 12}\n</tool_call>";
  EXPECT_EQ(take(whole), std::make_tuple(whole.size(), true, true));
  EXPECT_EQ(take("<tool_call>\n{\"n\": 12}"), std::make_tuple(size_t(21), false, false)) << "the suffix is due";
  EXPECT_EQ(std::get<0>(take("<tool_cal {")), 9u) << "the prefix is literal";
  EXPECT_EQ(std::get<0>(take("<tool_call>\n{\"n\": 1} \n</tool_call>")), 20u) << "nothing between document and suffix";
  EXPECT_EQ(std::get<0>(take(whole + "x")), whole.size()) << "nothing after the suffix";
}

}  // namespace
}  // namespace drift::structured

namespace drift::structured {
namespace {

// Calls of several tools: the name chooses the arguments' schema (anyOf alone could only ever take the
// first branch, since every call starts with '{').
TEST(JsonMatcher, TaggedUnionsLetTheNameChooseTheSchema) {
  const auto schema = CompiledSchema::compile(Json::parse(R"({"anyOf": [
      {"type": "object", "properties": {"name": {"const": "a"}, "arguments": {"type": "object",
         "properties": {"x": {"type": "string"}}, "required": ["x"], "additionalProperties": false}},
       "required": ["name", "arguments"], "additionalProperties": false},
      {"type": "object", "properties": {"name": {"const": "ab"}, "arguments": {"type": "object",
         "properties": {"y": {"type": "integer"}}, "required": ["y"], "additionalProperties": false}},
       "required": ["name", "arguments"], "additionalProperties": false}]})"));
  ASSERT_TRUE(schema.ok()) << schema.status().to_string();
  ASSERT_EQ(schema->root()->tags.size(), 2u);
  EXPECT_TRUE(run(*schema, R"({"name": "a", "arguments": {"x": "s"}})").second);
  EXPECT_TRUE(run(*schema, R"({"name": "ab", "arguments": {"y": 3}})").second);
  EXPECT_FALSE(run(*schema, R"({"name": "ab", "arguments": {"x": "s"}})").second) << "ab's arguments are y";
  EXPECT_FALSE(run(*schema, R"({"name": "a", "arguments": {"y": 3}})").second) << "a's arguments are x";
  EXPECT_FALSE(run(*schema, R"({"name": "c", "arguments": {}})").second);
  std::mt19937 rng(3);
  int documents = 0;
  const Json doc = Json::parse(R"({"anyOf": [{"type": "object", "properties": {"name": {"const": "a"}, "arguments":
      {"type": "string", "maxLength": 3}}, "required": ["name", "arguments"], "additionalProperties": false},
      {"type": "object", "properties": {"name": {"const": "b"}, "arguments": {"type": "integer"}},
       "required": ["name", "arguments"], "additionalProperties": false}]})");
  const CompiledSchema compiled = compile(doc);
  for (int i = 0; i < 50; ++i) {
    const std::string text = testing::random_document(compiled.root(), rng);
    if (text.empty()) continue;
    ++documents;
    const Json value = Json::parse(text);
    EXPECT_TRUE(testing::validates(value, doc, doc)) << text;
  }
  EXPECT_GT(documents, 20);
}

}  // namespace
}  // namespace drift::structured
