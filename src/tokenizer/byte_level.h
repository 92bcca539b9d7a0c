// The GPT-2 byte-level alphabet: each of the 256 byte values is shown as one printable code point, so
// any byte string becomes a string of visible characters that BPE vocabularies store (space -> "Ġ",
// newline -> "Ċ"). Printable Latin-1 bytes stand for themselves; the rest map to U+0100 upwards.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace drift::tokenizer {

// The code point that stands for `byte`.
char32_t byte_to_code_point(uint8_t byte);

// The byte that `cp` stands for, or nullopt when `cp` is not in the alphabet.
std::optional<uint8_t> code_point_to_byte(char32_t cp);

// The UTF-8 of byte_to_code_point(byte): one or two bytes.
std::string_view byte_to_visible(uint8_t byte);

// Appends the visible form of raw `bytes` (what vocabularies store) to `out`.
void append_visible(std::string_view bytes, std::string& out);

// The raw bytes a stored token stands for, as the ByteLevel decoder reads it: every character mapped
// back to its byte, or, when some character is outside the alphabet (e.g. an added token such as
// "<｜end▁of▁sentence｜>"), the token's own UTF-8 unchanged.
std::string visible_to_bytes(std::string_view valid_utf8_token);

}  // namespace drift::tokenizer
