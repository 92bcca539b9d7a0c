// How long the token masks of 64 constrained rows take at the worst matcher state, filled by MaskFiller
// on 1, 2, 4 and 8 threads (the engine's --mask-threads), over the synthetic 128,256-token vocabulary of
// bench_vocab.h. A 1B model's decode step at batch 64 is a few milliseconds: the masks are hidden behind it
// only when they take less. Prints a table; no GPU.
// Usage: structured_mask_threads_bench [rows, default 64] [threads..., default 1 2 4 8]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>

#include "bench_vocab.h"
#include "structured/mask_filler.h"

using namespace drift::structured;

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) { return std::chrono::duration<double, std::milli>(Clock::now() - start).count(); }

// The state of bench_states() whose mask takes longest on one thread.
const char* worst_state(const VocabIndex& index, const CompiledSchema& schema) {
  const char* worst = "";
  double worst_ms = -1;
  std::vector<uint32_t> mask(size_t(index.words()));
  VocabIndex::Scratch scratch;
  for (const char* prefix : bench::bench_states()) {
    JsonMatcher m(schema.root(), 2);
    m.advance(std::string_view(prefix));
    const auto start = Clock::now();
    for (int r = 0; r < 50; ++r) index.allowed(m, {}, mask, scratch);
    if (const double ms = ms_since(start); ms > worst_ms) worst_ms = ms, worst = prefix;
  }
  return worst;
}

}  // namespace

int main(int argc, char** argv) {
  const size_t num_rows = argc > 1 ? size_t(std::atoi(argv[1])) : 64;
  std::vector<int32_t> thread_counts;
  for (int i = 2; i < argc; ++i) thread_counts.push_back(std::atoi(argv[i]));
  if (thread_counts.empty()) thread_counts = {1, 2, 4, 8};
  const VocabIndex index(bench::synthetic_vocab(size_t(bench::kVocabSize)), bench::kVocabSize);
  auto schema = CompiledSchema::compile(bench::bench_schema());
  const char* state = worst_state(index, *schema);
  // Every row its own matcher and mask, as the engine lays them out.
  std::deque<JsonMatcher> matchers;
  std::vector<uint32_t> masks(num_rows * size_t(index.words()));
  const std::vector<int32_t> stops = {128009};
  std::vector<MaskFiller::Row> rows;
  for (size_t r = 0; r < num_rows; ++r) {
    JsonMatcher& m = matchers.emplace_back(schema->root(), 2);
    m.advance(std::string_view(state));
    rows.push_back({&m, stops, std::span<uint32_t>(masks.data() + r * size_t(index.words()), size_t(index.words()))});
  }
  std::printf("%zu rows at the worst state '%s', vocabulary %d tokens, %u hardware threads\n\n", num_rows, state,
              bench::kVocabSize, std::thread::hardware_concurrency());
  std::printf("%8s %14s %14s %10s\n", "threads", "ms / step", "best ms", "speedup");
  double serial_ms = 0;
  for (int32_t threads : thread_counts) {
    MaskFiller filler(index, threads);
    filler.fill(rows);  // warm-up: scratch grows, threads wake once
    const int reps = 30;
    double total = 0, best = 1e30;
    for (int r = 0; r < reps; ++r) {
      const auto start = Clock::now();
      filler.fill(rows);
      const double ms = ms_since(start);
      total += ms;
      best = std::min(best, ms);
    }
    const double mean = total / reps;
    if (serial_ms == 0) serial_ms = mean;
    std::printf("%8d %14.3f %14.3f %9.2fx\n", threads, mean, best, serial_ms / mean);
  }
  return 0;
}
