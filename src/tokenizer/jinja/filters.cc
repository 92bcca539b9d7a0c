#include "tokenizer/jinja/filters.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <unordered_map>

#include "tokenizer/jinja/access.h"
#include "tokenizer/jinja/call_args.h"
#include "tokenizer/jinja/format.h"
#include "tokenizer/jinja/is_tests.h"
#include "tokenizer/jinja/methods.h"
#include "tokenizer/jinja/operators.h"
#include "tokenizer/jinja/text.h"

namespace drift::jinja {
namespace {

using FilterFn = Expected<Value> (*)(const Value& input, CallArgs args);

Value string_value(std::string s) { return Value::from_string(std::move(s)); }

bool flag(const std::optional<Value>& arg) { return arg && arg->truthy(); }

// ---- text ----

Expected<Value> filter_trim(const Value& input, CallArgs args) {
  DRIFT_ASSIGN_OR_RETURN(auto bound, bind_args("trim", std::move(args), {"chars"}));
  if (!bound[0] || bound[0]->is_none()) return string_value(text::strip(to_str(input), nullptr, true, true));
  DRIFT_ASSIGN_OR_RETURN(std::string chars, string_arg("trim", "chars", *bound[0]));
  const std::u32string char_set = text::decode(chars);
  return string_value(text::strip(to_str(input), &char_set, true, true));
}

template <std::string (*Transform)(std::string_view)>
Expected<Value> filter_text_transform(const Value& input, CallArgs args) {
  DRIFT_ASSIGN_OR_RETURN(auto bound, bind_args("filter", std::move(args), {}));
  return string_value(Transform(to_str(input)));
}

// Jinja2's title filter differs from str.title(): words start after '-', whitespace, or an opening
// bracket, and each word is its first character upper-cased plus the rest lower-cased.
std::string jinja_title(std::string_view s) {
  const auto is_delimiter = [](char32_t c) {
    return c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || text::is_space(c);
  };
  std::string out;
  bool word_start = true;
  for (char32_t c : text::decode(s)) {
    std::string one;
    text::append_code_point(c, one);
    if (is_delimiter(c)) {
      out += one;
      word_start = true;
    } else {
      out += word_start ? text::upper(one) : text::lower(one);
      word_start = false;
    }
  }
  return out;
}

Expected<Value> filter_replace(const Value& input, CallArgs args) {
  DRIFT_ASSIGN_OR_RETURN(auto bound, bind_args("replace", std::move(args), {"old", "new", "count"}));
  if (!bound[0] || !bound[1]) return invalid_argument("replace() needs the old and the new text");
  int64_t count = -1;
  if (bound[2] && !bound[2]->is_none()) {
    DRIFT_ASSIGN_OR_RETURN(count, int_arg("replace", "count", *bound[2]));
  }
  return string_value(text::replace(to_str(input), to_str(*bound[0]), to_str(*bound[1]), count));
}

Expected<Value> filter_indent(const Value& input, CallArgs args) {
  DRIFT_ASSIGN_OR_RETURN(auto bound, bind_args("indent", std::move(args), {"width", "first", "blank"}));
  std::string indentation(4, ' ');
  if (bound[0]) {
    if (bound[0]->is_string()) {
      indentation = bound[0]->as_string();
    } else {
      DRIFT_ASSIGN_OR_RETURN(const int64_t width, int_arg("indent", "width", *bound[0]));
      indentation.assign(static_cast<size_t>(std::max<int64_t>(width, 0)), ' ');
    }
  }
  // Jinja2 appends a newline before splitting, so a trailing newline survives as an empty last line.
  const std::vector<std::string> lines = text::split_lines(to_str(input) + "\n");
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) out += "\n";
    const bool indent_line = i > 0 && (flag(bound[2]) || !lines[i].empty());
    if (indent_line) out += indentation;
    out += lines[i];
  }
  if (flag(bound[1])) out = indentation + out;
  return string_value(std::move(out));
}

Expected<Value> filter_escape(const Value& input, CallArgs args) {
  DRIFT_ASSIGN_OR_RETURN(auto bound, bind_args("escape", std::move(args), {}));
  std::string out;
  for (char c : to_str(input)) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out.push_back(c);
    }
  }
  return string_value(std::move(out));
}

