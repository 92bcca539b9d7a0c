// The tokenizer.json "post_processor", applied when encode() is asked to add special tokens: null,
// ByteLevel (no effect on ids), TemplateProcessing (e.g. Llama-3's <|begin_of_text|> $A), or a Sequence
// of those.
#pragma once

#include <cstdint>
#include <vector>

#include "drift/status.h"
#include "tokenizer/json_field.h"

namespace drift::tokenizer {

class PostProcessor {
 public:
  // Reads root["post_processor"] (null means none).
  static Expected<PostProcessor> from_json(const JsonField& root);

  // Wraps the ids of one sequence in the single-sequence template.
  void apply(std::vector<int32_t>& ids) const;

 private:
  Status read_step(const JsonField& field);
  Status read_template(const JsonField& field);

  std::vector<int32_t> before_;  // special-token ids the template puts before $A
  std::vector<int32_t> after_;   // and after it
  bool has_template_ = false;
};

}  // namespace drift::tokenizer
