// The tokenizer.json "pre_tokenizer": splits normalized text into the pieces that BPE merges within.
// Supported: Split(Regex or String, behavior Isolated) steps followed by one ByteLevel step, or a bare
// ByteLevel (use_regex true splits with the GPT-2 pattern).
#pragma once

#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "drift/status.h"
#include "tokenizer/json_field.h"
#include "tokenizer/regex.h"

namespace drift::tokenizer {

class PreTokenizer {
 public:
  // Reads root["pre_tokenizer"].
  static Expected<PreTokenizer> from_json(const JsonField& root);

  // Appends the pieces of valid UTF-8 `text` to `pieces`. A piece views `text`, or a string kept in
  // `storage` when ByteLevel's add_prefix_space put a space in front of it.
  void split(std::string_view text, std::vector<std::string_view>& pieces, std::deque<std::string>& storage) const;

 private:
  // One Split, or the final ByteLevel (whose regex is set when use_regex is true).
  struct Step {
    std::optional<Regex> regex;
    bool byte_level = false;
    bool add_prefix_space = false;
  };

  static Expected<Step> read_split(const JsonField& field);
  static Expected<Step> read_byte_level(const JsonField& field);
  static Expected<Step> read_step(const JsonField& field);

  std::vector<Step> steps_;
};

}  // namespace drift::tokenizer
