#include "tokenizer/byte_level.h"

#include <array>

#include "tokenizer/utf8.h"

namespace drift::tokenizer {
namespace {

bool stands_for_itself(int b) {
  return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

struct Alphabet {
  std::array<char32_t, 256> code_point{};
  std::array<std::string, 256> visible;
  std::array<int16_t, 512> byte_of{};  // code points of the alphabet are all below U+0200; -1 = none

  Alphabet() {
    byte_of.fill(-1);
    // Bytes that are not printable take U+0100, U+0101, ... in increasing byte order.
    char32_t next_extra = 0x100;
    for (int b = 0; b < 256; ++b) {
      code_point[size_t(b)] = stands_for_itself(b) ? char32_t(b) : next_extra++;
      append_code_point(code_point[size_t(b)], visible[size_t(b)]);
      byte_of[code_point[size_t(b)]] = int16_t(b);
    }
  }
};

const Alphabet& alphabet() {
  static const Alphabet a;
  return a;
}

}  // namespace

char32_t byte_to_code_point(uint8_t byte) { return alphabet().code_point[byte]; }

std::optional<uint8_t> code_point_to_byte(char32_t cp) {
  if (cp >= alphabet().byte_of.size() || alphabet().byte_of[cp] < 0) return std::nullopt;
  return uint8_t(alphabet().byte_of[cp]);
}

std::string_view byte_to_visible(uint8_t byte) { return alphabet().visible[byte]; }

void append_visible(std::string_view bytes, std::string& out) {
  for (char c : bytes) out.append(byte_to_visible(uint8_t(c)));
}

std::string visible_to_bytes(std::string_view token) {
  std::string bytes;
  bytes.reserve(token.size());
  size_t pos = 0;
  while (pos < token.size()) {
    const std::optional<uint8_t> b = code_point_to_byte(next_code_point(token, pos));
    if (!b) return std::string(token);
    bytes.push_back(char(*b));
  }
  return bytes;
}

}  // namespace drift::tokenizer
