#include "structured/json_matcher.h"

#include <bit>

namespace drift::structured {

namespace {

constexpr int32_t kMaxDigits = 16;
// 16 digits times 10^99 stays far inside a double: no parser overflows on what the matcher admits.
constexpr int32_t kMaxExponentDigits = 2;
const std::vector<std::string> kBooleans = {"true", "false"};
const std::vector<std::string> kNullLiteral = {"null"};

bool is_space(uint8_t b) { return b == ' ' || b == '\n' || b == '\t' || b == '\r'; }
bool is_digit(uint8_t b) { return b >= '0' && b <= '9'; }
bool is_hex(uint8_t b) { return is_digit(b) || (b >= 'a' && b <= 'f') || (b >= 'A' && b <= 'F'); }
uint64_t all_of(size_t n) { return n >= 64 ? ~uint64_t(0) : (uint64_t(1) << n) - 1; }

// Whether a value of `node` may begin with `byte`, ignoring anyOf (the caller picks a branch).
bool may_start(const SchemaNode& node, uint8_t byte) {
  if (!node.literals.empty()) {
    for (const std::string& l : node.literals)
      if (!l.empty() && uint8_t(l[0]) == byte) return true;
    return false;
  }
  if (!node.any_of.empty()) {
    for (const SchemaNode* b : node.any_of)
      if (may_start(*b, byte)) return true;
    return false;
  }
  switch (byte) {
    case '{': return node.types & kObject;
    case '[': return node.types & kArray;
    case '"': return node.types & kString;
    case 't': case 'f': return node.types & kBoolean;
    case 'n': return node.types & kNull;
    default: return (byte == '-' || is_digit(byte)) && (node.types & (kNumber | kInteger));
  }
}

}  // namespace

// The document frame: phase 0 while the prefix is matched (pos bytes so far), 1 once the value is done and
// the suffix is matched (count bytes so far).
JsonMatcher::JsonMatcher(const SchemaNode* root, int32_t max_whitespace, const std::string* prefix,
                         const std::string* suffix)
    : root_(root), prefix_(prefix), suffix_(suffix), max_whitespace_(max_whitespace) {
  stack_.reserve(16);
  const bool has_prefix = prefix_ != nullptr && !prefix_->empty();
  push({.kind = Kind::kDocument, .phase = uint8_t(has_prefix ? 0 : 1)});
  if (!has_prefix) push({.kind = Kind::kValue, .node = root});
}

JsonMatcher::Step JsonMatcher::document(Frame& f, uint8_t byte) {
  if (f.phase == 0) {
    if (uint8_t((*prefix_)[size_t(f.pos)]) != byte) return Step::kReject;
    if (size_t(++f.pos) == prefix_->size()) {
      f.phase = 1;
      push({.kind = Kind::kValue, .node = root_});
    }
    return Step::kConsumed;
  }
  if (suffix_ == nullptr || size_t(f.count) >= suffix_->size() || uint8_t((*suffix_)[size_t(f.count)]) != byte)
    return Step::kReject;  // nothing after the document but its suffix
  ++f.count;
  return Step::kConsumed;
}

bool JsonMatcher::whitespace(uint8_t byte) {
  if (!is_space(byte) || whitespace_run_ >= max_whitespace_) return false;
  ++whitespace_run_;
  return true;
}

bool JsonMatcher::advance(uint8_t byte) {
  while (!stack_.empty()) {
    switch (step(stack_.back(), byte)) {
      case Step::kConsumed:
        if (!is_space(byte) || stack_.back().kind == Kind::kString) whitespace_run_ = 0;
        return true;
      case Step::kReject: return false;
      case Step::kPopAndRetry: stack_.pop_back(); break;
    }
  }
  return false;
}

bool JsonMatcher::advance(std::string_view bytes) {
  for (char c : bytes)
    if (!advance(uint8_t(c))) return false;
  return true;
}

JsonMatcher::Step JsonMatcher::step(Frame& f, uint8_t byte) {
  switch (f.kind) {
    case Kind::kDocument: return document(f, byte);
    case Kind::kValue: return value(f, byte);
    case Kind::kObject: return f.phase == 5 ? object_key(f, byte) : object(f, byte);
    case Kind::kArray: return array(f, byte);
    case Kind::kString: return string(f, byte);
    case Kind::kNumber: return number(f, byte);
    case Kind::kLiteral: return literal(f, byte);
    case Kind::kTagged: return tagged(f, byte);
  }
  return Step::kReject;
}

// A value not begun yet: whitespace, or its first byte decides what it is (the frame becomes that).
JsonMatcher::Step JsonMatcher::value(Frame& f, uint8_t byte) {
  if (whitespace(byte)) return Step::kConsumed;
  const SchemaNode* node = f.node;
  if (!node->tags.empty()) {
    if (byte != '{') return Step::kReject;
    f = Frame{.kind = Kind::kTagged, .node = node};
    return Step::kConsumed;
  }
  while (!node->any_of.empty() && node->literals.empty()) {
    const SchemaNode* pick = nullptr;
    for (const SchemaNode* b : node->any_of)
      if (may_start(*b, byte)) {
        pick = b;
        break;
      }
    if (pick == nullptr) return Step::kReject;
    node = pick;
  }
  if (!may_start(*node, byte)) return Step::kReject;
  Frame next{.node = node};
  if (!node->literals.empty()) {
    next.kind = Kind::kLiteral;
    next.literals = &node->literals;
  } else if (byte == '{') {
    next.kind = Kind::kObject;
    next.literals = &node->quoted_property_names;
  } else if (byte == '[') {
    next.kind = Kind::kArray;
  } else if (byte == '"') {
    next.kind = Kind::kString;
  } else if (byte == 't' || byte == 'f' || byte == 'n') {
    next.kind = Kind::kLiteral;
    next.literals = byte == 'n' ? &kNullLiteral : &kBooleans;
  } else {
    next.kind = Kind::kNumber;
    next.integer_only = !(node->types & kNumber);
  }
  if (next.kind == Kind::kLiteral) next.alive = all_of(next.literals->size());
  f = next;
  // Containers and strings consume their opening byte; literals and numbers match it themselves.
  if (f.kind == Kind::kObject || f.kind == Kind::kArray || f.kind == Kind::kString) return Step::kConsumed;
  return step(f, byte);
}

bool JsonMatcher::object_may_close(const Frame& f) {
  for (size_t i = 0; i < f.node->required.size(); ++i)
    if (f.node->required[i] && !(f.seen >> i & 1)) return false;
  return true;
}

// Phases: 0 after '{', 1 after a key, 3 after a value, 4 after ',', 5 inside a declared key (object_key).
JsonMatcher::Step JsonMatcher::object(Frame& f, uint8_t byte) {
  const SchemaNode& n = *f.node;
  const bool declared = !n.property_names.empty();
  const uint64_t unseen = declared ? all_of(n.property_names.size()) & ~f.seen : 0;
  const bool more_keys = declared ? unseen != 0 : (n.additional_properties || n.additional_schema);
  if (whitespace(byte)) return Step::kConsumed;
  switch (f.phase) {
    case 0: case 3: case 4:
      if (byte == '}' && f.phase != 4 && object_may_close(f)) {
        stack_.pop_back();
        return Step::kConsumed;
      }
      if (byte == ',' && f.phase == 3 && more_keys) {
        f.phase = 4;
        return Step::kConsumed;
      }
      if (byte != '"' || f.phase == 3 || !more_keys) return Step::kReject;
      if (declared) {
        f.phase = 5;
        f.alive = unseen;
        f.pos = 0;
        return object_key(f, byte);
      }
      f.phase = 1;
      push({.kind = Kind::kString});
      return Step::kConsumed;
    case 1: {
      if (byte != ':') return Step::kReject;
      f.phase = 3;
      const SchemaNode* value_schema = f.node->additional_schema;
      if (declared) value_schema = n.property_schemas[size_t(f.count)];
      static const SchemaNode kAny{};
      push({.kind = Kind::kValue, .node = value_schema ? value_schema : &kAny});
      return Step::kConsumed;
    }
    default: return Step::kReject;
  }
}

// Matches `byte` against the unseen property names (quoted); the closing quote picks the property.
JsonMatcher::Step JsonMatcher::object_key(Frame& f, uint8_t byte) {
  const std::vector<std::string>& names = *f.literals;
  uint64_t alive = 0;
  for (uint64_t bits = f.alive; bits; bits &= bits - 1) {
    const int i = std::countr_zero(bits);
    const std::string& name = names[size_t(i)];
    if (size_t(f.pos) < name.size() && uint8_t(name[size_t(f.pos)]) == byte) alive |= uint64_t(1) << i;
  }
  if (alive == 0) return Step::kReject;
  f.alive = alive;
  ++f.pos;
  // Quoted names end with '"' and contain no other unescaped one, so at most one can be complete.
  for (uint64_t bits = alive; bits; bits &= bits - 1) {
    const int i = std::countr_zero(bits);
    if (names[size_t(i)].size() == size_t(f.pos)) {
      f.seen |= uint64_t(1) << i;
      f.count = i;  // the property whose value comes next
      f.phase = 1;
    }
  }
  return Step::kConsumed;
}

// Phases: 0 after '[', 1 after an item, 2 after ','.
JsonMatcher::Step JsonMatcher::array(Frame& f, uint8_t byte) {
  const SchemaNode& n = *f.node;
  if (whitespace(byte)) return Step::kConsumed;
  if (byte == ']' && f.phase != 2 && f.count >= n.min_items) {
    stack_.pop_back();
    return Step::kConsumed;
  }
  if (byte == ',' && f.phase == 1 && (n.max_items < 0 || f.count < n.max_items)) {
    f.phase = 2;
    return Step::kConsumed;
  }
  if (f.phase == 1 || (n.max_items >= 0 && f.count >= n.max_items)) return Step::kReject;
  static const SchemaNode kAny{};
  const SchemaNode* item = n.items ? n.items : &kAny;
  if (!may_start(*item, byte)) return Step::kReject;
  f.phase = 1;
  ++f.count;
  push({.kind = Kind::kValue, .node = item});
  return value(stack_.back(), byte);
}

namespace {

// What a UTF-8 lead byte asks of what follows: the continuation bytes still due, and the range the
// first of them must fall in (RFC 3629 table 3.7: no overlong forms, no surrogates, nothing past U+10FFFF).
struct Utf8Lead {
  int32_t pending;
  uint8_t lo, hi;
};
bool utf8_lead(uint8_t b, Utf8Lead& lead) {
  if (b >= 0xC2 && b <= 0xDF) lead = {1, 0x80, 0xBF};
  else if (b == 0xE0) lead = {2, 0xA0, 0xBF};
  else if (b == 0xED) lead = {2, 0x80, 0x9F};
  else if (b >= 0xE1 && b <= 0xEF) lead = {2, 0x80, 0xBF};
  else if (b == 0xF0) lead = {3, 0x90, 0xBF};
  else if (b >= 0xF1 && b <= 0xF3) lead = {3, 0x80, 0xBF};
  else if (b == 0xF4) lead = {3, 0x80, 0x8F};
  else return false;
  return true;
}

}  // namespace

bool is_complete_utf8(std::string_view bytes) {
  for (size_t i = 0; i < bytes.size();) {
    const uint8_t b = uint8_t(bytes[i]);
    if (b < 0x80) {
      ++i;
      continue;
    }
    Utf8Lead lead;
    if (!utf8_lead(b, lead) || i + size_t(lead.pending) >= bytes.size()) return false;
    for (int32_t k = 1; k <= lead.pending; ++k) {
      const uint8_t c = uint8_t(bytes[i + size_t(k)]);
      if (k == 1 ? (c < lead.lo || c > lead.hi) : (c < 0x80 || c > 0xBF)) return false;
    }
    i += size_t(lead.pending) + 1;
  }
  return true;
}

// Phases: 0 content, 1 after '\\', 2..5 the hex digits of \\uXXXX (6: the second after a 'd', which must
// keep it out of the surrogates). `count` counts characters; `pos` holds an unfinished UTF-8 character:
// continuation bytes due << 16 | the lowest allowed next byte << 8 | the highest.
JsonMatcher::Step JsonMatcher::string(Frame& f, uint8_t byte) {
  const SchemaNode* n = f.node;
  const int64_t max_length = n ? n->max_length : -1;
  switch (f.phase) {
    case 0: {
      const int32_t pending = f.pos >> 16;
      if (pending > 0) {
        const uint8_t lo = uint8_t(f.pos >> 8), hi = uint8_t(f.pos);
        if (byte < lo || byte > hi) return Step::kReject;
        f.pos = pending == 1 ? 0 : ((pending - 1) << 16) | (0x80 << 8) | 0xBF;
        return Step::kConsumed;
      }
      if (byte == '"') {
        if (n && f.count < n->min_length) return Step::kReject;
        stack_.pop_back();
        return Step::kConsumed;
      }
      if (byte < 0x20 || (byte >= 0x80 && byte < 0xC2) || byte > 0xF4) return Step::kReject;
      if (max_length >= 0 && f.count >= max_length) return Step::kReject;
      ++f.count;
      if (Utf8Lead lead; byte >= 0x80 && utf8_lead(byte, lead)) f.pos = (lead.pending << 16) | (lead.lo << 8) | lead.hi;
      if (byte == '\\') f.phase = 1;
      return Step::kConsumed;
    }
    case 1:
      if (byte == 'u') {
        f.phase = 2;
        return Step::kConsumed;
      }
      for (char c : std::string_view(R"("\/bfnrt)"))
        if (byte == uint8_t(c)) {
          f.phase = 0;
          return Step::kConsumed;
        }
      return Step::kReject;
    case 2:
      if (!is_hex(byte)) return Step::kReject;
      f.phase = (byte == 'd' || byte == 'D') ? 6 : 3;
      return Step::kConsumed;
    case 6:
      if (!(byte >= '0' && byte <= '7')) return Step::kReject;
      f.phase = 4;
      return Step::kConsumed;
    default:
      if (!is_hex(byte)) return Step::kReject;
      f.phase = f.phase == 5 ? 0 : f.phase + 1;
      return Step::kConsumed;
  }
}

bool JsonMatcher::number_complete(const Frame& f) { return f.phase == 2 || f.phase == 3 || f.phase == 5 || f.phase == 8; }

// Phases: 0 start, 1 after '-', 2 a leading 0, 3 integer digits, 4 after '.', 5 fraction digits, 6 after
// 'e', 7 after its sign, 8 exponent digits. A byte that cannot continue ends a complete number.
JsonMatcher::Step JsonMatcher::number(Frame& f, uint8_t byte) {
  const bool digit = is_digit(byte);
  auto digit_in = [&](uint8_t next_phase) {
    if (f.phase != next_phase) f.count = 0;
    if (++f.count > (next_phase == 8 ? kMaxExponentDigits : kMaxDigits)) return Step::kReject;
    f.phase = next_phase;
    return Step::kConsumed;
  };
  switch (f.phase) {
    case 0:
      if (byte == '-') {
        f.phase = 1;
        return Step::kConsumed;
      }
      [[fallthrough]];
    case 1:
      if (byte == '0') {
        f.phase = 2;
        return Step::kConsumed;
      }
      return digit ? digit_in(3) : Step::kReject;
    case 3:
      if (digit) return digit_in(3);
      [[fallthrough]];
    case 2:
      if (byte == '.' && !f.integer_only) {
        f.phase = 4;
        return Step::kConsumed;
      }
      if ((byte == 'e' || byte == 'E') && !f.integer_only) {
        f.phase = 6;
        return Step::kConsumed;
      }
      return Step::kPopAndRetry;
    case 4: return digit ? digit_in(5) : Step::kReject;
    case 5:
      if (digit) return digit_in(5);
      if (byte == 'e' || byte == 'E') {
        f.phase = 6;
        return Step::kConsumed;
      }
      return Step::kPopAndRetry;
    case 6:
      if (byte == '+' || byte == '-') {
        f.phase = 7;
        return Step::kConsumed;
      }
      [[fallthrough]];
    case 7: return digit ? digit_in(8) : Step::kReject;
    case 8: return digit ? digit_in(8) : Step::kPopAndRetry;
    default: return Step::kReject;
  }
}

// Phases: 0 the head ("name": ), 1 the tag (alive: candidates), 2 the middle (, "key": ), 3 after the
// value, where only '}' may come. `pos` counts bytes of the current fixed part; `count` is the chosen tag.
JsonMatcher::Step JsonMatcher::tagged(Frame& f, uint8_t byte) {
  const SchemaNode& n = *f.node;
  switch (f.phase) {
    case 0:
    case 2: {
      const std::string& text = f.phase == 0 ? n.tag_head : n.tag_middle;
      if (uint8_t(text[size_t(f.pos)]) != byte) return Step::kReject;
      if (size_t(++f.pos) < text.size()) return Step::kConsumed;
      f.pos = 0;
      if (f.phase == 0) {
        f.phase = 1;
        f.alive = all_of(n.tags.size());
        return Step::kConsumed;
      }
      f.phase = 3;
      push({.kind = Kind::kValue, .node = n.tagged_values[size_t(f.count)]});
      return Step::kConsumed;
    }
    case 1: {
      uint64_t alive = 0;
      for (uint64_t bits = f.alive; bits; bits &= bits - 1) {
        const int i = std::countr_zero(bits);
        const std::string& tag = n.tags[size_t(i)];
        if (size_t(f.pos) < tag.size() && uint8_t(tag[size_t(f.pos)]) == byte) alive |= uint64_t(1) << i;
      }
      if (alive == 0) return Step::kReject;
      f.alive = alive;
      ++f.pos;
      // Quoted tags: at most one ends here.
      for (uint64_t bits = alive; bits; bits &= bits - 1) {
        const int i = std::countr_zero(bits);
        if (n.tags[size_t(i)].size() == size_t(f.pos)) {
          f.count = i;
          f.phase = 2;
          f.pos = 0;
        }
      }
      return Step::kConsumed;
    }
    default:
      if (byte != '}') return Step::kReject;
      stack_.pop_back();
      return Step::kConsumed;
  }
}

bool JsonMatcher::literal_complete(const Frame& f) {
  for (uint64_t bits = f.alive; bits; bits &= bits - 1)
    if ((*f.literals)[size_t(std::countr_zero(bits))].size() == size_t(f.pos)) return true;
  return false;
}

JsonMatcher::Step JsonMatcher::literal(Frame& f, uint8_t byte) {
  uint64_t alive = 0;
  for (uint64_t bits = f.alive; bits; bits &= bits - 1) {
    const int i = std::countr_zero(bits);
    const std::string& l = (*f.literals)[size_t(i)];
    if (size_t(f.pos) < l.size() && uint8_t(l[size_t(f.pos)]) == byte) alive |= uint64_t(1) << i;
  }
  if (alive == 0) return literal_complete(f) ? Step::kPopAndRetry : Step::kReject;
  f.alive = alive;
  ++f.pos;
  return Step::kConsumed;
}

bool JsonMatcher::can_end() const {
  size_t top = stack_.size();
  // A complete number or literal ends with the text; so does everything it closes.
  if (top > 0 && stack_[top - 1].kind == Kind::kNumber && number_complete(stack_[top - 1])) --top;
  else if (top > 0 && stack_[top - 1].kind == Kind::kLiteral && literal_complete(stack_[top - 1])) --top;
  const size_t suffix = suffix_ ? suffix_->size() : 0;
  return top == 1 && stack_[0].phase == 1 && size_t(stack_[0].count) == suffix;
}

bool JsonMatcher::finished() const {
  if (stack_.size() == 1 && can_end()) return true;
  if (!can_end()) return false;
  // Complete but still open to more (a number's digits, a literal's longer candidate): finished only
  // when no byte continues it.
  for (int b = 0; b < 256; ++b) {
    JsonMatcher trial = *this;
    if (trial.advance(uint8_t(b))) return false;
  }
  return true;
}

bool JsonMatcher::in_plain_string() const {
  return !stack_.empty() && stack_.back().kind == Kind::kString && stack_.back().phase == 0 && stack_.back().pos == 0;
}

int64_t JsonMatcher::string_room() const {
  const Frame& f = stack_.back();
  if (f.node == nullptr || f.node->max_length < 0) return -1;
  return f.node->max_length - f.count;
}

}  // namespace drift::structured
