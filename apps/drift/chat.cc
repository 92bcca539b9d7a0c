// drift chat: a conversation with a model in the terminal. Each line typed is a user message; the reply
// streams as it is generated and ends with a line of its speed. /help lists the commands.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <iostream>

#include <fmt/format.h>

#include "chat_reply.h"
#include "chat_session.h"
#include "commands.h"
#include "load_progress.h"

namespace drift::cli {

namespace {

struct ChatOptions {
  EngineConfig engine;
  Request request;  // sampling and max_tokens, for every reply
  std::string system;
  bool show_prompt = false;
};

// A notice or an error: on stderr, after what stdout holds so far.
void say(const std::string& message) {
  std::fflush(stdout);
  std::fprintf(stderr, "drift: %s\n", message.c_str());
}

void print_stats(const Reply& reply, const TermStyle& style) {
  const double seconds = reply.last.timings.e2e_s;
  const FinishReason finish = reply.last.finish_reason;
  const char* note = finish == FinishReason::kLength      ? ", length limit"
                     : finish == FinishReason::kCancelled ? ", cancelled"
                                                          : "";
  const std::string line = fmt::format("[{} tokens, {:.2f} s, {:.1f} tokens/s{}]", reply.num_tokens, seconds,
                                       double(reply.num_tokens) / std::max(seconds, 1e-9), note);
  std::printf("%s\n", style.dim(line).c_str());
}

// Room for the prompt: the context less what a reply may take, at most half of it, so that a long
// --max-tokens still leaves room for the history.
int32_t prompt_budget(const Engine& engine, int32_t max_tokens) {
  const int32_t context = engine.max_model_len();
  return context - std::min(max_tokens, context / 2);
}

// One exchange: the line joins the history, the reply streams, and its answer joins the history too. A
// turn that fails or is cancelled leaves the history as it was.
void chat_turn(Engine& engine, ChatSession& session, const ChatOptions& o, const TermStyle& style, std::string line) {
  session.add_user(std::move(line));
  int32_t num_dropped = 0;
  auto prompt = session.render(prompt_budget(engine, o.request.max_tokens), num_dropped);
  if (!prompt.ok()) {
    session.drop_last_user();
    return say(prompt.status().message());
  }
  if (num_dropped > 0)
    say(fmt::format("the conversation outgrew the context: the oldest {} turn{} left out", num_dropped,
                    num_dropped == 1 ? " is" : "s are"));
  if (o.show_prompt) {
    std::fflush(stdout);
    std::fprintf(stderr, "--- prompt (%d tokens) ---\n%s\n--- end of prompt ---\n", prompt->num_tokens,
                 prompt->text.c_str());
  }
  auto reply = stream_reply(engine, *prompt, o.request, style);
  if (!reply.ok() || reply->last.finish_reason == FinishReason::kError) {
    session.drop_last_user();
    return say((reply.ok() ? reply->last.error : reply.status()).to_string());
  }
  print_stats(*reply, style);
  if (reply->last.finish_reason == FinishReason::kCancelled) return session.drop_last_user();
  session.add_reply(std::move(reply->answer));
}

void print_help() {
  std::printf("  /reset        forget the conversation (the system prompt stays)\n"
              "  /system TEXT  set the system prompt and start over; /system alone shows it\n"
              "  /exit, /quit  leave (so does Ctrl-D); Ctrl-C stops a reply\n"
              "  /help         this list\n");
}

// Runs a line that starts with '/'; false when it was /exit or /quit.
bool run_command(const std::string& line, ChatSession& session) {
  const size_t space = line.find(' ');
  const std::string name = line.substr(0, space);
  const std::string text = space == std::string::npos ? "" : trim_blank(line.substr(space));
  if (name == "/exit" || name == "/quit") return false;
  if (name == "/reset") {
    session.reset();
    say("the conversation starts over");
  } else if (name == "/system" && text.empty()) {
    say(session.system().empty() ? "no system prompt" : "system prompt: " + session.system());
  } else if (name == "/system") {
    session.set_system(text);
    say("system prompt set; the conversation starts over");
  } else if (name == "/help") {
    print_help();
  } else {
    say("unknown command " + name + " (/help lists them)");
  }
  return true;
}

void print_banner(const Engine& engine, const ChatSession& session) {
  if (!session.template_problem().empty()) say("the chat template is not used: " + session.template_problem());
  const std::string name = engine.model_name();
  switch (session.style()) {
    case PromptStyle::kTemplate: say("chatting with " + name + " through its chat template"); break;
    case PromptStyle::kHarmony: say("chatting with " + name + " in the harmony format"); break;
    case PromptStyle::kPlain:
      say(name + " has no chat template: chatting in a plain \"User: / Assistant:\" transcript");
      break;
  }
  say("/help lists the commands; Ctrl-D or /exit leaves");
}

void run_chat(ChatOptions& o) {
  LoadProgress progress(o.engine.model_dir);
  o.engine.load_progress = progress.callback();
  auto engine = Engine::create(o.engine);
  progress.finish();
  if (!engine.ok()) return fail(engine.status().to_string());
  ChatSession session = ChatSession::open(o.engine.tokenizer_folder(), (*engine)->tokenizer(), (*engine)->chat_format());
  session.set_system(o.system);
  print_banner(**engine, session);
  install_interrupt_handler();
  const TermStyle style;
  const bool echo = !isatty(STDIN_FILENO);  // a piped line shows after its prompt, as a typed one would
  for (std::string line;;) {
    std::fputs(style.bold("you> ").c_str(), stdout);
    std::fflush(stdout);
    if (!std::getline(std::cin, line)) {
      std::fputs("\n", stdout);
      break;
    }
    if (echo) std::printf("%s\n", line.c_str());
    line = trim_blank(line);
    if (line.empty()) continue;
    if (line[0] != '/') {
      chat_turn(**engine, session, o, style, std::move(line));
    } else if (!run_command(line, session)) {
      break;
    }
  }
  (*engine)->shutdown();
}

}  // namespace

void add_chat_command(CLI::App& app) {
  auto o = std::make_shared<ChatOptions>();
  CLI::App* cmd = app.add_subcommand("chat", "Talk with a model in the terminal (its chat template, history, /help)");
  add_engine_options(*cmd, o->engine);
  o->request.max_tokens = 512;
  cmd->add_option("-n,--max-tokens", o->request.max_tokens, "Most tokens in one reply")
      ->check(at_least(1))->capture_default_str();
  o->request.sampling.temperature = 0.7f;
  add_sampling_options(*cmd, o->request.sampling);
  cmd->add_option("--system", o->system, "System prompt (/system changes it during the chat)");
  cmd->add_flag("--show-prompt", o->show_prompt,
                "Print each turn's rendered prompt to stderr (to check a chat template)");
  cmd->callback([o] { run_chat(*o); });
}

}  // namespace drift::cli
