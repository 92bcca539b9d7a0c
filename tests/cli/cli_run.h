// Running the drift command from the CLI tests: a shell command's exit code and output, and fixture paths.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace drift::testing {

struct CommandRun {
  int exit_code = -1;
  std::string out;  // stdout and stderr together
};

// `command` through /bin/sh, its output (stderr too) read to the end.
inline CommandRun shell(const std::string& command) {
  CommandRun r;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return r;
  std::array<char, 4096> buf;
  while (size_t n = std::fread(buf.data(), 1, buf.size(), pipe)) r.out.append(buf.data(), n);
  const int status = ::pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

inline CommandRun drift(const std::string& args) { return shell(std::string(DRIFT_BINARY) + " " + args); }

inline std::string fixture(const std::string& name) { return std::string(DRIFT_FIXTURES_DIR) + "/models/" + name; }

}  // namespace drift::testing
