#include "tokenizer/jinja/chat.h"

#include <fmt/format.h>

namespace drift::jinja {

Expected<std::string> render_chat(const Template& chat_template, const ChatTemplateInputs& inputs) {
  if (!inputs.messages.is_array()) return invalid_argument("chat template messages must be a JSON array");
  if (!inputs.tools.is_null() && !inputs.tools.is_array()) {
    return invalid_argument("chat template tools must be a JSON array or null");
  }
  if (!inputs.extra.is_null() && !inputs.extra.is_object()) {
    return invalid_argument("chat template extra arguments must be a JSON object");
  }
  nlohmann::ordered_json context = nlohmann::ordered_json::object();
  context["messages"] = inputs.messages;
  context["tools"] = inputs.tools;
  context["add_generation_prompt"] = inputs.add_generation_prompt;
  context["bos_token"] = inputs.bos_token;
  context["eos_token"] = inputs.eos_token;
  if (inputs.extra.is_object()) {
    // transformers passes these as keyword arguments too, where a repeat is a TypeError.
    for (const auto& [name, value] : inputs.extra.items()) {
      if (context.contains(name)) {
        return invalid_argument(fmt::format("chat template extra argument '{}' repeats a built-in input", name));
      }
      context[name] = value;
    }
  }
  return chat_template.render(context);
}

}  // namespace drift::jinja