// str.center(width): the padding goes right first when it is odd, as CPython splits it.
Expected<Value> filter_center(const Value& input, CallArgs args) {
  DRIFT_ASSIGN_OR_RETURN(auto bound, bind_args("center", std::move(args), {"width"}));
  int64_t width = 80;
  if (bound[0]) {
    DRIFT_ASSIGN_OR_RETURN(width, int_arg("center", "width", *bound[0]));
  }
  const std::string s = to_str(input);
  const auto length = static_cast<int64_t>(text::count_code_points(s));
  if (width <= length) return string_value(s);
  const int64_t padding = width - length;
  const int64_t left = padding / 2 + (padding & width & 1);
  return string_value(std::string(static_cast<size_t>(left), ' ') + s +
                      std::string(static_cast<size_t>(padding - left), ' '));
}

// Words as Jinja2 counts them: runs of letters, digits and underscores.
Expected<Value> filter_wordcount(const Value& input, CallArgs args) {
  DRIFT_ASSIGN_OR_RETURN(auto bound, bind_args("wordcount", std::move(args), {}));
  int64_t words = 0;
  bool in_word = false;
  for (char32_t c : text::decode(to_str(input))) {
    const bool word_char = text::is_word_char(c);
    if (word_char && !in_word) ++words;
    in_word = word_char;
  }
  return Value::from_int(words);
}

Expected<Value> filter_string(const Value& input, CallArgs args) {
  DRIFT_ASSIGN_OR_RETURN(auto bound, bind_args("string", std::move(args), {}));
  return string_value(to_str(input));
}

// Autoescaping is off in chat templates, so marking text safe changes nothing.
Expected<Value> filter_safe(const Value& input, CallArgs args) {
  DRIFT_ASSIGN_OR_RETURN(auto bound, bind_args("safe", std::move(args), {}));
  return input;
}

// Hugging Face's tojson: tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False).
Expected<Value> filter_tojson(const Value& input, CallArgs args) {
  DRIFT_ASSIGN_OR_RETURN(auto bound,
                         bind_args("tojson", std::move(args), {"ensure_ascii", "indent", "separators", "sort_keys"}));
  JsonStyle style;
  style.ensure_ascii = flag(bound[0]);
  style.sort_keys = flag(bound[3]);
  if (bound[1] && !bound[1]->is_none()) {
    if (bound[1]->is_string()) {
      style.indent = bound[1]->as_string();
    } else {
      DRIFT_ASSIGN_OR_RETURN(const int64_t width, int_arg("tojson", "indent", *bound[1]));
      style.indent = std::string(static_cast<size_t>(std::max<int64_t>(width, 0)), ' ');
    }
    style.item_separator = std::string(",");  // a temporary: GCC 12 warns falsely (-Wrestrict) on assigning a literal
  }
  if (bound[2] && !bound[2]->is_none()) {
    const Value& separators = *bound[2];
    if (!separators.is_list() || separators.as_list().items.size() != 2 || !separators.as_list().items[0].is_string() ||
        !separators.as_list().items[1].is_string()) {
      return invalid_argument("tojson() separators must be a pair of strings, e.g. (',', ': ')");
    }
    style.item_separator = separators.as_list().items[0].as_string();
    style.key_separator = separators.as_list().items[1].as_string();
  }
  DRIFT_ASSIGN_OR_RETURN(std::string json, to_json_text(input, style));
  return string_value(std::move(json));
}

// ---- numbers ----

