#include "tokenizer/utf8.h"

#include <cstdint>

namespace drift::tokenizer {
namespace {

// The byte ranges of well-formed UTF-8 (Unicode Table 3-7). The second byte's range depends on the
// lead byte (this is what rules out overlong forms and surrogates); later bytes are plain continuations.
struct LeadRule {
  int length = 0;  // 0: this byte cannot start a sequence
  uint8_t second_lo = 0x80;
  uint8_t second_hi = 0xBF;
};

LeadRule lead_rule(uint8_t b) {
  if (b < 0x80) return {1};
  if (b < 0xC2) return {};
  if (b < 0xE0) return {2};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};
  if (b < 0xF0) return {3};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b < 0xF4) return {4};
  if (b == 0xF4) return {4, 0x80, 0x8F};
  return {};
}

// Length of the well-formed prefix of the sequence starting at bytes[pos]: equal to the rule's length
// when the sequence is complete, smaller when it breaks off or the input ends.
int valid_prefix_length(std::string_view bytes, size_t pos, const LeadRule& rule) {
  int n = 1;
  while (n < rule.length && pos + n < bytes.size()) {
    const auto b = uint8_t(bytes[pos + n]);
    const uint8_t lo = n == 1 ? rule.second_lo : 0x80;
    const uint8_t hi = n == 1 ? rule.second_hi : 0xBF;
    if (b < lo || b > hi) break;
    ++n;
  }
  return n;
}

}  // namespace

size_t append_utf8_lossy(std::string_view bytes, bool at_end, std::string& out) {
  size_t pos = 0;
  size_t clean_start = 0;  // start of the run of valid bytes not yet copied to `out`
  while (pos < bytes.size()) {
    const LeadRule rule = lead_rule(uint8_t(bytes[pos]));
    if (rule.length == 1) {
      ++pos;
      continue;
    }
    const int n = rule.length == 0 ? 0 : valid_prefix_length(bytes, pos, rule);
    if (n > 0 && n == rule.length) {
      pos += size_t(n);
      continue;
    }
    const bool truncated_by_end = n > 0 && pos + size_t(n) == bytes.size();
    out.append(bytes.substr(clean_start, pos - clean_start));
    if (truncated_by_end && !at_end) return pos;
    out.append(kReplacementCharacter);
    pos += size_t(n == 0 ? 1 : n);
    clean_start = pos;
  }
  out.append(bytes.substr(clean_start, pos - clean_start));
  return pos;
}

bool is_valid_utf8(std::string_view bytes) {
  size_t pos = 0;
  while (pos < bytes.size()) {
    const LeadRule rule = lead_rule(uint8_t(bytes[pos]));
    if (rule.length == 0 || valid_prefix_length(bytes, pos, rule) != rule.length) return false;
    pos += size_t(rule.length);
  }
  return true;
}

char32_t next_code_point(std::string_view s, size_t& pos) {
  const auto b0 = uint8_t(s[pos]);
  if (b0 < 0x80) {
    ++pos;
    return b0;
  }
  const int length = b0 < 0xE0 ? 2 : b0 < 0xF0 ? 3 : 4;
  char32_t cp = b0 & (0x7F >> length);
  for (int i = 1; i < length; ++i) cp = (cp << 6) | (uint8_t(s[pos + size_t(i)]) & 0x3F);
  pos += size_t(length);
  return cp;
}

void append_code_point(char32_t cp, std::string& out) {
  if (cp < 0x80) {
    out.push_back(char(cp));
  } else if (cp < 0x800) {
    out.push_back(char(0xC0 | (cp >> 6)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(char(0xE0 | (cp >> 12)));
    out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(char(0xF0 | (cp >> 18)));
    out.push_back(char(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  }
}

}  // namespace drift::tokenizer
