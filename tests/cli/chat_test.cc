// `drift chat` as a user meets it: lines piped in (the history each turn renders, /reset, /system,
// reasoning kept out of the history, harmony, a conversation longer than the context, a refused
// turn), and typed into a real terminal through tmux, the screen read back. --show-prompt prints each
// rendered prompt to stderr, so the history is checked exactly rather than inferred from what a model
// writes.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "cli_run.h"
#include "model_copy.h"

namespace drift::testing {
namespace {

namespace fs = std::filesystem;


// `drift chat ARGS` with `input` on stdin.
CommandRun chat(const std::string& args, const std::string& input) {
  static int count = 0;
  const std::string path = ::testing::TempDir() + "/drift_chat_input_" + std::to_string(getpid()) + "_" +
                           std::to_string(count++) + ".txt";
  std::ofstream(path) << input;
  CommandRun r = shell(std::string(DRIFT_BINARY) + " chat " + args + " < " + path);
  fs::remove(path);
  return r;
}

const std::regex kStatsLine(R"(\[\d+ tokens, \d+\.\d\d s, \d+\.\d tokens/s(, length limit)?\])");

size_t count_stats_lines(const std::string& out) {
  return size_t(std::distance(std::sregex_iterator(out.begin(), out.end(), kStatsLine), std::sregex_iterator()));
}

// The prompts --show-prompt printed, in order.
std::vector<std::string> shown_prompts(const std::string& out) {
  static const std::regex prompt(R"(--- prompt \(\d+ tokens\) ---\n([\s\S]*?)\n--- end of prompt ---)");
  std::vector<std::string> prompts;
  for (auto it = std::sregex_iterator(out.begin(), out.end(), prompt); it != std::sregex_iterator(); ++it)
    prompts.push_back((*it)[1]);
  return prompts;
}

// The text of the n-th reply (from 0) as printed after "model> ", up to its stats line.
std::string reply_text(const std::string& out, int n) {
  size_t at = 0;
  for (int i = 0; i <= n; ++i) {
    at = out.find("model> ", at);
    if (at == std::string::npos) return {};
    at += 7;
  }
  return out.substr(at, out.find("\n[", at) - at);
}

std::string trim(const std::string& s) {
  const size_t begin = s.find_first_not_of(" \t\r\n");
  return begin == std::string::npos ? "" : s.substr(begin, s.find_last_not_of(" \t\r\n") + 1 - begin);
}

// A copy of fixture model `name` in a folder of this process, which goes when the process ends.
fs::path scratch_copy(const std::string& name) {
  static const fs::path root = fs::temp_directory_path() / ("drift-chat-test-" + std::to_string(getpid()));
  static const struct Cleanup {
    ~Cleanup() {
      std::error_code ec;
      fs::remove_all(root, ec);
    }
  } cleanup;
  const fs::path dir = root / name;
  fs::create_directories(dir);
  for (const auto& entry : fs::directory_iterator(fixture(name)))
    fs::copy_file(entry.path(), dir / entry.path().filename(), fs::copy_options::overwrite_existing);
  return dir;
}

// The llama fixture with a chat template whose generation prompt opens a <think> block (as Qwen3's does
// with thinking on): every reply starts as reasoning.
std::string thinking_model_dir() {
  const fs::path dir = scratch_copy("llama");
  std::ofstream(dir / "chat_template.jinja")
      << "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
         "{% if add_generation_prompt %}<|im_start|>assistant\n<think>\n{% endif %}"
         "{# the reasoning ends at </think> #}";
  return dir.string();
}

// The gpt_oss fixture, whose tokenizer lacks harmony's tokens, given them (ids its vocabulary leaves
// free) and no chat template: a GPT-OSS folder as the harmony fallback sees it.
std::string harmony_model_dir() { return copy_model_with_harmony_tokens(fixture("gpt_oss")); }

TEST(Chat, EachTurnRendersTheHistoryAndResetForgetsIt) {
  const CommandRun r = chat("-m " + fixture("llama") + " --temperature 0 --max-tokens 4 --show-prompt",
                            "first message\nsecond message\n/reset\nthird message\n/exit\n");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("no chat template: chatting in a plain \"User: / Assistant:\" transcript"), std::string::npos) << r.out;
  EXPECT_EQ(count_stats_lines(r.out), 3u) << r.out;
  const std::vector<std::string> prompts = shown_prompts(r.out);
  ASSERT_EQ(prompts.size(), 3u) << r.out;
  EXPECT_EQ(prompts[0], "User: first message\n\nAssistant:");
  // The second turn carries the first exchange, the reply as it was printed.
  EXPECT_EQ(prompts[1], "User: first message\n\nAssistant: " + trim(reply_text(r.out, 0)) +
                            "\n\nUser: second message\n\nAssistant:");
  EXPECT_EQ(prompts[2], "User: third message\n\nAssistant:");
}

TEST(Chat, CommandsAndTheSystemPrompt) {
  const CommandRun r = chat("-m " + fixture("llama") + " --temperature 0 --max-tokens 2 --show-prompt --system 'Be kind.'",
                            "\n/help\n/bogus\n/system\n/system Be brief.\n/system\nhello\n/quit\nnever read\n");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("/reset "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("drift: unknown command /bogus"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("drift: system prompt: Be kind."), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("drift: system prompt: Be brief."), std::string::npos) << r.out;
  const std::vector<std::string> prompts = shown_prompts(r.out);
  ASSERT_EQ(prompts.size(), 1u) << r.out;
  EXPECT_EQ(prompts[0], "System: Be brief.\n\nUser: hello\n\nAssistant:");
  EXPECT_EQ(r.out.find("never read"), std::string::npos) << r.out;
}

TEST(Chat, ReasoningIsShownButNotKept) {
  const CommandRun r = chat("-m " + thinking_model_dir() + " --temperature 0 --max-tokens 4 --show-prompt --system 'Be kind.'",
                            "first\nsecond\n");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("through its chat template"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("model> thinking: "), std::string::npos) << r.out;
  const std::vector<std::string> prompts = shown_prompts(r.out);
  ASSERT_EQ(prompts.size(), 2u) << r.out;
  EXPECT_EQ(prompts[1], "<|im_start|>system\nBe kind.<|im_end|>\n<|im_start|>user\nfirst<|im_end|>\n"
                        "<|im_start|>assistant\n<|im_end|>\n<|im_start|>user\nsecond<|im_end|>\n"
                        "<|im_start|>assistant\n<think>\n");
}

TEST(Chat, HarmonyEvenWithATemplate) {
  // A GPT-OSS folder whose chat template says something else: the family's harmony wins, as in drift serve.
  const std::string dir = copy_model_with_template(harmony_model_dir(), "TEMPLATE {{ messages[-1]['content'] }}");
  const CommandRun r = chat("-m " + dir + " --temperature 0 --max-tokens 2 --show-prompt", "hello\n");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("in the harmony format"), std::string::npos) << r.out;
  const std::vector<std::string> prompts = shown_prompts(r.out);
  ASSERT_EQ(prompts.size(), 1u) << r.out;
  EXPECT_EQ(prompts[0].find("TEMPLATE"), std::string::npos) << prompts[0];
  EXPECT_NE(prompts[0].find("<|start|>user<|message|>hello<|end|><|start|>assistant"), std::string::npos) << prompts[0];
}

TEST(Chat, HarmonyWithoutATemplate) {
  const CommandRun r = chat("-m " + harmony_model_dir() + " --temperature 0 --max-tokens 4 --show-prompt --system 'Be kind.'",
                            "first\nsecond\n");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("in the harmony format"), std::string::npos) << r.out;
  EXPECT_EQ(count_stats_lines(r.out), 2u) << r.out;
  const std::vector<std::string> prompts = shown_prompts(r.out);
  ASSERT_EQ(prompts.size(), 2u) << r.out;
  // The system prompt is the developer message; the first reply comes back as a final-channel message.
  EXPECT_NE(prompts[1].find("<|start|>developer<|message|># Instructions\n\nBe kind.<|end|>"
                            "<|start|>user<|message|>first<|end|><|start|>assistant<|channel|>final<|message|>" +
                            trim(reply_text(r.out, 0)) + "<|end|><|start|>user<|message|>second<|end|><|start|>assistant"),
            std::string::npos)
      << prompts[1];
}