// Python int(text, base): optional sign, digits with single underscores between them, and for base 0
// (or the matching base) a 0x / 0o / 0b prefix.
std::optional<int64_t> parse_python_int(std::string_view s, int base) {
  while (!s.empty() && text::is_space(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && text::is_space(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  bool negative = false;
  if (!s.empty() && (s.front() == '+' || s.front() == '-')) {
    negative = s.front() == '-';
    s.remove_prefix(1);
  }
  if (s.size() > 2 && s[0] == '0') {
    const char p = static_cast<char>(std::tolower(static_cast<unsigned char>(s[1])));
    const int prefix_base = p == 'x' ? 16 : (p == 'o' ? 8 : (p == 'b' ? 2 : 0));
    if (prefix_base != 0 && (base == 0 || base == prefix_base)) {
      base = prefix_base;
      s.remove_prefix(2);
      if (!s.empty() && s.front() == '_') s.remove_prefix(1);
    }
  }
  if (base == 0) base = 10;
  if (s.empty() || s.front() == '_' || s.back() == '_') return std::nullopt;
  int64_t value = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '_') {
      if (s[i - 1] == '_') return std::nullopt;
      continue;
    }
    const int c = std::tolower(static_cast<unsigned char>(s[i]));
    const int digit = (c >= '0' && c <= '9') ? c - '0' : ((c >= 'a' && c <= 'z') ? c - 'a' + 10 : 99);
    if (digit >= base) return std::nullopt;
    if (__builtin_mul_overflow(value, base, &value) || __builtin_add_overflow(value, digit, &value))
      return std::nullopt;
  }
  return negative ? -value : value;
}

// Python float(text): decimal or scientific with optional underscores between digits, or
// inf / infinity / nan in any case, each with an optional sign.
std::optional<double> parse_python_float(std::string_view s) {
  while (!s.empty() && text::is_space(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && text::is_space(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  std::string cleaned;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '_') {
      const bool between_digits = i > 0 && i + 1 < s.size() && std::isdigit(static_cast<unsigned char>(s[i - 1])) &&
                                  std::isdigit(static_cast<unsigned char>(s[i + 1]));
      if (!between_digits) return std::nullopt;
      continue;
    }
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '+' && c != '-') return std::nullopt;
    cleaned.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  }
  std::string_view body = cleaned;
  if (!body.empty() && (body.front() == '+' || body.front() == '-')) body.remove_prefix(1);
  const bool is_word = body == "inf" || body == "infinity" || body == "nan";
  if (!is_word && (body.empty() || body.find_first_not_of("0123456789.e+-") != std::string_view::npos))
    return std::nullopt;
  char* end = nullptr;
  const double value = std::strtod(cleaned.c_str(), &end);
  if (end != cleaned.c_str() + cleaned.size()) return std::nullopt;
  return value;
}

Expected<Value> filter_int(const Value& input, CallArgs args) {
  DRIFT_ASSIGN_OR_RETURN(auto bound, bind_args("int", std::move(args), {"default", "base"}));
  const Value fallback = bound[0] ? *bound[0] : Value::from_int(0);
  int64_t base = 10;
  if (bound[1]) {
    DRIFT_ASSIGN_OR_RETURN(base, int_arg("int", "base", *bound[1]));
  }
  if (input.is_integral()) return Value::from_int(input.as_int());
  if (input.is_float()) {
    const double d = input.as_float();
    if (!std::isfinite(d) || std::fabs(d) >= 9.2e18) return fallback;
    return Value::from_int(static_cast<int64_t>(d));
  }
  if (input.is_string()) {
    if (const auto parsed = parse_python_int(input.as_string(), static_cast<int>(base)))
      return Value::from_int(*parsed);
    if (const auto parsed = parse_python_float(input.as_string());
        parsed && std::isfinite(*parsed) && std::fabs(*parsed) < 9.2e18) {
      return Value::from_int(static_cast<int64_t>(*parsed));
    }
  }
  return fallback;
}

Expected<Value> filter_float(const Value& input, CallArgs args) {
  DRIFT_ASSIGN_OR_RETURN(auto bound, bind_args("float", std::move(args), {"default"}));
  if (input.is_number()) return Value::from_float(input.as_float());
  if (input.is_string()) {
    if (const auto parsed = parse_python_float(input.as_string())) return Value::from_float(*parsed);
  }
  return bound[0] ? *bound[0] : Value::from_float(0.0);
}

Expected<Value> filter_abs(const Value& input, CallArgs args) {
  DRIFT_ASSIGN_OR_RETURN(auto bound, bind_args("abs", std::move(args), {}));
  if (input.is_integral()) return Value::from_int(std::llabs(input.as_int()));
  if (input.is_float()) return Value::from_float(std::fabs(input.as_float()));
  return invalid_argument(fmt::format("bad operand type for abs(): '{}'", input.type_name()));
}

// round(precision=0, method='common'|'ceil'|'floor'). 'common' is Python's round(): the decimal
// nearest to the exact binary value, ties to even, which is what a correctly rounding printf does.
Expected<Value> filter_round(const Value& input, CallArgs args) {
  DRIFT_ASSIGN_OR_RETURN(auto bound, bind_args("round", std::move(args), {"precision", "method"}));
  int64_t precision = 0;
  if (bound[0]) {
    DRIFT_ASSIGN_OR_RETURN(precision, int_arg("round", "precision", *bound[0]));
  }
  std::string method = "common";
  if (bound[1]) {
    DRIFT_ASSIGN_OR_RETURN(method, string_arg("round", "method", *bound[1]));
  }
  if (method != "common" && method != "ceil" && method != "floor") {
    return invalid_argument("round() method must be 'common', 'ceil' or 'floor'");
  }
  if (!input.is_number()) return invalid_argument(fmt::format("round() needs a number, not '{}'", input.type_name()));
  if (input.is_integral() && method == "common" && precision >= 0) return Value::from_int(input.as_int());
  const double x = input.as_float();
  if (!std::isfinite(x)) return Value::from_float(x);
  if (method == "common" && precision >= 0 && precision <= 17) {
    const std::string digits = fmt::format("{:.{}f}", x, precision);
    return Value::from_float(std::strtod(digits.c_str(), nullptr));
  }
  const double scale = std::pow(10.0, static_cast<double>(precision));
  const double scaled = x * scale;
  const double rounded =
      method == "ceil" ? std::ceil(scaled) : (method == "floor" ? std::floor(scaled) : std::nearbyint(scaled));
  return Value::from_float(rounded / scale);
}

// ---- sequences ----

Expected<Value> filter_length(const Value& input, CallArgs args) {
  DRIFT_ASSIGN_OR_RETURN(auto bound, bind_args("length", std::move(args), {}));
  DRIFT_ASSIGN_OR_RETURN(const int64_t length, length_of(input));
  return Value::from_int(length);
}

Expected<Value> filter_list(const Value& input, CallArgs args) {
  DRIFT_ASSIGN_OR_RETURN(auto bound, bind_args("list", std::move(args), {}));
  DRIFT_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(input));
  return Value::from_list(std::move(items));
}

