#include "chat_session.h"

#include <nlohmann/json.hpp>

#include "tokenizer/harmony.h"

namespace drift::cli {

namespace {

using Json = nlohmann::ordered_json;

// A base model continues a transcript; the next "User:" line it writes is the end of its turn.
constexpr const char* kPlainStop = "\nUser:";

}  // namespace

std::string trim_blank(const std::string& s) {
  const size_t begin = s.find_first_not_of(" \t\r\n");
  if (begin == std::string::npos) return {};
  return s.substr(begin, s.find_last_not_of(" \t\r\n") + 1 - begin);
}

ChatSession ChatSession::open(const std::string& model_dir, const tokenizer::Tokenizer& tokenizer, ChatFormat format) {
  // A family that writes harmony (GPT-OSS) talks harmony whenever its tokenizer can, as `drift serve` does:
  // the built-in renderer, not the folder's template, so replies parse the same way in both.
  const bool harmony_tokens = tokenizer::harmony::is_harmony_tokenizer(tokenizer);
  if (format == ChatFormat::kHarmony && harmony_tokens) return ChatSession(PromptStyle::kHarmony, std::nullopt, tokenizer);
  auto chat_template = server::ChatTemplate::load(model_dir);
  if (chat_template.ok()) return ChatSession(PromptStyle::kTemplate, std::move(*chat_template), tokenizer);
  const PromptStyle style = harmony_tokens ? PromptStyle::kHarmony : PromptStyle::kPlain;
  ChatSession session(style, std::nullopt, tokenizer);
  // A folder without a template is normal for a base model; one whose template is broken is worth a word.
  if (chat_template.status().code() != StatusCode::kNotFound)
    session.template_problem_ = chat_template.status().message();
  return session;
}

void ChatSession::set_system(std::string system) {
  system_ = std::move(system);
  reset();
}

void ChatSession::drop_last_user() {
  if (!messages_.empty() && messages_.back().role == "user") messages_.pop_back();
}

// A turn is a user message and the reply to it; the oldest goes only while a later user message remains.
bool ChatSession::drop_oldest_turn() {
  for (size_t i = 1; i < messages_.size(); ++i) {
    if (messages_[i].role != "user") continue;
    messages_.erase(messages_.begin(), messages_.begin() + std::ptrdiff_t(i));
    return true;
  }
  return false;
}

Expected<ChatPrompt> ChatSession::render(int32_t max_tokens, int32_t& num_dropped) {
  num_dropped = 0;
  while (true) {
    DRIFT_ASSIGN_OR_RETURN(std::string text, render_text());
    ChatPrompt prompt = describe(std::move(text));
    if (prompt.num_tokens <= max_tokens || !drop_oldest_turn()) return prompt;
    ++num_dropped;
  }
}

Expected<std::string> ChatSession::render_text() const {
  switch (style_) {
    case PromptStyle::kTemplate: return render_template();
    case PromptStyle::kHarmony: return render_harmony();
    case PromptStyle::kPlain: break;
  }
  return render_plain();
}

Expected<std::string> ChatSession::render_template() const {
  Json messages = Json::array();
  if (!system_.empty()) messages.push_back({{"role", "system"}, {"content", system_}});
  for (const ChatMessage& m : messages_) messages.push_back({{"role", m.role}, {"content", m.content}});
  auto text = template_->render(messages, Json(), /*add_generation_prompt=*/true, Json::object());
  if (!text.ok()) return invalid_argument("the chat template failed: " + text.status().message());
  return text;
}

// The system prompt is harmony's developer message; earlier replies are final-channel messages (their
// reasoning was never kept, as the format asks once a turn has its answer).
Expected<std::string> ChatSession::render_harmony() const {
  namespace harmony = tokenizer::harmony;
  harmony::Conversation conversation;
  if (!system_.empty()) conversation.developer = harmony::DeveloperContent{.instructions = system_};
  for (const ChatMessage& m : messages_)
    conversation.messages.push_back(m.role == "user" ? harmony::Message::user(m.content)
                                                     : harmony::Message::assistant("final", m.content));
  return harmony::render_for_completion(conversation);
}

std::string ChatSession::render_plain() const {
  std::string text = system_.empty() ? "" : "System: " + system_ + "\n\n";
  for (const ChatMessage& m : messages_)
    text += (m.role == "user" ? "User: " : "Assistant: ") + m.content + "\n\n";
  return text + "Assistant:";
}

ChatPrompt ChatSession::describe(std::string text) const {
  ChatPrompt prompt;
  prompt.add_special_tokens = style_ == PromptStyle::kPlain;
  prompt.num_tokens = int32_t(tokenizer_.encode(text, prompt.add_special_tokens).size());
  if (style_ == PromptStyle::kPlain) prompt.stop = {kPlainStop};
  if (style_ == PromptStyle::kHarmony) {
    prompt.stop_token_ids = tokenizer::harmony::stop_token_ids(tokenizer_);
    prompt.format.harmony = true;
  }
  if (style_ == PromptStyle::kTemplate)
    prompt.format = server::detect_output_format(template_->source(), text, /*tools_enabled=*/false);
  prompt.parse_output = prompt.format.think_tags || prompt.format.harmony;
  prompt.text = std::move(text);
  return prompt;
}

}  // namespace drift::cli
