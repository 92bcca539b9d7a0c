// Python str semantics over UTF-8 bytes: templates index, slice, measure and case-map strings by code
// point, as Jinja2 does, while Drift keeps every string as UTF-8.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace drift::jinja::text {

// Bytes that are not valid UTF-8 decode to U+DC80..U+DCFF and encode back to the same byte (Python's
// "surrogateescape"), so decoding and re-encoding never changes a string.
std::u32string decode(std::string_view utf8);
std::string encode(std::u32string_view code_points);
void append_code_point(char32_t code_point, std::string& out);

size_t count_code_points(std::string_view utf8);
bool is_ascii(std::string_view utf8);

// str.isspace(): the Unicode whitespace Python strips and splits on.
bool is_space(char32_t code_point);
// A regex \w character: a letter, a digit or an underscore.
bool is_word_char(char32_t code_point);

// Case mapping is Unicode's simple mapping plus the one-to-many special cases Python applies
// (ß -> SS, ligatures such as ﬁ -> FI, İ -> i̇); the Greek final-sigma rule is not applied.
std::string upper(std::string_view utf8);
std::string lower(std::string_view utf8);
std::string capitalize(std::string_view utf8);                   // str.capitalize(): first upper, rest lower
std::string title_case(std::string_view utf8);                   // str.title(): each run of cased letters capitalized
bool has_cased_and_all(std::string_view utf8, bool upper_case);  // str.isupper() / str.islower()

// str.strip(chars), lstrip, rstrip: `chars` absent means whitespace.
std::string strip(std::string_view utf8, const std::u32string* chars, bool left, bool right);
// str.split(): on runs of whitespace (no separator) or on an exact separator; max_splits < 0: no limit.
std::vector<std::string> split_whitespace(std::string_view utf8, long max_splits);
std::vector<std::string> split_on(std::string_view utf8, std::string_view separator, long max_splits);
// str.replace(old, new, count): an empty `old` inserts `new` around every code point; count < 0: all.
std::string replace(std::string_view utf8, std::string_view old_text, std::string_view new_text, long count);
// str.splitlines(): breaks on \n, \r\n, \r, \v, \f, \x1c-\x1e, U+0085, U+2028, U+2029.
std::vector<std::string> split_lines(std::string_view utf8);

}  // namespace drift::jinja::text