Expected<Value> filter_first(const Value& input, CallArgs args) {
  DRIFT_ASSIGN_OR_RETURN(auto bound, bind_args("first", std::move(args), {}));
  DRIFT_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(input));
  if (items.empty()) return Value::undefined("first() of an empty sequence");
  return items.front();
}

Expected<Value> filter_last(const Value& input, CallArgs args) {
  DRIFT_ASSIGN_OR_RETURN(auto bound, bind_args("last", std::move(args), {}));
  DRIFT_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(input));
  if (items.empty()) return Value::undefined("last() of an empty sequence");
  return items.back();
}

Expected<Value> filter_reverse(const Value& input, CallArgs args) {
  DRIFT_ASSIGN_OR_RETURN(auto bound, bind_args("reverse", std::move(args), {}));
  if (input.is_string()) {
    std::u32string cps = text::decode(input.as_string());
    std::reverse(cps.begin(), cps.end());
    return string_value(text::encode(cps));
  }
  DRIFT_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(input));
  std::reverse(items.begin(), items.end());
  return Value::from_list(std::move(items));
}

Expected<Value> filter_items(const Value& input, CallArgs args) {
  DRIFT_ASSIGN_OR_RETURN(auto bound, bind_args("items", std::move(args), {}));
  if (input.is_undefined()) return Value::from_list({});
  if (!input.is_dict()) return invalid_argument(fmt::format("items() needs a mapping, not '{}'", input.type_name()));
  std::vector<Value> pairs;
  for (const auto& [key, value] : input.as_dict().entries()) {
    pairs.push_back(Value::from_list({Value::from_string(key), value}, /*is_tuple=*/true));
  }
  return Value::from_list(std::move(pairs));
}

Expected<Value> filter_join(const Value& input, CallArgs args) {
  DRIFT_ASSIGN_OR_RETURN(auto bound, bind_args("join", std::move(args), {"d", "attribute"}));
  const std::string separator = bound[0] ? to_str(*bound[0]) : "";
  DRIFT_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(input));
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += separator;
    out += to_str(bound[1] && !bound[1]->is_none() ? get_path(items[i], to_str(*bound[1])) : items[i]);
  }
  return string_value(std::move(out));
}

