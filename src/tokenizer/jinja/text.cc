#include "tokenizer/jinja/text.h"

#include <utf8proc.h>

#include <algorithm>

namespace drift::jinja::text {
namespace {

constexpr char32_t kEscapedByteBase = 0xDC00;

// Length of the valid UTF-8 sequence starting at `i`, storing its code point; 0 when the bytes there
// are not a valid sequence (overlong forms, surrogates and values past U+10FFFF are invalid).
size_t decode_one(std::string_view s, size_t i, char32_t& code_point) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char lead = byte(i);
  if (lead < 0x80) {
    code_point = lead;
    return 1;
  }
  size_t length = 0;
  char32_t value = 0;
  char32_t minimum = 0;
  if ((lead & 0xE0) == 0xC0) {
    length = 2, value = lead & 0x1F, minimum = 0x80;
  } else if ((lead & 0xF0) == 0xE0) {
    length = 3, value = lead & 0x0F, minimum = 0x800;
  } else if ((lead & 0xF8) == 0xF0) {
    length = 4, value = lead & 0x07, minimum = 0x10000;
  } else {
    return 0;
  }
  if (i + length > s.size()) return 0;
  for (size_t k = 1; k < length; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
    value = (value << 6) | (byte(i + k) & 0x3F);
  }
  if (value < minimum || value > 0x10FFFF || (value >= 0xD800 && value <= 0xDFFF)) return 0;
  code_point = value;
  return length;
}

bool is_cased(char32_t c) {
  const auto category = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return category == UTF8PROC_CATEGORY_LU || category == UTF8PROC_CATEGORY_LL || category == UTF8PROC_CATEGORY_LT;
}

enum class CaseMode { kUpper, kLower, kTitle };

// One-to-many mappings from Unicode's SpecialCasing.txt that Python applies and the simple mapping
// lacks: {code point, upper, title}. Only lower-casing İ expands, handled in append_mapped.
struct SpecialCase {
  char32_t code_point;
  std::u32string_view upper;
  std::u32string_view title;
};
constexpr SpecialCase kSpecialCases[] = {
    {0x00DF, U"SS", U"Ss"},
    {0x0149, U"\u02BCN", U"\u02BCN"},
    {0x01F0, U"J\u030C", U"J\u030C"},
    {0x0390, U"\u0399\u0308\u0301", U"\u0399\u0308\u0301"},
    {0x03B0, U"\u03A5\u0308\u0301", U"\u03A5\u0308\u0301"},
    {0x0587, U"\u0535\u0552", U"\u0535\u0582"},
    {0x1E96, U"H\u0331", U"H\u0331"},
    {0x1E97, U"T\u0308", U"T\u0308"},
    {0x1E98, U"W\u030A", U"W\u030A"},
    {0x1E99, U"Y\u030A", U"Y\u030A"},
    {0x1E9A, U"A\u02BE", U"A\u02BE"},
    {0xFB00, U"FF", U"Ff"},
    {0xFB01, U"FI", U"Fi"},
    {0xFB02, U"FL", U"Fl"},
    {0xFB03, U"FFI", U"Ffi"},
    {0xFB04, U"FFL", U"Ffl"},
    {0xFB05, U"ST", U"St"},
    {0xFB06, U"ST", U"St"},
    {0xFB13, U"\u0544\u0546", U"\u0544\u0576"},
    {0xFB14, U"\u0544\u0535", U"\u0544\u0565"},
    {0xFB15, U"\u0544\u053B", U"\u0544\u056B"},
    {0xFB16, U"\u054E\u0546", U"\u054E\u0576"},
    {0xFB17, U"\u0544\u053D", U"\u0544\u056D"},
};

bool is_escaped_byte(char32_t c) { return c >= kEscapedByteBase && c <= kEscapedByteBase + 0xFF; }

void append_mapped(char32_t c, CaseMode mode, std::string& out) {
  if (is_escaped_byte(c)) {
    append_code_point(c, out);
    return;
  }
  if (mode == CaseMode::kLower && c == 0x0130) {  // İ
    append_code_point('i', out);
    append_code_point(0x0307, out);
    return;
  }
  if (mode != CaseMode::kLower) {
    for (const SpecialCase& special : kSpecialCases) {
      if (special.code_point != c) continue;
      for (char32_t mapped : mode == CaseMode::kUpper ? special.upper : special.title) append_code_point(mapped, out);
      return;
    }
  }
  const auto cp = static_cast<utf8proc_int32_t>(c);
  const utf8proc_int32_t mapped = mode == CaseMode::kUpper
                                      ? utf8proc_toupper(cp)
                                      : (mode == CaseMode::kLower ? utf8proc_tolower(cp) : utf8proc_totitle(cp));
  append_code_point(static_cast<char32_t>(mapped), out);
}

std::string map_each(std::string_view s, CaseMode mode) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : decode(s)) append_mapped(c, mode, out);
  return out;
}

bool is_line_break(char32_t c) {
  return c == '\n' || c == '\r' || c == '\v' || c == '\f' || c == 0x1C || c == 0x1D || c == 0x1E || c == 0x85 ||
         c == 0x2028 || c == 0x2029;
}

}  // namespace

std::u32string decode(std::string_view utf8) {
  std::u32string out;
  out.reserve(utf8.size());
  for (size_t i = 0; i < utf8.size();) {
    char32_t code_point = 0;
    const size_t length = decode_one(utf8, i, code_point);
    if (length == 0) {
      out.push_back(kEscapedByteBase + static_cast<unsigned char>(utf8[i]));
      ++i;
    } else {
      out.push_back(code_point);
      i += length;
    }
  }
  return out;
}

