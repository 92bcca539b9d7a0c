// The chat template of a model folder, loaded as transformers does: tokenizer_config.json's
// "chat_template" (a string, or a list of {name, template} of which "default" is used), overridden by
// chat_template.jinja when that file exists; bos_token and eos_token come from tokenizer_config.json.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "drift/status.h"
#include "tokenizer/jinja/template.h"

namespace drift::server {

class ChatTemplate {
 public:
  // Fails with not_found when the folder has no template, and with the syntax error when it does not parse.
  static Expected<ChatTemplate> load(const std::string& model_dir);

  // `tools` null means none; `kwargs` (chat_template_kwargs) become extra template variables.
  Expected<std::string> render(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                               bool add_generation_prompt, const nlohmann::ordered_json& kwargs) const;

  const std::string& bos_token() const { return bos_token_; }
  // The template's text: the output parsers read the family's markers from it.
  const std::string& source() const { return source_; }
  const std::string& eos_token() const { return eos_token_; }

 private:
  ChatTemplate(jinja::Template t, std::string source, std::string bos, std::string eos)
      : template_(std::move(t)), source_(std::move(source)), bos_token_(std::move(bos)), eos_token_(std::move(eos)) {}

  jinja::Template template_;
  std::string source_;
  std::string bos_token_;
  std::string eos_token_;
};

}  // namespace drift::server
