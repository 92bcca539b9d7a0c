#include "tokenizer/jinja/format.h"

#include <fmt/format.h>
#include <utf8proc.h>

#include <algorithm>
#include <charconv>
#include <cmath>

#include "tokenizer/jinja/text.h"

namespace drift::jinja {
namespace {

bool is_printable(char32_t c) {
  if (c == ' ') return true;
  if (c < 0x20 || c == 0x7F) return false;
  if (c < 0x7F) return true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
    case UTF8PROC_CATEGORY_ZS:
      return false;
    default:
      return true;
  }
}

std::string repr_string(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t c : text::decode(s)) {
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (is_printable(c)) {
      text::append_code_point(c, out);
    } else if (c < 0x100) {
      out += fmt::format("\\x{:02x}", static_cast<uint32_t>(c));
    } else if (c < 0x10000) {
      out += fmt::format("\\u{:04x}", static_cast<uint32_t>(c));
    } else {
      out += fmt::format("\\U{:08x}", static_cast<uint32_t>(c));
    }
  }
  out.push_back(quote);
  return out;
}

void append_json_string(const std::string& s, bool ensure_ascii, std::string& out) {
  out.push_back('"');
  const auto escape_code_unit = [&](uint32_t unit) { out += fmt::format("\\u{:04x}", unit); };
  for (char32_t c : text::decode(s)) {
    switch (c) {
      case '"':
        out += "\\\"";
        continue;
      case '\\':
        out += "\\\\";
        continue;
      case '\n':
        out += "\\n";
        continue;
      case '\r':
        out += "\\r";
        continue;
      case '\t':
        out += "\\t";
        continue;
      case '\b':
        out += "\\b";
        continue;
      case '\f':
        out += "\\f";
        continue;
      default:
        break;
    }
    if (c < 0x20) {
      escape_code_unit(c);
    } else if (ensure_ascii && c >= 0x80) {
      if (c >= 0x10000) {
        const uint32_t v = c - 0x10000;
        escape_code_unit(0xD800 + (v >> 10));
        escape_code_unit(0xDC00 + (v & 0x3FF));
      } else {
        escape_code_unit(c);
      }
    } else {
      text::append_code_point(c, out);
    }
  }
  out.push_back('"');
}

std::string json_float(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "Infinity" : "-Infinity";
  return format_float(value);
}

Status append_json(const Value& value, const JsonStyle& style, int depth, std::string& out) {
  const auto newline_and_indent = [&](int level) {
    out.push_back('\n');
    for (int i = 0; i < level; ++i) out += *style.indent;
  };
  switch (value.kind()) {
    case Value::Kind::kNone:
      out += "null";
      return Status::Ok();
    case Value::Kind::kBool:
      out += value.as_bool() ? "true" : "false";
      return Status::Ok();
    case Value::Kind::kInt:
      out += std::to_string(value.as_int());
      return Status::Ok();
    case Value::Kind::kFloat:
      out += json_float(value.as_float());
      return Status::Ok();
    case Value::Kind::kString:
      append_json_string(value.as_string(), style.ensure_ascii, out);
      return Status::Ok();
    case Value::Kind::kList: {
      const auto& items = value.as_list().items;
      if (items.empty()) {
        out += "[]";
        return Status::Ok();
      }
      out.push_back('[');
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) out += style.item_separator;
        if (style.indent) newline_and_indent(depth + 1);
        DRIFT_RETURN_IF_ERROR(append_json(items[i], style, depth + 1, out));
      }
      if (style.indent) newline_and_indent(depth);
      out.push_back(']');
      return Status::Ok();
    }
    case Value::Kind::kDict: {
      std::vector<const std::pair<std::string, Value>*> entries;
      for (const auto& entry : value.as_dict().entries()) entries.push_back(&entry);
      if (entries.empty()) {
        out += "{}";
        return Status::Ok();
      }
      if (style.sort_keys) {
        std::stable_sort(entries.begin(), entries.end(),
                         [](const auto* a, const auto* b) { return a->first < b->first; });
      }
      out.push_back('{');
      for (size_t i = 0; i < entries.size(); ++i) {
        if (i > 0) out += style.item_separator;
        if (style.indent) newline_and_indent(depth + 1);
        append_json_string(entries[i]->first, style.ensure_ascii, out);
        out += style.key_separator;
        DRIFT_RETURN_IF_ERROR(append_json(entries[i]->second, style, depth + 1, out));
      }
      if (style.indent) newline_and_indent(depth);
      out.push_back('}');
      return Status::Ok();
    }
    case Value::Kind::kUndefined:
      return invalid_argument(value.undefined_reason() + " and cannot be converted to JSON");
    case Value::Kind::kNamespace:
    case Value::Kind::kCallable:
      break;
  }
  return invalid_argument(fmt::format("object of type {} is not JSON serializable", value.type_name()));
}

}  // namespace

