// `drift serve` and the options as a user meets them, in child processes: a port already in use, SIGTERM
// with a stream open (graceful and with --shutdown-timeout 0), JSON log lines, and option errors that
// name the problem.
#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <regex>
#include <string>
#include <thread>

#include "bench/sse_client.h"

namespace drift::testing {
namespace {

using Json = nlohmann::json;

std::string fixture(const std::string& name) { return std::string(DRIFT_FIXTURES_DIR) + "/models/" + name; }

// drift with `args`, its stderr read on a thread (all of it, as it comes).
class DriftProcess {
 public:
  explicit DriftProcess(std::vector<std::string> args) {
    int err[2];
    if (pipe(err) != 0) throw std::runtime_error("pipe");
    pid_ = fork();
    if (pid_ == 0) {
      dup2(err[1], 2);
      dup2(err[1], 1);
      close(err[0]);
      std::vector<char*> argv{const_cast<char*>(DRIFT_BINARY)};
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(DRIFT_BINARY, argv.data());
      _exit(127);
    }
    close(err[1]);
    reader_ = std::thread([this, fd = err[0]] {
      std::array<char, 4096> buf;
      for (ssize_t n; (n = read(fd, buf.data(), buf.size())) > 0;) {
        std::lock_guard lock(mu_);
        out_.append(buf.data(), size_t(n));
      }
      close(fd);
    });
  }
  ~DriftProcess() {
    if (pid_ > 0 && exit_code_ < 0) {
      kill(pid_, SIGKILL);
      wait_exit(5.0);
    }
    if (reader_.joinable()) reader_.join();
  }