TEST(Chat, ALongConversationLosesItsOldestTurns) {
  std::string input;
  for (int i = 0; i < 6; ++i) input += "turn " + std::to_string(i) + ": one two three four five six seven eight\n";
  const CommandRun r = chat("-m " + fixture("llama") + " --temperature 0 --max-tokens 8 --max-model-len 64 --show-prompt", input);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(count_stats_lines(r.out), 6u) << r.out;
  EXPECT_NE(r.out.find("drift: the conversation outgrew the context: the oldest"), std::string::npos) << r.out;
  const std::vector<std::string> prompts = shown_prompts(r.out);
  ASSERT_EQ(prompts.size(), 6u) << r.out;
  EXPECT_EQ(prompts[5].find("User: turn 0:"), std::string::npos) << prompts[5];
  EXPECT_NE(prompts[5].find("User: turn 5:"), std::string::npos) << prompts[5];
}

TEST(Chat, ARefusedTurnLeavesTheSessionRunning) {
  std::string words;
  for (int i = 0; i < 200; ++i) words += "word ";
  const CommandRun r = chat("-m " + fixture("llama") + " --temperature 0 --max-tokens 4 --max-model-len 64 --show-prompt",
                            words + "\nhello\n");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("drift: invalid_argument: the prompt has"), std::string::npos) << r.out;
  EXPECT_EQ(count_stats_lines(r.out), 1u) << r.out;
  const std::vector<std::string> prompts = shown_prompts(r.out);
  ASSERT_EQ(prompts.size(), 2u) << r.out;
  EXPECT_EQ(prompts[1], "User: hello\n\nAssistant:");  // the refused message left the history
}

