#include "chat_reply.h"

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <optional>

namespace drift::cli {

namespace {

// Set while a reply streams, and by a Ctrl-C then; sig_atomic_t, as a signal handler may only write that.
volatile sig_atomic_t g_replying = 0;
volatile sig_atomic_t g_interrupted = 0;

extern "C" void on_interrupt(int sig) {
  if (g_replying) {
    g_interrupted = 1;
    return;
  }
  signal(sig, SIG_DFL);
  raise(sig);
}

// Prints a reply as it streams, after "model> ": reasoning dimmed (after "thinking: " in a pipe), then
// the answer, whose leading blank goes (a transcript's "Assistant:" is followed by a space).
class ReplyPrinter {
 public:
  ReplyPrinter(const ChatPrompt& prompt, const TermStyle& style) : style_(style) {
    if (prompt.parse_output) parser_.emplace(prompt.format);
  }

  void feed(const std::string& text, bool finished) {
    if (!started_) std::fputs(style_.bold("model> ").c_str(), stdout);
    started_ = true;
    if (!parser_) return print_answer(text);
    const server::ChatDelta delta = parser_->feed(text, finished);
    print_reasoning(delta.reasoning);
    print_answer(delta.content);
  }
  void finish() {
    if (!started_) return;
    if (in_reasoning_ && style_.tty) std::fputs("\033[0m", stdout);
    std::fputs("\n", stdout);
  }
  // The answer as the history keeps it: reasoning left out.
  std::string answer() const { return trim_blank(answer_); }

 private:
  void print_reasoning(const std::string& text) {
    if (text.empty()) return;
    if (!in_reasoning_) std::fputs(style_.tty ? "\033[2m" : "thinking: ", stdout);
    in_reasoning_ = true;
    std::fputs(text.c_str(), stdout);
  }
  void print_answer(std::string text) {
    if (answer_.empty()) text.erase(0, std::min(text.size(), text.find_first_not_of(" \t\r\n")));
    if (text.empty()) return;
    end_reasoning();
    answer_ += text;
    std::fputs(text.c_str(), stdout);
  }
  void end_reasoning() {
    if (in_reasoning_) std::fputs(style_.tty ? "\033[0m\n" : "\n", stdout);
    in_reasoning_ = false;
  }

  const TermStyle& style_;
  std::optional<server::ChatOutputParser> parser_;
  bool started_ = false, in_reasoning_ = false;
  std::string answer_;
};

// Waits for the reply's end. A Ctrl-C asks the engine to cancel it, which ends it with kCancelled.
void wait_for_end(Engine& engine, const std::string& id, std::unique_lock<std::mutex>& lock,
                  std::condition_variable& cv, const bool& done) {
  bool cancelled = false;
  while (!cv.wait_for(lock, std::chrono::milliseconds(50), [&] { return done; })) {
    if (!g_interrupted || cancelled) continue;
    lock.unlock();
    engine.cancel(id);
    lock.lock();
    cancelled = true;
  }
}

}  // namespace

void install_interrupt_handler() {
  struct sigaction action = {};
  action.sa_handler = on_interrupt;
  action.sa_flags = SA_RESTART;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
}

Expected<Reply> stream_reply(Engine& engine, const ChatPrompt& prompt, Request request, const TermStyle& style) {
  request.prompt = prompt.text;
  request.add_special_tokens = prompt.add_special_tokens;
  request.stop = prompt.stop;
  request.stop_token_ids = prompt.stop_token_ids;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  Reply reply;
  ReplyPrinter printer(prompt, style);
  g_interrupted = 0;
  g_replying = 1;
  auto id = engine.submit(std::move(request), [&](const Output& out) {
    std::lock_guard lock(mu);
    reply.num_tokens += out.new_tokens.size();
    printer.feed(out.text, out.finished);
    std::fflush(stdout);
    if (!out.finished) return;
    reply.last = out;
    done = true;
    cv.notify_all();
  });
  if (id.ok()) {
    std::unique_lock lock(mu);
    wait_for_end(engine, *id, lock, cv, done);
  }
  g_replying = 0;
  printer.finish();
  if (!id.ok()) return id.status();
  reply.answer = printer.answer();
  return reply;
}

}  // namespace drift::cli
