// How long one structured-output token mask takes on the CPU, per matcher state, over a synthetic
// vocabulary of Llama 3's size (bench_vocab.h), and what 64
// constrained rows cost against one 8B decode step at batch 64 (the figure in bench/RESULTS.md).
// Prints a table; no GPU. Usage: structured_mask_bench [step_ms, default 9.1]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "bench_vocab.h"
#include "structured/token_mask.h"

using namespace drift::structured;

int main(int argc, char** argv) {
  const double step_ms = argc > 1 ? std::atof(argv[1]) : 9.1;
  const int32_t vocab_size = bench::kVocabSize;
  const std::vector<std::string> vocab = bench::synthetic_vocab(size_t(vocab_size));
  const auto build_start = std::chrono::steady_clock::now();
  const VocabIndex index(vocab, vocab_size);
  const double build_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - build_start).count();
  auto schema = CompiledSchema::compile(bench::bench_schema());
  std::printf("vocabulary %d tokens, index built in %.1f ms\n\n", vocab_size, build_ms);
  std::printf("%-28s %10s %12s %14s\n", "state (text so far)", "allowed", "us / mask", "64 rows / step");
  std::vector<uint32_t> mask(size_t(index.words()));
  VocabIndex::Scratch scratch;
  const std::vector<int32_t> stops = {128009};
  double worst = 0;
  for (const char* prefix : bench::bench_states()) {
    JsonMatcher m(schema->root(), 2);
    m.advance(std::string_view(prefix));
    const int reps = 200;
    const auto start = std::chrono::steady_clock::now();
    for (int r = 0; r < reps; ++r) index.allowed(m, stops, mask, scratch);
    const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() / reps;
    size_t allowed = 0;
    for (uint32_t w : mask) allowed += size_t(__builtin_popcount(w));
    const double share = 64 * us / 1000 / step_ms;
    worst = std::max(worst, share);
    std::printf("%-28.28s %10zu %12.1f %13.1f%%\n", prefix, allowed, us, 100 * share);
  }
  std::printf("\nlimit: masks hidden behind the GPU step need 64 x (us / mask) < %.1f ms; worst state %.1f%% of a step\n",
              step_ms, 100 * worst);
  return 0;
}
