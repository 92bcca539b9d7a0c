#include "tokenizer/byte_level.h"

#include <gtest/gtest.h>

#include <set>

namespace drift::tokenizer {
namespace {

// Values from GPT-2's bytes_to_unicode: printable Latin-1 stands for itself, the other 68 bytes take
// U+0100.. in byte order (0x00-0x20, then 0x7F-0xA0, then 0xAD).
TEST(ByteLevel, KnownSpellings) {
  EXPECT_EQ(byte_to_visible(' '), "\xC4\xA0");   // U+0120 'Ġ'
  EXPECT_EQ(byte_to_visible('\n'), "\xC4\x8A");  // U+010A 'Ċ'
  EXPECT_EQ(byte_to_visible(0x00), "\xC4\x80");  // U+0100
  EXPECT_EQ(byte_to_visible(0x7F), "\xC4\xA1");  // U+0121
  EXPECT_EQ(byte_to_visible(0xAD), "\xC5\x83");  // U+0143, the last one
  EXPECT_EQ(byte_to_visible('A'), "A");
  EXPECT_EQ(byte_to_visible(0xE9), "\xC3\xA9");  // U+00E9 stands for byte 0xE9
}

TEST(ByteLevel, EveryByteHasItsOwnCodePoint) {
  std::set<char32_t> seen;
  for (int b = 0; b < 256; ++b) {
    const char32_t cp = byte_to_code_point(uint8_t(b));
    EXPECT_TRUE(seen.insert(cp).second);
    EXPECT_EQ(code_point_to_byte(cp), uint8_t(b));
  }
  EXPECT_FALSE(code_point_to_byte(U' ').has_value());
  EXPECT_FALSE(code_point_to_byte(U'\u3042').has_value());
}

TEST(ByteLevel, VisibleTokensMapBackToBytes) {
  std::string visible;
  append_visible(" hi\n\xF0\x9F\x99\x82", visible);
  EXPECT_EQ(visible_to_bytes(visible), " hi\n\xF0\x9F\x99\x82");
  EXPECT_EQ(visible_to_bytes("\xC4\xA0hello"), " hello");
  // A token with a character outside the alphabet is decoded as its own UTF-8, unchanged.
  const std::string fullwidth =
      "<\xEF\xBD\x9C"
      "end\xEF\xBD\x9C>";
  EXPECT_EQ(visible_to_bytes(fullwidth), fullwidth);
}

}  // namespace
}  // namespace drift::tokenizer