TEST(Chat, TheDefaultModelChatsThroughItsTemplate) {
  const CommandRun r = chat("--temperature 0 --max-tokens 8", "Hello there\n");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("through its chat template"), std::string::npos) << r.out;
  EXPECT_EQ(count_stats_lines(r.out), 1u) << r.out;
}

// The bundled default model is chat-tuned (tools/train/chat_tune.py): greedy, it answers what a word means
// and what a command does with the facts of its sources (WordNet's gloss of "happy", the NAME lines of the
// ls and cp manual pages), and ends each reply by itself.
TEST(Chat, TheDefaultModelAnswersQuestionsAboutWordsAndCommands) {
  const CommandRun r = chat("--temperature 0 --max-tokens 96",
                            "Hello\nWhat does happy mean?\nWhat does the ls command do?\n"
                            "How do I copy files and directories?\n");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  ASSERT_EQ(count_stats_lines(r.out), 4u) << r.out;
  EXPECT_EQ(r.out.find("length limit"), std::string::npos) << r.out;
  EXPECT_NE(reply_text(r.out, 0).find("Hello"), std::string::npos) << r.out;
  EXPECT_NE(reply_text(r.out, 1).find("joy"), std::string::npos) << r.out;
  EXPECT_NE(reply_text(r.out, 2).find("list directory contents"), std::string::npos) << r.out;
  EXPECT_NE(reply_text(r.out, 3).find("cp command"), std::string::npos) << r.out;
}

// A tmux server of its own (its own socket, no user config) holding one session that runs `command` in
// a 120x40 terminal; the server and its socket go with the object.
class TmuxSession {
 public:
  explicit TmuxSession(const std::string& command)
      : name_("drift-chat-test-" + std::to_string(getpid())), socket_(::testing::TempDir() + "/" + name_ + ".tmux") {
    started_ = run("new-session -d -s " + name_ + " -x 120 -y 40 '" + command + "'").exit_code == 0;
  }
  ~TmuxSession() {
    run("kill-server");
    std::error_code ec;
    fs::remove(socket_, ec);
  }

  bool started() const { return started_; }
  void type(const std::string& line) {
    run("send-keys -t " + name_ + " -l '" + line + "'");
    run("send-keys -t " + name_ + " Enter");
  }
  std::string screen() { return run("capture-pane -p -t " + name_).out; }
  bool alive() { return run("has-session -t " + name_).exit_code == 0; }

  // The screen once it matches `pattern`, or the last screen seen after `timeout_s`.
  std::string wait_for(const std::regex& pattern, double timeout_s) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    std::string s = screen();
    while (!std::regex_search(s, pattern) && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      s = screen();
    }
    return s;
  }
  bool wait_until_gone(double timeout_s) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    while (alive() && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    return !alive();
  }

 private:
  CommandRun run(const std::string& args) { return shell("tmux -S " + socket_ + " -f /dev/null " + args); }

  std::string name_;
  std::string socket_;
  bool started_ = false;
};

TEST(Chat, TypedIntoATerminal) {
  if (shell("command -v tmux").exit_code != 0) GTEST_SKIP() << "tmux is not installed (scripts/install_deps.sh installs it)";
  TmuxSession tmux(std::string(DRIFT_BINARY) + " chat --temperature 0 --max-tokens 16");
  ASSERT_TRUE(tmux.started());
  // Typing before the prompt shows would put the terminal's echo above it. (A captured screen has no
  // blanks at the ends of its lines.)
  std::string screen = tmux.wait_for(std::regex("you>"), 30);
  ASSERT_NE(screen.find("you>"), std::string::npos) << screen;
  tmux.type("Hello there");
  screen = tmux.wait_for(kStatsLine, 30);
  ASSERT_TRUE(std::regex_search(screen, kStatsLine)) << screen;
  EXPECT_NE(screen.find("through its chat template"), std::string::npos) << screen;
  EXPECT_NE(screen.find("you> Hello there"), std::string::npos) << screen;
  EXPECT_TRUE(std::regex_search(screen, std::regex(R"(model> \S)"))) << screen;
  EXPECT_NE(screen.find(" tokens/s"), std::string::npos) << screen;
  // The next prompt waits under the stats line.
  EXPECT_TRUE(std::regex_search(screen, std::regex(R"(tokens/s[^\n]*\]\nyou>)"))) << screen;
  tmux.type("/exit");
  EXPECT_TRUE(tmux.wait_until_gone(5)) << tmux.screen();
}

}  // namespace
}  // namespace drift::testing