Expected<Value> filter_default(const Value& input, CallArgs args) {
  DRIFT_ASSIGN_OR_RETURN(auto bound, bind_args("default", std::move(args), {"default_value", "boolean"}));
  const bool use_default = input.is_undefined() || (flag(bound[1]) && !input.truthy());
  if (!use_default) return input;
  return bound[0] ? *bound[0] : string_value("");
}

// attr() is getattr alone: unlike `x.name` it never falls back to a dict key.
Expected<Value> filter_attr(const Value& input, CallArgs args) {
  DRIFT_ASSIGN_OR_RETURN(auto bound, bind_args("attr", std::move(args), {"name"}));
  if (!bound[0]) return invalid_argument("attr() needs an attribute name");
  DRIFT_ASSIGN_OR_RETURN(std::string name, string_arg("attr", "name", *bound[0]));
  if (input.is_dict() && !has_method(input, name)) {
    return Value::undefined(fmt::format("'dict object' has no attribute '{}'", name));
  }
  return get_attribute(input, name);
}

// The value sort/unique/min/max compare: the attribute(s) named, and lower-cased when not case sensitive.
struct SortKeyMaker {
  std::vector<std::string> attributes;  // comma-separated paths; empty: the item itself
  bool case_sensitive = false;

  Value key(const Value& item) const {
    if (attributes.size() > 1) {
      std::vector<Value> parts;
      for (const auto& attribute : attributes) parts.push_back(prepare(get_path(item, attribute)));
      return Value::from_list(std::move(parts), /*is_tuple=*/true);
    }
    return prepare(attributes.empty() ? item : get_path(item, attributes[0]));
  }
  Value prepare(const Value& v) const {
    if (!case_sensitive && v.is_string()) return string_value(text::lower(v.as_string()));
    return v;
  }
};

SortKeyMaker make_sort_key(const std::optional<Value>& attribute, const std::optional<Value>& case_sensitive) {
  SortKeyMaker maker;
  maker.case_sensitive = flag(case_sensitive);
  if (attribute && !attribute->is_none()) {
    if (attribute->is_integral()) {
      maker.attributes.push_back(std::to_string(attribute->as_int()));
    } else {
      for (auto& part : text::split_on(to_str(*attribute), ",", -1))
        maker.attributes.push_back(text::strip(part, nullptr, true, true));
    }
  }
  return maker;
}

Expected<std::vector<Value>> sorted(std::vector<Value> items, const SortKeyMaker& maker, bool reverse) {
  std::vector<std::pair<Value, Value>> keyed;
  keyed.reserve(items.size());
  for (auto& item : items) keyed.emplace_back(maker.key(item), std::move(item));
  Status failure;
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) {
    auto order = reverse ? compare_values(b.first, a.first) : compare_values(a.first, b.first);
    if (!order.ok()) {
      if (failure.ok()) failure = order.status();
      return false;
    }
    return *order < 0;
  });
  if (!failure.ok()) return failure;
  std::vector<Value> out;
  out.reserve(keyed.size());
  for (auto& [key, item] : keyed) out.push_back(std::move(item));
  return out;
}

Expected<Value> filter_sort(const Value& input, CallArgs args) {
  DRIFT_ASSIGN_OR_RETURN(auto bound, bind_args("sort", std::move(args), {"reverse", "case_sensitive", "attribute"}));
  DRIFT_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(input));
  DRIFT_ASSIGN_OR_RETURN(items, sorted(std::move(items), make_sort_key(bound[2], bound[1]), flag(bound[0])));
  return Value::from_list(std::move(items));
}

Expected<Value> filter_dictsort(const Value& input, CallArgs args) {
  DRIFT_ASSIGN_OR_RETURN(auto bound, bind_args("dictsort", std::move(args), {"case_sensitive", "by", "reverse"}));
  if (!input.is_dict()) return invalid_argument(fmt::format("dictsort() needs a mapping, not '{}'", input.type_name()));
  std::string by = "key";
  if (bound[1]) {
    DRIFT_ASSIGN_OR_RETURN(by, string_arg("dictsort", "by", *bound[1]));
  }
  if (by != "key" && by != "value") return invalid_argument("dictsort() 'by' must be 'key' or 'value'");
  DRIFT_ASSIGN_OR_RETURN(Value pairs, filter_items(input, {}));
  SortKeyMaker maker;
  maker.case_sensitive = flag(bound[0]);
  maker.attributes.push_back(by == "key" ? "0" : "1");
  DRIFT_ASSIGN_OR_RETURN(std::vector<Value> items, sorted(pairs.as_list().items, maker, flag(bound[2])));
  return Value::from_list(std::move(items));
}

