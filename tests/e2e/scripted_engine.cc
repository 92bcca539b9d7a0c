#include "scripted_engine.h"

#include <chrono>
#include <stdexcept>

namespace drift::e2e {

namespace {

// Long enough for any stream to deliver what came before; a stream that buffers to the end never does.
constexpr std::chrono::seconds kHoldTimeout{5};

}  // namespace

ScriptedEngine::ScriptedEngine(ScriptedReply reply) : reply_(std::move(reply)) {
  config_.model_dir = reply_.model_dir;
  auto tok = tokenizer::Tokenizer::from_file(reply_.tokenizer_file);
  if (!tok.ok()) throw std::runtime_error(tok.status().to_string());
  tokenizer_ = std::make_unique<tokenizer::Tokenizer>(std::move(*tok));
}

ScriptedEngine::~ScriptedEngine() { shutdown(); }

Expected<std::string> ScriptedEngine::submit(Request request, OutputCallback on_output) {
  std::lock_guard lock(mu_);
  prompts_.push_back(request.prompt);
  workers_.emplace_back([this, id = request.id, on_output] { answer(id, on_output); });
  return request.id;
}

void ScriptedEngine::answer(const std::string& id, const OutputCallback& on_output) {
  int32_t n = 0;
  for (size_t pos = 0; pos < reply_.text.size(); pos += reply_.piece_bytes, ++n) {
    if (pos <= reply_.hold_at && reply_.hold_at < pos + reply_.piece_bytes) wait_for_release();
    Output out;
    out.request_id = id;
    out.new_tokens = {7};
    out.text = reply_.text.substr(pos, reply_.piece_bytes);
    on_output(out);
  }
  Output last;
  last.request_id = id;
  last.finished = true;
  last.finish_reason = reply_.error.ok() ? FinishReason::kStop : FinishReason::kError;
  last.error = reply_.error;
  last.stop_reason = reply_.error.ok() ? reply_.stop_reason : "";
  last.usage = {5, n, 0};
  on_output(last);
}

void ScriptedEngine::wait_for_release() {
  std::unique_lock lock(mu_);
  holding_ = true;
  released_cv_.wait_for(lock, kHoldTimeout, [this] { return released_; });
  holding_ = false;
}

bool ScriptedEngine::release() {
  std::lock_guard lock(mu_);
  released_ = true;
  released_cv_.notify_all();
  return holding_;
}

bool ScriptedEngine::holding() {
  std::lock_guard lock(mu_);
  return holding_;
}

void ScriptedEngine::shutdown() {
  release();
  std::vector<std::thread> workers;
  {
    std::lock_guard lock(mu_);
    workers.swap(workers_);
  }
  for (std::thread& t : workers) t.join();
}

std::vector<std::string> ScriptedEngine::prompts() {
  std::lock_guard lock(mu_);
  return prompts_;
}

}  // namespace drift::e2e
