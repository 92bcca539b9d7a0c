// ScriptedEngine: an Engine that answers every request with the same reply, a few bytes per output, so a
// server test knows what the "model" says; the server code under test is the real one. It records the
// prompts it gets, and can hold its reply at a point until the test releases it (to see that a stream
// sends what came before without waiting for the end), or end in an error.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "drift/engine.h"
#include "tokenizer/tokenizer.h"

namespace drift::e2e {

struct ScriptedReply {
  std::string model_dir;       // served as the engine's model folder (its chat template, if any)
  std::string tokenizer_file;  // tokenizer.json of the served model
  std::string text;            // the reply
  size_t piece_bytes = 3;      // text per output
  ChatFormat chat_format = ChatFormat::kTemplate;
  std::string stop_reason;     // the final output's (the stop token the engine left out of the text)
  // Before sending text from this byte on, wait for release() (at most a few seconds); npos: never.
  size_t hold_at = std::string::npos;
  Status error;  // not ok: the reply, after its text, ends in this error (FinishReason::kError)
};

class ScriptedEngine final : public Engine {
 public:
  explicit ScriptedEngine(ScriptedReply reply);
  ~ScriptedEngine() override;

  Expected<std::string> submit(Request request, OutputCallback on_output) override;
  void cancel(const std::string&) override {}
  EngineMetrics metrics() const override { return metrics_; }
  void set_metrics(EngineMetrics metrics) { metrics_ = std::move(metrics); }
  const tokenizer::Tokenizer& tokenizer() const override { return *tokenizer_; }
  const EngineConfig& config() const override { return config_; }
  int32_t max_model_len() const override { return 256; }
  std::string model_name() const override { return "scripted"; }
  ChatFormat chat_format() const override { return reply_.chat_format; }
  void shutdown() override;

  std::vector<std::string> prompts();
  // Lets a held reply go on; true if the reply was still waiting (the hold did not time out).
  bool release();
  // The reply has reached its hold and waits.
  bool holding();

 private:
  void answer(const std::string& id, const OutputCallback& on_output);
  void wait_for_release();

  ScriptedReply reply_;
  EngineConfig config_;
  EngineMetrics metrics_;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer_;
  std::mutex mu_;
  std::condition_variable released_cv_;
  bool holding_ = false, released_ = false;
  std::vector<std::string> prompts_;
  std::vector<std::thread> workers_;
};

}  // namespace drift::e2e
