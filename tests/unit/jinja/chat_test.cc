// render_chat and the Template API: what the server relies on beyond rendering correctly.
#include "tokenizer/jinja/chat.h"

#include <gtest/gtest.h>

#include <ctime>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "tokenizer/jinja/template.h"

namespace drift::jinja {
namespace {

using json = nlohmann::ordered_json;

Template parse_or_die(std::string_view source) {
  auto parsed = Template::parse(source);
  EXPECT_TRUE(parsed.ok()) << parsed.status().message();
  return std::move(parsed).value();
}

ChatTemplateInputs two_turns() {
  ChatTemplateInputs inputs;
  inputs.messages = json::parse(R"([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}])");
  inputs.bos_token = "<s>";
  inputs.eos_token = "</s>";
  return inputs;
}

TEST(RenderChat, PassesMessagesSpecialTokensAndTheGenerationFlag) {
  const Template chat = parse_or_die(
      "{{ bos_token }}{% for m in messages %}[{{ m.role }}:{{ m.content }}]{{ eos_token }}{% endfor %}"
      "{% if add_generation_prompt %}[assistant:{% endif %}");
  ChatTemplateInputs inputs = two_turns();
  EXPECT_EQ(*render_chat(chat, inputs), "<s>[user:hi]</s>[assistant:hello]</s>");
  inputs.add_generation_prompt = true;
  EXPECT_EQ(*render_chat(chat, inputs), "<s>[user:hi]</s>[assistant:hello]</s>[assistant:");
}

TEST(RenderChat, NoToolsIsNoneAndToolsAreAList) {
  const Template chat = parse_or_die(
      "{{ tools is defined }} {{ tools is none }}{% if tools %} {{ tools | map(attribute='name') | join(',') }}{% "
      "endif %}");
  ChatTemplateInputs inputs = two_turns();
  EXPECT_EQ(*render_chat(chat, inputs), "True True");
  inputs.tools = json::parse(R"([{"name": "a"}, {"name": "b"}])");
  EXPECT_EQ(*render_chat(chat, inputs), "True False a,b");
}

TEST(RenderChat, ExtraKeywordArgumentsReachTheTemplate) {
  const Template chat = parse_or_die(
      "{{ 'think' if enable_thinking is not defined or enable_thinking else 'no-think' }} {{ reasoning_effort | "
      "default('medium') }}");
  ChatTemplateInputs inputs = two_turns();
  EXPECT_EQ(*render_chat(chat, inputs), "think medium");
  inputs.extra = json::parse(R"({"enable_thinking": false, "reasoning_effort": "high"})");
  EXPECT_EQ(*render_chat(chat, inputs), "no-think high");
}

TEST(RenderChat, RejectsMalformedInputs) {
  const Template chat = parse_or_die("x");
  ChatTemplateInputs inputs = two_turns();
  inputs.extra = json::parse(R"({"add_generation_prompt": true})");
  auto repeated = render_chat(chat, inputs);
  ASSERT_FALSE(repeated.ok());
  EXPECT_EQ(repeated.status().message(),
            "chat template extra argument 'add_generation_prompt' repeats a built-in input");

  inputs = two_turns();
  inputs.messages = json::object();
  EXPECT_EQ(render_chat(chat, inputs).status().message(), "chat template messages must be a JSON array");
  inputs = two_turns();
  inputs.tools = "get_weather";
  EXPECT_EQ(render_chat(chat, inputs).status().message(), "chat template tools must be a JSON array or null");
}

TEST(RenderChat, RaiseExceptionFailsWithTheTemplatesOwnMessage) {
  const Template chat = parse_or_die(
      "{% for m in messages %}{% if (m.role == 'user') != (loop.index0 % 2 == 0) %}"
      "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% "
      "endfor %}");
  ChatTemplateInputs inputs = two_turns();
  EXPECT_TRUE(render_chat(chat, inputs).ok());
  inputs.messages = json::parse(R"([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])");
  const auto rendered = render_chat(chat, inputs);
  ASSERT_FALSE(rendered.ok());
  EXPECT_EQ(rendered.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(rendered.status().message(), "Conversation roles must alternate user/assistant/user/assistant/...");
}

TEST(Globals, StrftimeNowFormatsTheLocalTime) {
  const auto today = [] {
    const std::time_t now = std::time(nullptr);
    std::tm local{};
    localtime_r(&now, &local);
    char buffer[64];
    return std::string(buffer, std::strftime(buffer, sizeof(buffer), "%d %b %Y", &local));
  };
  const std::string before = today();
  const auto rendered = parse_or_die("{{ strftime_now('%d %b %Y') }}").render(json::object());
  const std::string after = today();
  ASSERT_TRUE(rendered.ok()) << rendered.status().message();
  EXPECT_TRUE(*rendered == before || *rendered == after) << *rendered;
}

TEST(Globals, ContextVariablesShadowGlobals) {
  EXPECT_EQ(*parse_or_die("{{ range }}").render(json::parse(R"({"range": "mine"})")), "mine");
}

TEST(TemplateApi, RejectsAContextThatIsNotAnObject) {
  const auto rendered = parse_or_die("x").render(json::array());
  ASSERT_FALSE(rendered.ok());
  EXPECT_EQ(rendered.status().message(), "template context must be a JSON object of variables");
  EXPECT_EQ(*parse_or_die("x{{ y }}").render(json()), "x");  // null: no variables
}

TEST(TemplateApi, CopiesShareTheParsedProgramAndRenderIndependently) {
  const Template original = parse_or_die(
      "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.n }}");
  const Template copy = original;  // the copy under test
  const json context = {{"messages", json::array({1, 2, 3})}};
  EXPECT_EQ(*original.render(context), "3");
  EXPECT_EQ(*copy.render(context), "3");
  EXPECT_EQ(*original.render(context), "3");  // namespace state does not survive a render
}

// The server renders one parsed template from many request threads at once.
TEST(TemplateApi, RendersConcurrentlyFromManyThreads) {
  const Template chat = parse_or_die(
      "{% macro turn(m) %}<{{ m.role | upper }}>{{ m.content | trim }}{% endmacro %}"
      "{% for m in messages %}{{ turn(m) }}{% endfor %}|{{ messages | tojson }}");
  const auto inputs_for = [](size_t turns) {
    ChatTemplateInputs inputs;
    for (size_t i = 0; i < turns; ++i)
      inputs.messages.push_back({{"role", "user"}, {"content", " turn " + std::to_string(i) + " "}});
    return inputs;
  };
  constexpr size_t kThreads = 8;
  std::vector<std::string> sequential(kThreads);
  for (size_t t = 0; t < kThreads; ++t) sequential[t] = render_chat(chat, inputs_for(t + 1)).value();
  EXPECT_EQ(
      sequential[1],
      R"(<USER>turn 0<USER>turn 1|[{"role": "user", "content": " turn 0 "}, {"role": "user", "content": " turn 1 "}])");

  std::vector<int> mismatches(kThreads, 0);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const ChatTemplateInputs inputs = inputs_for(t + 1);
      for (int repeat = 0; repeat < 200; ++repeat) {
        const auto rendered = render_chat(chat, inputs);
        if (!rendered.ok() || *rendered != sequential[t]) ++mismatches[t];
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (size_t t = 0; t < kThreads; ++t) EXPECT_EQ(mismatches[t], 0) << "thread " << t;
}

}  // namespace
}  // namespace drift::jinja
