// One reply of `drift chat`: submitted to the engine, printed as it streams (reasoning dimmed, apart
// from the answer), and cancelled by Ctrl-C.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <string>

#include "chat_session.h"
#include "drift/engine.h"

namespace drift::cli {

// ANSI styles on a terminal; a pipe gets plain text.
struct TermStyle {
  bool tty = isatty(STDOUT_FILENO) != 0;
  std::string bold(const std::string& s) const { return tty ? "\033[1m" + s + "\033[0m" : s; }
  std::string dim(const std::string& s) const { return tty ? "\033[2m" + s + "\033[0m" : s; }
};

struct Reply {
  std::string answer;     // what the history keeps: the content, without reasoning or surrounding blanks
  Output last;            // the final event: finish reason, error, timings
  size_t num_tokens = 0;
};

// From here on, Ctrl-C during stream_reply() cancels the reply; at any other time it ends the program,
// as it would any other.
void install_interrupt_handler();

// Submits `prompt` with `request`'s sampling and max_tokens and prints the reply after "model> " as it
// comes. A refused submit is the error; a reply that ends in error or cancelled says so in `last`.
Expected<Reply> stream_reply(Engine& engine, const ChatPrompt& prompt, Request request, const TermStyle& style);

}  // namespace drift::cli
