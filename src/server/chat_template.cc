#include "server/chat_template.h"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "tokenizer/jinja/chat.h"

namespace drift::server {

namespace {

using Json = nlohmann::ordered_json;

Expected<std::string> read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return io_error(fmt::format("cannot read {}", path.string()));
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// A special token is stored as its text, or (older files) as an AddedToken object with "content".
std::string token_string(const Json& config, const char* key) {
  auto it = config.find(key);
  if (it == config.end()) return {};
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) return (*it)["content"].get<std::string>();
  return {};
}

// The template text from tokenizer_config.json's "chat_template"; empty when it has none.
Expected<std::string> template_from_config(const Json& config, const std::string& path) {
  auto it = config.find("chat_template");
  if (it == config.end() || it->is_null()) return std::string();
  if (it->is_string()) return it->get<std::string>();
  if (it->is_array()) {
    for (const Json& entry : *it) {
      if (entry.is_object() && entry.value("name", std::string()) == "default" && entry.contains("template") &&
          entry["template"].is_string())
        return entry["template"].get<std::string>();
    }
    return invalid_argument(fmt::format("{}: chat_template is a list with no template named \"default\"", path));
  }
  return invalid_argument(fmt::format("{}: chat_template must be a string or a list of {{name, template}}", path));
}

}  // namespace

Expected<ChatTemplate> ChatTemplate::load(const std::string& model_dir) {
  const std::filesystem::path dir(model_dir);
  const std::filesystem::path config_path = dir / "tokenizer_config.json";
  Json config = Json::object();
  if (std::filesystem::exists(config_path)) {
    DRIFT_ASSIGN_OR_RETURN(std::string text, read_text(config_path));
    config = Json::parse(text, nullptr, false);
    if (config.is_discarded() || !config.is_object())
      return data_loss(fmt::format("{} is not a JSON object", config_path.string()));
  }
  DRIFT_ASSIGN_OR_RETURN(std::string source, template_from_config(config, config_path.string()));
  std::string origin = config_path.string();
  // transformers >= 4.43 saves the template beside the config, and that file wins.
  const std::filesystem::path jinja_path = dir / "chat_template.jinja";
  if (std::filesystem::exists(jinja_path)) {
    DRIFT_ASSIGN_OR_RETURN(source, read_text(jinja_path));
    origin = jinja_path.string();
  }
  if (source.empty())
    return not_found(fmt::format("the model folder {} has no chat template (no chat_template in tokenizer_config.json "
                                 "and no chat_template.jinja); use /v1/completions instead",
                                 model_dir));
  auto parsed = jinja::Template::parse(source);
  if (!parsed.ok()) return invalid_argument(fmt::format("{}: {}", origin, parsed.status().message()));
  return ChatTemplate(std::move(*parsed), std::move(source), token_string(config, "bos_token"),
                      token_string(config, "eos_token"));
}

Expected<std::string> ChatTemplate::render(const Json& messages, const Json& tools, bool add_generation_prompt,
                                           const Json& kwargs) const {
  jinja::ChatTemplateInputs inputs;
  inputs.messages = messages;
  inputs.tools = tools;
  inputs.add_generation_prompt = add_generation_prompt;
  inputs.bos_token = bos_token_;
  inputs.eos_token = eos_token_;
  inputs.extra = kwargs.is_object() ? kwargs : Json::object();
  return jinja::render_chat(template_, inputs);
}

}  // namespace drift::server
