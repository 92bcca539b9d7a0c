// The tokenizer.json "normalizer": none, or Unicode NFC (Qwen2), alone or inside a Sequence.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "drift/status.h"
#include "tokenizer/json_field.h"

namespace drift::tokenizer {

class Normalizer {
 public:
  // Reads root["normalizer"] (null means none).
  static Expected<Normalizer> from_json(const JsonField& root);

  bool is_identity() const { return !nfc_; }
  // The normalized form of valid UTF-8 `text`: `text` itself when nothing changes, else a view of `storage`.
  std::string_view apply(std::string_view text, std::string& storage) const;

 private:
  bool nfc_ = false;
};

}  // namespace drift::tokenizer
