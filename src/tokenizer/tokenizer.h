// Byte-level BPE tokenizer read from a Hugging Face tokenizer.json (Llama-3, Qwen2/3, gpt-oss o200k,
// DeepSeek), producing the same ids as Hugging Face `tokenizers`, and a streaming detokenizer.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "drift/status.h"

namespace drift::tokenizer {

struct TokenizerImpl;

// A token cut out of the text before anything else and mapped straight to `id` (tiktoken's special tokens).
struct SpecialToken {
  std::string content;
  int32_t id = 0;
};

// Immutable after loading; copies share the tables. encode() and decode() may run on many threads at once.
class Tokenizer {
 public:
  // Reads a Hugging Face tokenizer.json (model.type "BPE", byte-level). Errors name the file and the field.
  static Expected<Tokenizer> from_file(const std::string& tokenizer_json_path);
  static Expected<Tokenizer> from_json_string(std::string_view json, std::string_view source_name);
  // Reads tiktoken BPE ranks: a `.tiktoken` file ("<base64 bytes> <rank>" per line) or a JSON file with a
  // "bpe_ranks" field as the npm package `tiktoken` ships (encoders/o200k_base.json). A token's rank is its
  // id; `pattern` splits the text; `special_tokens` are cut out first, as tiktoken's allowed_special="all".
  static Expected<Tokenizer> from_tiktoken(const std::string& ranks_path, std::string_view pattern,
                                           std::span<const SpecialToken> special_tokens);

  // Added tokens in `text` (special or not) become their ids. add_special_tokens applies the
  // post_processor (e.g. TemplateProcessing adding <|begin_of_text|>). Invalid UTF-8 in `text` is read as
  // U+FFFD, the way Python would have to decode it before Hugging Face could see it.
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = false) const;
  // Unknown ids are skipped. Bytes that do not form valid UTF-8 become U+FFFD, as Hugging Face does.
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = false) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  int32_t vocab_size() const;  // including added tokens (max id + 1)
  bool is_special(int32_t id) const;
  // The stored vocab string / added-token content; empty for an unknown id.
  std::string_view token_text(int32_t id) const;
  // The raw bytes `id` decodes to before the UTF-8 repair in decode(); may end inside a character.
  std::string_view token_bytes(int32_t id) const;

 private:
  explicit Tokenizer(std::shared_ptr<const TokenizerImpl> impl) : impl_(std::move(impl)) {}

  std::shared_ptr<const TokenizerImpl> impl_;
};

// Incremental detokenizer for streaming: feed ids one at a time, get back only text that is complete
// UTF-8 and will not change (holds back partial multi-byte sequences). The concatenation of all push()
// results and flush() equals tokenizer.decode(all ids).
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, bool skip_special_tokens = false);

  std::string push(int32_t id);
  // Emits what is held back (an unfinished character becomes U+FFFD) and starts over.
  std::string flush();

 private:
  Tokenizer tokenizer_;  // a handle: copies share the tables
  bool skip_special_tokens_;
  std::string pending_;  // bytes of a character still waiting for its continuation bytes
};

}  // namespace drift::tokenizer
