// The conversation of `drift chat`: a system prompt and the turns so far, rendered for every reply in
// the model's own format: its chat template, harmony (a GPT-OSS folder without a template), or a plain
// "User: / Assistant:" transcript for a base model that has neither.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "drift/chat_format.h"
#include "drift/status.h"
#include "server/chat_output_parser.h"
#include "server/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace drift::cli {

// `s` without the blanks (spaces, tabs, line ends) at either end.
std::string trim_blank(const std::string& s);

enum class PromptStyle { kTemplate, kHarmony, kPlain };

// One reply's prompt and how to read what comes back.
struct ChatPrompt {
  std::string text;
  int32_t num_tokens = 0;
  bool add_special_tokens = false;      // a template or harmony writes its own; the plain transcript needs BOS
  std::vector<std::string> stop;        // plain: the transcript's next "User:" line
  std::vector<int32_t> stop_token_ids;  // harmony: <|return|> and <|call|>
  server::ChatOutputFormat format;      // where reasoning ends and the answer starts
  bool parse_output = false;            // false: all of the reply is the answer
};

struct ChatMessage {
  std::string role;  // "user" or "assistant"
  std::string content;
};

class ChatSession {
 public:
  // Harmony when the model's family writes it (`format`) and the tokenizer has harmony's tokens; else the
  // folder's chat template, else harmony when the tokenizer has its tokens, else plain. A template that
  // fails to load is reported by template_problem(), not used.
  static ChatSession open(const std::string& model_dir, const tokenizer::Tokenizer& tokenizer,
                          ChatFormat format = ChatFormat::kTemplate);

  PromptStyle style() const { return style_; }
  const std::string& template_problem() const { return template_problem_; }
  const std::string& system() const { return system_; }
  void set_system(std::string system);  // and starts over
  void reset() { messages_.clear(); }   // the system prompt stays
  void add_user(std::string text) { messages_.push_back({"user", std::move(text)}); }
  void add_reply(std::string text) { messages_.push_back({"assistant", std::move(text)}); }
  // Takes back the latest user message, whose reply failed or was cancelled.
  void drop_last_user();

  // The history with the generation prompt for the next reply. While it needs more than `max_tokens`,
  // the oldest turns go (the system prompt and the latest message stay); `num_dropped` counts them.
  Expected<ChatPrompt> render(int32_t max_tokens, int32_t& num_dropped);

 private:
  ChatSession(PromptStyle style, std::optional<server::ChatTemplate> chat_template, tokenizer::Tokenizer tokenizer)
      : style_(style), template_(std::move(chat_template)), tokenizer_(std::move(tokenizer)) {}

  Expected<std::string> render_text() const;
  Expected<std::string> render_template() const;
  Expected<std::string> render_harmony() const;
  std::string render_plain() const;
  bool drop_oldest_turn();
  ChatPrompt describe(std::string text) const;

  PromptStyle style_;
  std::optional<server::ChatTemplate> template_;
  tokenizer::Tokenizer tokenizer_;
  std::string template_problem_;
  std::string system_;
  std::vector<ChatMessage> messages_;
};

}  // namespace drift::cli