void append_code_point(char32_t c, std::string& out) {
  if (c >= kEscapedByteBase + 0x80 && c <= kEscapedByteBase + 0xFF) {
    out.push_back(static_cast<char>(c - kEscapedByteBase));
  } else if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

std::string encode(std::u32string_view code_points) {
  std::string out;
  out.reserve(code_points.size());
  for (char32_t c : code_points) append_code_point(c, out);
  return out;
}

bool is_ascii(std::string_view utf8) {
  return std::all_of(utf8.begin(), utf8.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; });
}

size_t count_code_points(std::string_view utf8) {
  if (is_ascii(utf8)) return utf8.size();
  return decode(utf8).size();
}

bool is_space(char32_t c) {
  if (c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1C && c <= 0x1F) || c == 0x85) return true;
  if (c < 0xA0 || (c >= kEscapedByteBase && c <= kEscapedByteBase + 0xFF)) return false;
  return utf8proc_category(static_cast<utf8proc_int32_t>(c)) == UTF8PROC_CATEGORY_ZS || c == 0x2028 || c == 0x2029;
}

bool is_word_char(char32_t c) {
  if (c == '_') return true;
  if (is_escaped_byte(c)) return false;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_NO:
      return true;
    default:
      return false;
  }
}

std::string upper(std::string_view utf8) { return map_each(utf8, CaseMode::kUpper); }
std::string lower(std::string_view utf8) { return map_each(utf8, CaseMode::kLower); }

std::string capitalize(std::string_view utf8) {
  std::string out;
  bool first = true;
  for (char32_t c : decode(utf8)) {
    append_mapped(c, first ? CaseMode::kTitle : CaseMode::kLower, out);
    first = false;
  }
  return out;
}

std::string title_case(std::string_view utf8) {
  std::string out;
  bool previous_is_cased = false;
  for (char32_t c : decode(utf8)) {
    append_mapped(c, previous_is_cased ? CaseMode::kLower : CaseMode::kTitle, out);
    previous_is_cased = is_cased(c);
  }
  return out;
}

bool has_cased_and_all(std::string_view utf8, bool upper_case) {
  bool any_cased = false;
  for (char32_t c : decode(utf8)) {
    if (!is_cased(c)) continue;
    any_cased = true;
    const auto cp = static_cast<utf8proc_int32_t>(c);
    if ((upper_case ? utf8proc_toupper(cp) : utf8proc_tolower(cp)) != cp) return false;
  }
  return any_cased;
}

std::string strip(std::string_view utf8, const std::u32string* chars, bool left, bool right) {
  const std::u32string cps = decode(utf8);
  const auto strippable = [&](char32_t c) { return chars ? chars->find(c) != std::u32string::npos : is_space(c); };
  size_t begin = 0;
  size_t end = cps.size();
  if (left) {
    while (begin < end && strippable(cps[begin])) ++begin;
  }
  if (right) {
    while (end > begin && strippable(cps[end - 1])) --end;
  }
  return encode(std::u32string_view(cps).substr(begin, end - begin));
}

std::vector<std::string> split_whitespace(std::string_view utf8, long max_splits) {
  const std::u32string cps = decode(utf8);
  std::vector<std::string> parts;
  size_t i = 0;
  while (true) {
    while (i < cps.size() && is_space(cps[i])) ++i;
    if (i == cps.size()) break;
    if (max_splits >= 0 && static_cast<long>(parts.size()) == max_splits) {
      size_t end = cps.size();
      while (end > i && is_space(cps[end - 1])) --end;
      parts.push_back(encode(std::u32string_view(cps).substr(i, end - i)));
      break;
    }
    const size_t start = i;
    while (i < cps.size() && !is_space(cps[i])) ++i;
    parts.push_back(encode(std::u32string_view(cps).substr(start, i - start)));
  }
  return parts;
}

std::vector<std::string> split_on(std::string_view utf8, std::string_view separator, long max_splits) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (max_splits < 0 || static_cast<long>(parts.size()) < max_splits) {
    const size_t found = utf8.find(separator, start);
    if (found == std::string_view::npos) break;
    parts.emplace_back(utf8.substr(start, found - start));
    start = found + separator.size();
  }
  parts.emplace_back(utf8.substr(start));
  return parts;
}

std::string replace(std::string_view utf8, std::string_view old_text, std::string_view new_text, long count) {
  std::string out;
  long replaced = 0;
  if (old_text.empty()) {
    const std::u32string cps = decode(utf8);
    for (char32_t c : cps) {
      if (count < 0 || replaced < count) {
        out += new_text;
        ++replaced;
      }
      append_code_point(c, out);
    }
    if (count < 0 || replaced < count) out += new_text;
    return out;
  }
  size_t start = 0;
  while (count < 0 || replaced < count) {
    const size_t found = utf8.find(old_text, start);
    if (found == std::string_view::npos) break;
    out += utf8.substr(start, found - start);
    out += new_text;
    start = found + old_text.size();
    ++replaced;
  }
  out += utf8.substr(start);
  return out;
}

std::vector<std::string> split_lines(std::string_view utf8) {
  const std::u32string cps = decode(utf8);
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t i = 0; i < cps.size(); ++i) {
    if (!is_line_break(cps[i])) continue;
    lines.push_back(encode(std::u32string_view(cps).substr(start, i - start)));
    if (cps[i] == '\r' && i + 1 < cps.size() && cps[i + 1] == '\n') ++i;
    start = i + 1;
  }
  if (start < cps.size()) lines.push_back(encode(std::u32string_view(cps).substr(start)));
  return lines;
}

}  // namespace drift::jinja::text
