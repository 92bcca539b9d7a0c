// JsonMatcher: accepts, byte by byte, exactly the prefixes of JSON texts that match a CompiledSchema, so
// that a token can be tested by feeding its bytes to a copy. A pushdown automaton: one Frame per open
// value (object, array, string, number, literal), the document at the bottom.
//
// Choices that keep the guarantee (every accepted text validates) while keeping the automaton small:
// an object with `properties` is written with those keys only, each at most once; anyOf takes the first
// branch that can start with the value's first byte, except a tagged union (SchemaNode::tags), written
// compactly as {"name": <tag>, "<key>": <value>} with the tag choosing the value's schema; whitespace runs between tokens are capped
// (`max_whitespace`), numbers to 16 digits per part and 2 of exponent. Nothing may follow the document.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "structured/json_schema.h"

namespace drift::structured {

// Whole UTF-8 characters only, as the matcher's strings accept them.
bool is_complete_utf8(std::string_view bytes);

class JsonMatcher {
 public:
  // `prefix` and `suffix` (optional, owned by the caller and outliving the matcher): literal text the
  // document must be wrapped in, e.g. a tool-call format's "<tool_call>\n" and "\n</tool_call>".
  JsonMatcher(const SchemaNode* root, int32_t max_whitespace, const std::string* prefix = nullptr,
              const std::string* suffix = nullptr);

  // Feeds one byte; false (and the matcher unchanged in meaning, but unusable) when no valid text
  // continues this way. Callers test on a copy.
  bool advance(uint8_t byte);
  bool advance(std::string_view bytes);
  // The text so far is a complete document.
  bool can_end() const;
  // Complete, and no byte may follow (the request is done). Tries every byte when the top is a number or
  // literal: call it once per token, not per byte.
  bool finished() const;

  // Inside a string with no escape or UTF-8 character pending: any complete UTF-8 text without '"', '\\'
  // or controls is fine while `string_room()` characters remain (-1: no limit). The token mask's fast path.
  bool in_plain_string() const;
  int64_t string_room() const;

 private:
  enum class Kind : uint8_t { kDocument, kValue, kObject, kArray, kString, kNumber, kLiteral, kTagged };
  struct Frame {
    Kind kind = Kind::kValue;
    uint8_t phase = 0;
    bool integer_only = false;
    const SchemaNode* node = nullptr;
    const std::vector<std::string>* literals = nullptr;  // kLiteral candidates; kObject key names
    uint64_t seen = 0;   // kObject: properties written
    uint64_t alive = 0;  // kLiteral / kObject key: candidates still matching
    int32_t count = 0;   // kArray items, kString characters, kNumber digits in the current part
    int32_t pos = 0;     // kLiteral / kObject key: bytes matched
  };
  enum class Step { kConsumed, kPopAndRetry, kReject };

  Step step(Frame& f, uint8_t byte);
  Step value(Frame& f, uint8_t byte);
  Step object(Frame& f, uint8_t byte);
  Step object_key(Frame& f, uint8_t byte);
  Step array(Frame& f, uint8_t byte);
  Step string(Frame& f, uint8_t byte);
  Step number(Frame& f, uint8_t byte);
  Step literal(Frame& f, uint8_t byte);
  Step tagged(Frame& f, uint8_t byte);
  bool whitespace(uint8_t byte);
  void push(Frame f) { stack_.push_back(f); }
  static bool literal_complete(const Frame& f);
  static bool number_complete(const Frame& f);
  static bool object_may_close(const Frame& f);

  Step document(Frame& f, uint8_t byte);

  std::vector<Frame> stack_;
  const SchemaNode* root_ = nullptr;
  const std::string* prefix_ = nullptr;
  const std::string* suffix_ = nullptr;
  int32_t max_whitespace_ = 0;
  int32_t whitespace_run_ = 0;
};

}  // namespace drift::structured