Expected<Value> filter_unique(const Value& input, CallArgs args) {
  DRIFT_ASSIGN_OR_RETURN(auto bound, bind_args("unique", std::move(args), {"case_sensitive", "attribute"}));
  const SortKeyMaker maker = make_sort_key(bound[1], bound[0]);
  DRIFT_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(input));
  std::vector<Value> seen;
  std::vector<Value> out;
  for (auto& item : items) {
    Value key = maker.key(item);
    if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return values_equal(s, key); })) continue;
    seen.push_back(std::move(key));
    out.push_back(std::move(item));
  }
  return Value::from_list(std::move(out));
}

Expected<Value> min_or_max(const Value& input, CallArgs args, bool want_max) {
  DRIFT_ASSIGN_OR_RETURN(auto bound,
                         bind_args(want_max ? "max" : "min", std::move(args), {"case_sensitive", "attribute"}));
  const SortKeyMaker maker = make_sort_key(bound[1], bound[0]);
  DRIFT_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(input));
  if (items.empty()) return Value::undefined(fmt::format("{}() of an empty sequence", want_max ? "max" : "min"));
  size_t best = 0;
  for (size_t i = 1; i < items.size(); ++i) {
    DRIFT_ASSIGN_OR_RETURN(const int order, compare_values(maker.key(items[i]), maker.key(items[best])));
    if (want_max ? order > 0 : order < 0) best = i;
  }
  return items[best];
}

Expected<Value> filter_max(const Value& input, CallArgs args) { return min_or_max(input, std::move(args), true); }
Expected<Value> filter_min(const Value& input, CallArgs args) { return min_or_max(input, std::move(args), false); }

Expected<Value> filter_sum(const Value& input, CallArgs args) {
  DRIFT_ASSIGN_OR_RETURN(auto bound, bind_args("sum", std::move(args), {"attribute", "start"}));
  DRIFT_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(input));
  Value total = bound[1] ? *bound[1] : Value::from_int(0);
  for (const Value& item : items) {
    const Value term = bound[0] && !bound[0]->is_none() ? get_path(item, to_str(*bound[0])) : item;
    DRIFT_ASSIGN_OR_RETURN(total, apply_binary(BinaryOp::kAdd, total, term));
  }
  return total;
}

// map(attribute='x', default=d) or map('filter_name', *filter_args).
Expected<Value> filter_map(const Value& input, CallArgs args) {
  DRIFT_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(input));
  const auto keyword = [&](std::string_view name) -> const Value* {
    for (const auto& [k, v] : args.keyword) {
      if (k == name) return &v;
    }
    return nullptr;
  };
  std::vector<Value> out;
  out.reserve(items.size());
  if (const Value* attribute = keyword("attribute")) {
    const Value* fallback = keyword("default");
    for (const Value& item : items) {
      Value picked = get_path(item, to_str(*attribute));
      out.push_back(picked.is_undefined() && fallback ? *fallback : std::move(picked));
    }
    return Value::from_list(std::move(out));
  }
  if (args.positional.empty() || !args.positional[0].is_string()) {
    return invalid_argument("map() needs a filter name or attribute=");
  }
  const std::string filter = args.positional[0].as_string();
  if (!is_known_filter(filter)) return invalid_argument(fmt::format("map(): no filter named '{}'", filter));
  CallArgs filter_args{{args.positional.begin() + 1, args.positional.end()}, args.keyword};
  for (const Value& item : items) {
    DRIFT_ASSIGN_OR_RETURN(Value mapped, apply_filter(filter, item, filter_args));
    out.push_back(std::move(mapped));
  }
  return Value::from_list(std::move(out));
}

