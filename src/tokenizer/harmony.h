// The harmony chat format of GPT-OSS (openai/harmony docs/format.md): conversations rendered by code as text
// with the format's special tokens, the tokens that end an assistant turn, a parser that splits a completion
// back into messages, and the o200k_harmony tokenizer built from tiktoken's o200k_base ranks.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "drift/status.h"
#include "tokenizer/tokenizer.h"

namespace drift::tokenizer::harmony {

// tiktoken's split pattern for o200k_base, which o200k_harmony keeps.
inline constexpr std::string_view kO200kPattern =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|)"
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|)"
    R"(\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// o200k_harmony's special tokens as gpt-oss defines them (openai/gpt-oss gpt_oss/tokenizer.py): o200k_base's
// <|endoftext|> 199999 and <|endofprompt|> 200018, the harmony tokens (<|start|> 200006 ...), and
// <|reserved_N|> for every other id up to 201087, so the vocabulary has the model's 201088 entries.
std::vector<SpecialToken> o200k_harmony_special_tokens();

// The GPT-OSS tokenizer from o200k_base ranks in either file format Tokenizer::from_tiktoken reads.
Expected<Tokenizer> load_o200k_harmony(const std::string& ranks_path);

// The ids of <|return|> and <|call|>, the tokens after which an assistant stops sampling (format.md
// "Special Tokens"), as far as `tokenizer` has them; empty for a tokenizer that is not harmony's.
std::vector<int32_t> stop_token_ids(const Tokenizer& tokenizer);

// Whether `tokenizer` has every special token a harmony conversation is written with (<|start|>, <|end|>,
// <|message|>, <|channel|>, <|constrain|>) and the assistant's stop tokens: only then can the format's
// control text be encoded as the ids the model was trained on.
bool is_harmony_tokenizer(const Tokenizer& tokenizer);

enum class ReasoningEffort { kLow, kMedium, kHigh };

// The system message (format.md "System message format"). The defaults are the format's recommendation;
// an empty string or an unset effort leaves its line out.
struct SystemContent {
  std::string model_identity = "You are ChatGPT, a large language model trained by OpenAI.";
  std::string knowledge_cutoff = "2024-06";
  std::string current_date;  // e.g. "2025-06-28"
  std::optional<ReasoningEffort> reasoning_effort = ReasoningEffort::kMedium;
  std::vector<std::string> valid_channels = {"analysis", "commentary", "final"};
  bool channel_required = true;
};

// A function the model may call, declared in the developer message's `namespace functions`.
struct Tool {
  std::string name;
  std::string description;
  std::string parameters_json;  // a JSON Schema object; empty: the function takes no arguments
};

// The developer message (format.md "Developer message format"): the "system prompt" and the tools.
struct DeveloperContent {
  std::string instructions;
  std::vector<Tool> tools;
};

// kDeveloper: a developer message after the first (the first is the Conversation's DeveloperContent).
enum class Role { kUser, kAssistant, kTool, kDeveloper };

struct Message {
  Role role = Role::kUser;
  std::string name;          // kTool: who answered, e.g. "functions.get_weather"
  std::string channel;       // "analysis", "commentary" or "final"; empty: none
  std::string recipient;     // an assistant's tool call: "functions.get_weather"; a tool's answer: "assistant"
  std::string content_type;  // a tool call's argument format, e.g. "json" (rendered after <|constrain|>)
  std::string content;

  static Message user(std::string content);
  static Message assistant(std::string channel, std::string content);
  // A call of functions.`function` with JSON `arguments` on the commentary channel.
  static Message tool_call(std::string_view function, std::string arguments);
  // What functions.`function` returned, addressed to the assistant.
  static Message tool_result(std::string_view function, std::string output);
};

struct Conversation {
  std::optional<SystemContent> system = SystemContent{};
  std::optional<DeveloperContent> developer;
  std::vector<Message> messages;
};

struct RenderOptions {
  // Leave out analysis (chain of thought) that a later final-channel message concluded; analysis that led
  // to a tool call and has no final answer yet stays (format.md "Handling reasoning output").
  bool drop_finished_analysis = true;
};

// The conversation as harmony text, ending with "<|start|>assistant" for the model to continue. Special
// tokens appear as their text, which Tokenizer::encode turns into their ids. Errors name the message.
Expected<std::string> render_for_completion(const Conversation& conversation, const RenderOptions& options = {});
// The same without the trailing "<|start|>assistant".
Expected<std::string> render(const Conversation& conversation, const RenderOptions& options = {});

// What follows "<|start|>assistant" in a call of functions.`function` with JSON arguments, up to and
// including <|message|> ("<|channel|>commentary to=functions.f <|constrain|>json<|message|>"): a prompt
// that ends with it leaves the model only the arguments to write.
std::string tool_call_opening(std::string_view function);

enum class MessageEnd {
  kEnd,         // <|end|>: another message follows
  kReturn,      // <|return|>: the answer is complete
  kCall,        // <|call|>: the message is a tool call waiting for its result
  kUnfinished,  // the tokens stopped inside the message (e.g. max_tokens)
};

struct ParsedMessage {
  std::string role;  // "assistant", or the author named in the header
  std::string channel;
  std::string recipient;
  std::string content_type;  // "json" for "<|constrain|>json"
  std::string content;
  MessageEnd end = MessageEnd::kUnfinished;

  bool is_tool_call() const { return !recipient.empty() && recipient != "assistant" && recipient != "all"; }
};

// A message header as the model writes it, between <|start|> and <|message|> ("assistant<|channel|>commentary
// to=functions.x <|constrain|>json"): a role part, then a channel part; the recipient and the content type
// may sit in either (format.md "Receiving tool calls"). `content` and `end` stay unset.
ParsedMessage parse_header(std::string_view header);

// Splits what the model generated after "<|start|>assistant" into its messages (analysis, final, tool
// calls). The recipient may sit in the role or the channel part of a header (format.md "Receiving tool
// calls"). A control token out of place is an error that names its position.
Expected<std::vector<ParsedMessage>> parse_completion(const Tokenizer& tokenizer, std::span<const int32_t> ids);

}  // namespace drift::tokenizer::harmony
