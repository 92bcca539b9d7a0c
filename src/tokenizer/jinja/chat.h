// Renders a Hugging Face chat template the way transformers' apply_chat_template does: the template
// sees `messages`, `tools` (None when there are none), `add_generation_prompt`, `bos_token`,
// `eos_token` and any extra keyword arguments (chat_template_kwargs such as enable_thinking).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "drift/status.h"
#include "tokenizer/jinja/template.h"

namespace drift::jinja {

struct ChatTemplateInputs {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  nlohmann::ordered_json tools;  // null: no tools (the template sees None)
  bool add_generation_prompt = false;
  std::string bos_token;
  std::string eos_token;
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();  // must not repeat the names above
};

Expected<std::string> render_chat(const Template& chat_template, const ChatTemplateInputs& inputs);

}  // namespace drift::jinja