// select / reject / selectattr / rejectattr: keep the items whose (attribute's) test result is `keep`;
// without a test name the test is truthiness.
Expected<Value> filter_by_test(const Value& input, CallArgs args, bool by_attribute, bool keep) {
  if (!args.keyword.empty()) return invalid_argument("select/reject filters take no keyword arguments");
  std::vector<Value>& positional = args.positional;
  std::string attribute;
  size_t next = 0;
  if (by_attribute) {
    if (positional.empty()) return invalid_argument("selectattr/rejectattr need an attribute name");
    attribute = to_str(positional[0]);
    next = 1;
  }
  std::string test;
  if (next < positional.size()) {
    DRIFT_ASSIGN_OR_RETURN(test, string_arg("select", "test", positional[next]));
    if (!is_known_test(test)) return invalid_argument(fmt::format("no test named '{}'", test));
    ++next;
  }
  const std::vector<Value> test_args(positional.begin() + static_cast<std::ptrdiff_t>(next), positional.end());
  DRIFT_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(input));
  std::vector<Value> out;
  for (auto& item : items) {
    const Value subject = by_attribute ? get_path(item, attribute) : item;
    bool passed = subject.truthy();
    if (!test.empty()) {
      DRIFT_ASSIGN_OR_RETURN(passed, apply_test(test, subject, test_args));
    }
    if (passed == keep) out.push_back(std::move(item));
  }
  return Value::from_list(std::move(out));
}

Expected<Value> filter_select(const Value& input, CallArgs args) {
  return filter_by_test(input, std::move(args), false, true);
}
Expected<Value> filter_reject(const Value& input, CallArgs args) {
  return filter_by_test(input, std::move(args), false, false);
}
Expected<Value> filter_selectattr(const Value& input, CallArgs args) {
  return filter_by_test(input, std::move(args), true, true);
}
Expected<Value> filter_rejectattr(const Value& input, CallArgs args) {
  return filter_by_test(input, std::move(args), true, false);
}

const std::unordered_map<std::string_view, FilterFn>& filter_table() {
  static const std::unordered_map<std::string_view, FilterFn> table = {
      {"abs", filter_abs},
      {"attr", filter_attr},
      {"capitalize", filter_text_transform<text::capitalize>},
      {"center", filter_center},
      {"count", filter_length},
      {"d", filter_default},
      {"default", filter_default},
      {"dictsort", filter_dictsort},
      {"e", filter_escape},
      {"escape", filter_escape},
      {"first", filter_first},
      {"float", filter_float},
      {"indent", filter_indent},
      {"int", filter_int},
      {"items", filter_items},
      {"join", filter_join},
      {"last", filter_last},
      {"length", filter_length},
      {"list", filter_list},
      {"lower", filter_text_transform<text::lower>},
      {"map", filter_map},
      {"max", filter_max},
      {"min", filter_min},
      {"reject", filter_reject},
      {"rejectattr", filter_rejectattr},
      {"replace", filter_replace},
      {"reverse", filter_reverse},
      {"round", filter_round},
      {"safe", filter_safe},
      {"select", filter_select},
      {"selectattr", filter_selectattr},
      {"sort", filter_sort},
      {"string", filter_string},
      {"sum", filter_sum},
      {"title", filter_text_transform<jinja_title>},
      {"tojson", filter_tojson},
      {"trim", filter_trim},
      {"unique", filter_unique},
      {"upper", filter_text_transform<text::upper>},
      {"wordcount", filter_wordcount},
  };
  return table;
}

// Jinja2 builtins Drift leaves out; using one says "not supported" rather than "no such filter".
bool is_left_out_jinja2_filter(std::string_view name) {
  static constexpr std::string_view kLeftOut[] = {"batch",     "filesizeformat", "forceescape", "format",    "groupby",
                                                  "pprint",    "random",         "slice",       "striptags", "truncate",
                                                  "urlencode", "urlize",         "wordwrap",    "xmlattr"};
  return std::find(std::begin(kLeftOut), std::end(kLeftOut), name) != std::end(kLeftOut);
}

}  // namespace

bool is_known_filter(std::string_view name) { return filter_table().count(name) != 0; }

Expected<Value> apply_filter(std::string_view name, const Value& input, CallArgs args) {
  const auto& table = filter_table();
  const auto it = table.find(name);
  if (it == table.end()) {
    if (is_left_out_jinja2_filter(name)) return unsupported(fmt::format("the '{}' filter is not supported", name));
    return invalid_argument(fmt::format("no filter named '{}'", name));
  }
  return it->second(input, std::move(args));
}

}  // namespace drift::jinja
