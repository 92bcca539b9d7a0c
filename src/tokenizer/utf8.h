// UTF-8 encoding helpers shared by encode (input checks) and decode (lossy output, streaming).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace drift::tokenizer {

inline constexpr std::string_view kReplacementCharacter = "\xEF\xBF\xBD";  // U+FFFD

// Appends `bytes` to `out`, replacing each maximal invalid subpart with U+FFFD. This is the Unicode
// "substitution of maximal subparts" practice that Rust's from_utf8_lossy follows, so decode() output
// matches Hugging Face byte for byte. When `at_end` is false, an incomplete but so far valid sequence at
// the end is left unconsumed, because the next bytes may complete it. Returns the bytes consumed.
size_t append_utf8_lossy(std::string_view bytes, bool at_end, std::string& out);

bool is_valid_utf8(std::string_view bytes);

// Decodes the code point starting at `pos` in valid UTF-8 and moves `pos` past it.
char32_t next_code_point(std::string_view valid_utf8, size_t& pos);

void append_code_point(char32_t cp, std::string& out);

}  // namespace drift::tokenizer
