// How values convert and print: Python's float repr, str/repr of containers, json.dumps as Hugging
// Face's tojson calls it, and the Unicode string helpers.
#include "tokenizer/jinja/value.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "tokenizer/jinja/format.h"
#include "tokenizer/jinja/text.h"

namespace drift::jinja {
namespace {

TEST(FormatFloat, MatchesPythonRepr) {
  EXPECT_EQ(format_float(1.0), "1.0");
  EXPECT_EQ(format_float(-0.0), "-0.0");
  EXPECT_EQ(format_float(0.1), "0.1");
  EXPECT_EQ(format_float(2.5e-5), "2.5e-05");
  EXPECT_EQ(format_float(0.0001), "0.0001");
  EXPECT_EQ(format_float(123456789.125), "123456789.125");
  EXPECT_EQ(format_float(1e15), "1000000000000000.0");
  EXPECT_EQ(format_float(1e16), "1e+16");
  EXPECT_EQ(format_float(1.5e300), "1.5e+300");
  EXPECT_EQ(format_float(1.0 / 3.0), "0.3333333333333333");
  EXPECT_EQ(format_float(std::numeric_limits<double>::infinity()), "inf");
  EXPECT_EQ(format_float(std::nan("")), "nan");
}

TEST(Repr, QuotesAndEscapesLikePython) {
  EXPECT_EQ(to_repr(Value::from_string("plain")), "'plain'");
  EXPECT_EQ(to_repr(Value::from_string("it's")), "\"it's\"");
  EXPECT_EQ(to_repr(Value::from_string("both ' and \"")), "'both \\' and \"'");
  EXPECT_EQ(to_repr(Value::from_string("tab\t\x01\u00e9")), "'tab\\t\\x01\u00e9'");
  EXPECT_EQ(to_str(Value::from_json(nlohmann::ordered_json::parse(R"({"a": [1, 2.0, null, true, "x"]})"))),
            "{'a': [1, 2.0, None, True, 'x']}");
  EXPECT_EQ(to_str(Value()), "");
}

TEST(Json, DumpsLikePythonJsonDumps) {
  const Value value = Value::from_json(nlohmann::ordered_json::parse(R"({"z": [1, 1.5, "é\u2028"], "a": {}})"));
  EXPECT_EQ(*to_json_text(value, {}), "{\"z\": [1, 1.5, \"é\u2028\"], \"a\": {}}");
  JsonStyle ascii;
  ascii.ensure_ascii = true;
  EXPECT_EQ(*to_json_text(Value::from_string("é😀"), ascii), R"("\u00e9\ud83d\ude00")");
  JsonStyle sorted;
  sorted.sort_keys = true;
  EXPECT_EQ(*to_json_text(value, sorted), "{\"a\": {}, \"z\": [1, 1.5, \"é\u2028\"]}");
  EXPECT_EQ(*to_json_text(Value::from_float(std::numeric_limits<double>::infinity()), {}), "Infinity");
  EXPECT_FALSE(to_json_text(Value(), {}).ok());
}

TEST(Value, FromJsonKeepsKindsAndOrder) {
  const Value value =
      Value::from_json(nlohmann::ordered_json::parse(R"({"i": 1, "f": 1.0, "u": 18446744073709551615, "n": null})"));
  ASSERT_TRUE(value.is_dict());
  const Dict& dict = value.as_dict();
  EXPECT_TRUE(dict.find("i")->is_int());
  EXPECT_TRUE(dict.find("f")->is_float());
  EXPECT_TRUE(dict.find("n")->is_none());
  EXPECT_EQ(dict.entries().front().first, "i");
  EXPECT_EQ(dict.entries().back().first, "n");
}

TEST(Text, InvalidUtf8SurvivesARoundTrip) {
  const std::string bytes =
      "ok\xff\xfe"
      "\xc3\xa9";
  EXPECT_EQ(text::encode(text::decode(bytes)), bytes);
  EXPECT_EQ(text::count_code_points(bytes), 5u);
  EXPECT_EQ(text::upper(bytes),
            "OK\xff\xfe"
            "\xc3\x89");
}

TEST(Text, PythonStringOperations) {
  EXPECT_EQ(text::split_lines("a\nb\r\nc\rd\u2028e\n"), (std::vector<std::string>{"a", "b", "c", "d", "e"}));
  EXPECT_EQ(text::split_whitespace("  a \t b\u3000c  ", 1), (std::vector<std::string>{"a", "b\u3000c"}));
  EXPECT_EQ(text::split_on("a,b,c", ",", 1), (std::vector<std::string>{"a", "b,c"}));
  EXPECT_EQ(text::title_case("hello wORLD o'neil"), "Hello World O'Neil");
  EXPECT_EQ(text::capitalize("\u00dfx"), "Ssx");
  EXPECT_EQ(text::lower("\u0130"), "i\u0307");
  EXPECT_EQ(text::replace("aaa", "a", "bb", 2), "bbbba");
}

}  // namespace
}  // namespace drift::jinja
