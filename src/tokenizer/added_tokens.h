// The tokenizer.json "added_tokens": strings that are cut out of the text before anything else and map
// straight to one id (chat markers such as <|im_start|>, and non-special additions such as <think>).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "drift/status.h"
#include "tokenizer/json_field.h"

namespace drift::tokenizer {

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool single_word = false;  // match only where no word character touches it on either side
  bool lstrip = false;       // the match also takes the whitespace before it
  bool rstrip = false;       // the match also takes the whitespace after it
  bool normalized = false;   // matched against the normalized text instead of the input
  bool special = false;      // skipped by decode(skip_special_tokens=true)
};

// Reads root["added_tokens"] (absent or null means none).
Expected<std::vector<AddedToken>> read_added_tokens(const JsonField& root);

}  // namespace drift::tokenizer