std::string format_float(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  if (value == 0.0) return std::signbit(value) ? "-0.0" : "0.0";
  // Shortest round-trip digits in scientific form, e.g. "1.2345e+02", then laid out as Python does.
  char buffer[64];
  const auto result = std::to_chars(buffer, buffer + sizeof(buffer), value, std::chars_format::scientific);
  const std::string_view scientific(buffer, static_cast<size_t>(result.ptr - buffer));
  const size_t e_pos = scientific.find('e');
  std::string_view mantissa = scientific.substr(0, e_pos);
  const int exponent = std::stoi(std::string(scientific.substr(e_pos + 1)));
  std::string sign;
  if (mantissa.front() == '-') {
    sign = "-";
    mantissa.remove_prefix(1);
  }
  std::string digits;
  for (char c : mantissa) {
    if (c != '.') digits.push_back(c);
  }
  if (exponent < -4 || exponent >= 16) {
    std::string out = sign + digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    return out + fmt::format("e{}{:02d}", exponent < 0 ? '-' : '+', std::abs(exponent));
  }
  if (exponent < 0) return sign + "0." + std::string(static_cast<size_t>(-exponent - 1), '0') + digits;
  const auto integer_digits = static_cast<size_t>(exponent) + 1;
  if (digits.size() <= integer_digits) return sign + digits + std::string(integer_digits - digits.size(), '0') + ".0";
  return sign + digits.substr(0, integer_digits) + "." + digits.substr(integer_digits);
}

std::string to_str(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::kUndefined:
      return "";
    case Value::Kind::kString:
      return value.as_string();
    case Value::Kind::kNamespace:
      return "<Namespace " + to_repr(Value::from_dict(value.as_namespace().attributes)) + ">";
    default:
      return to_repr(value);
  }
}

std::string to_repr(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::kUndefined:
      return "Undefined";
    case Value::Kind::kNone:
      return "None";
    case Value::Kind::kBool:
      return value.as_bool() ? "True" : "False";
    case Value::Kind::kInt:
      return std::to_string(value.as_int());
    case Value::Kind::kFloat:
      return format_float(value.as_float());
    case Value::Kind::kString:
      return repr_string(value.as_string());
    case Value::Kind::kList: {
      const List& list = value.as_list();
      std::string out = list.is_tuple ? "(" : "[";
      for (size_t i = 0; i < list.items.size(); ++i) {
        if (i > 0) out += ", ";
        out += to_repr(list.items[i]);
      }
      if (list.is_tuple && list.items.size() == 1) out += ",";
      out += list.is_tuple ? ")" : "]";
      return out;
    }
    case Value::Kind::kDict: {
      std::string out = "{";
      bool first = true;
      for (const auto& [key, item] : value.as_dict().entries()) {
        if (!first) out += ", ";
        first = false;
        out += repr_string(key) + ": " + to_repr(item);
      }
      return out + "}";
    }
    case Value::Kind::kNamespace:
      return to_str(value);
    case Value::Kind::kCallable:
      return fmt::format("<function {}>", value.as_callable().name());
  }
  return "";
}

Expected<std::string> to_json_text(const Value& value, const JsonStyle& style) {
  std::string out;
  DRIFT_RETURN_IF_ERROR(append_json(value, style, 0, out));
  return out;
}

}  // namespace drift::jinja
