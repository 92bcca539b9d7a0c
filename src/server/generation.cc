#include "server/generation.h"

namespace drift::server {

Expected<std::shared_ptr<Generation>> Generation::start(Engine& engine, std::vector<Request> choices,
                                                        std::shared_ptr<ServerStats> stats) {
  std::shared_ptr<Generation> g(new Generation(engine, std::move(stats)));
  g->finished_.assign(choices.size(), false);
  for (size_t i = 0; i < choices.size(); ++i) {
    const std::string id = choices[i].id;
    // The callback keeps the Generation alive: the engine may report after the HTTP side has gone.
    auto submitted = engine.submit(std::move(choices[i]), [g, choice = int32_t(i)](const Output& out) { g->push(choice, out); });
    if (!submitted.ok()) {
      g->cancel();
      return submitted.status();
    }
    std::lock_guard lock(g->mu_);
    g->request_ids_.push_back(*submitted);
  }
  return g;
}

void Generation::push(int32_t choice, const Output& output) {
  if (output.finished && stats_) stats_->count_finish(output.finish_reason);
  std::lock_guard lock(mu_);
  if (output.finished) finished_[size_t(choice)] = true;
  queue_.push_back({choice, output});
  arrived_.notify_one();
}

std::vector<ChoiceOutput> Generation::take(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  arrived_.wait_for(lock, timeout, [&] { return !queue_.empty(); });
  std::vector<ChoiceOutput> out(std::make_move_iterator(queue_.begin()), std::make_move_iterator(queue_.end()));
  queue_.clear();
  for (const ChoiceOutput& o : out) num_finals_taken_ += o.output.finished ? 1 : 0;
  return out;
}

bool Generation::done() const {
  std::lock_guard lock(mu_);
  return num_finals_taken_ == int32_t(finished_.size());
}

void Generation::cancel() {
  std::vector<std::string> unfinished;
  {
    std::lock_guard lock(mu_);
    for (size_t i = 0; i < request_ids_.size(); ++i)
      if (!finished_[i]) unfinished.push_back(request_ids_[i]);
  }
  for (const std::string& id : unfinished) engine_.cancel(id);
}

}  // namespace drift::server