  std::string output() {
    std::lock_guard lock(mu_);
    return out_;
  }
  // The port from "serving ... on http://127.0.0.1:PORT", once it appears (0 after `timeout_s`).
  int wait_for_port(double timeout_s = 60.0) {
    static const std::regex serving(R"(on http://[^:]+:(\d+))");
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    while (std::chrono::steady_clock::now() < deadline) {
      std::smatch m;
      const std::string out = output();
      if (std::regex_search(out, m, serving)) return std::stoi(m[1]);
      if (exit_code_ >= 0 || waitpid(pid_, nullptr, WNOHANG) == pid_) return 0;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return 0;
  }
  void signal(int sig) { kill(pid_, sig); }
  // The exit code, or -1 if it has not exited within `timeout_s`.
  int wait_exit(double timeout_s) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    while (exit_code_ < 0 && std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (exit_code_ >= 0 && reader_.joinable()) reader_.join();
    return exit_code_;
  }

 private:
  pid_t pid_ = -1;
  int exit_code_ = -1;
  std::thread reader_;
  std::mutex mu_;
  std::string out_;
};

std::vector<std::string> serve_args(std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"serve", "-m", fixture("llama"), "--port", "0", "--kv-cache-bytes", "16000000"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

// A streamed completion; `on_first` runs once, at the first chunk.
struct Streamed {
  std::vector<Json> chunks;
  bool done = false;
};
Streamed stream(int port, int max_tokens, int n, const std::function<void()>& on_first) {
  Streamed s;
  httplib::Client client("127.0.0.1", port);
  client.set_read_timeout(std::chrono::seconds(60));
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.body = Json{{"prompt", "signal"}, {"max_tokens", max_tokens}, {"n", n}, {"ignore_eos", true}, {"stream", true},
                  {"temperature", 0}}.dump();
  req.set_header("Content-Type", "application/json");
  bench::SseDataReader reader;
  req.content_receiver = [&](const char* data, size_t size, uint64_t, uint64_t) {
    reader.feed(std::string_view(data, size), [&](std::string_view payload) {
      if (payload == "[DONE]") {
        s.done = true;
        return;
      }
      s.chunks.push_back(Json::parse(payload, nullptr, false));
      if (s.chunks.size() == 1) on_first();
    });
    return true;
  };
  httplib::Response res;
  httplib::Error error = httplib::Error::Success;
  client.send(req, res, error);
  return s;
}

TEST(ServeProcess, ASecondServerOnTheSamePortExitsWithAddressInUse) {
  DriftProcess first(serve_args());
  const int port = first.wait_for_port();
  ASSERT_GT(port, 0) << first.output();
  DriftProcess second({"serve", "-m", fixture("llama"), "--port", std::to_string(port)});
  EXPECT_EQ(second.wait_exit(60.0), 1) << second.output();
  EXPECT_NE(second.output().find("address already in use"), std::string::npos) << second.output();
  EXPECT_EQ(second.output().find("serving"), std::string::npos) << second.output();
  first.signal(SIGTERM);
  EXPECT_EQ(first.wait_exit(30.0), 0) << first.output();
}

TEST(ServeProcess, SigtermLetsAnOpenStreamFinish) {
  DriftProcess server(serve_args({"--log-format", "json"}));
  const int port = server.wait_for_port();
  ASSERT_GT(port, 0) << server.output();
  const Streamed s = stream(port, 60, 1, [&] { server.signal(SIGTERM); });
  EXPECT_TRUE(s.done);
  ASSERT_FALSE(s.chunks.empty());
  EXPECT_EQ(s.chunks.back()["choices"][0]["finish_reason"], "length") << s.chunks.back();
  EXPECT_EQ(server.wait_exit(30.0), 0) << server.output();
  // The access line of that stream, as JSON for a collector.
  bool found = false;
  std::istringstream lines(server.output());
  for (std::string line; std::getline(lines, line);) {
    const Json j = Json::parse(line, nullptr, false);
    if (j.is_discarded() || j.value("logger", "") != "access") continue;
    found = true;
    EXPECT_EQ(j["level"], "info");
    EXPECT_EQ(j["request"]["status"], 200);
    EXPECT_EQ(j["request"]["completion_tokens"], 60);
    EXPECT_EQ(j["request"]["finish_reason"], "length");
    EXPECT_TRUE(j["request"]["stream"].get<bool>());
  }
  EXPECT_TRUE(found) << server.output();
}

TEST(ServeProcess, SigtermWithNoGraceEndsStreamsWithAnErrorChunkAndDone) {
  DriftProcess server(serve_args({"--shutdown-timeout", "0"}));
  const int port = server.wait_for_port();
  ASSERT_GT(port, 0) << server.output();
  const Streamed s = stream(port, 240, 8, [&] { server.signal(SIGTERM); });
  EXPECT_TRUE(s.done) << "the stream must end with [DONE]";
  ASSERT_FALSE(s.chunks.empty());
  EXPECT_TRUE(s.chunks.back().contains("error")) << s.chunks.back();
  EXPECT_EQ(server.wait_exit(30.0), 0) << server.output();
  EXPECT_NE(server.output().find("server stopped"), std::string::npos) << server.output();
}

std::pair<int, std::string> run(std::vector<std::string> args) {
  DriftProcess p(std::move(args));
  const int code = p.wait_exit(120.0);
  return {code, p.output()};
}

TEST(CliOptions, ErrorsNameTheProblemInFewWords) {
  const auto [zero_code, zero] = run({"generate", "-m", fixture("llama"), "-p", "x", "--max-tokens", "0"});
  EXPECT_NE(zero_code, 0);
  EXPECT_NE(zero.find("must be at least 1, got 0"), std::string::npos) << zero;
  EXPECT_LT(zero.size(), 400u) << zero;
  const auto [unknown_code, unknown] = run({"frobnicate"});
  EXPECT_EQ(unknown_code, 1);
  EXPECT_NE(unknown.find("unknown command 'frobnicate'"), std::string::npos) << unknown;
  EXPECT_NE(unknown.find("generate"), std::string::npos) << unknown;
  for (const char* option : {"--max-model-len", "--kv-cache-bytes"}) {
    const auto [code, out] = run({"generate", "-m", fixture("llama"), "-p", "x", option, "-5"});
    EXPECT_NE(code, 0) << option;
    EXPECT_NE(out.find("must be at least 0"), std::string::npos) << option << ": " << out;
  }
}

TEST(CliOptions, ALimitAboveTheModelsIsCappedAloud) {
  const auto [code, out] = run({"generate", "-m", fixture("llama"), "-p", "x", "-n", "2", "--max-model-len", "100000"});
  EXPECT_EQ(code, 0) << out;
  EXPECT_NE(out.find("max_model_len 100000 is beyond llama's 256 positions"), std::string::npos) << out;
}

TEST(CliOptions, HelpShowsThePolicyDefaults) {
  const auto [code, out] = run({"generate", "--help"});
  EXPECT_EQ(code, 0);
  EXPECT_NE(out.find("--admission ENUM:{guaranteed,optimistic}=guaranteed"), std::string::npos) << out;
  EXPECT_NE(out.find("--policy ENUM:{fcfs,small-first}=fcfs"), std::string::npos) << out;
  EXPECT_NE(out.find("--specpv-min-context INT:>= 0=0"), std::string::npos) << out;
  EXPECT_NE(out.find("--specpv-refresh INT:INT in [1 - 1048576]=8"), std::string::npos) << out;
  EXPECT_NE(out.find("--specpv-score TEXT:{quest,specpv}=specpv"), std::string::npos) << out;
  const auto [serve_code, serve_out] = run({"serve", "--help"});
  EXPECT_EQ(serve_code, 0);
  EXPECT_NE(serve_out.find("--slo-shed BOOLEAN:{on,off}=on"), std::string::npos) << serve_out;
}

}  // namespace
}  // namespace drift::testing
