// Engine: continuous batching over a paged KV cache. submit() returns at once; outputs stream to the
// request's callback from the engine thread. Safe to call from many threads.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "drift/chat_format.h"
#include "drift/request.h"
#include "drift/status.h"

namespace drift {

namespace tokenizer {
class Tokenizer;
}

// Speculative decoding: a proposer drafts tokens, the model scores them in the same step, the longest
// prefix that equals its own greedy choices is kept. Greedy requests only for now (output unchanged).
struct SpeculativeConfig {
  // "" (off), "ngram" (prompt lookup, no draft model, greedy requests) or "eagle3" (an EAGLE-3 draft head
  // in draft_dir proposes trees; greedy and sampled requests, verified losslessly).
  std::string method;
  int32_t num_tokens = 4;                 // drafts (tree nodes) per sequence per step, at most
  int32_t ngram_min = 1, ngram_max = 4;   // n-gram sizes prompt lookup matches, longest first
  std::string draft_dir;                  // eagle3: the head's folder
  int32_t depth = 6;                      // eagle3: tree depth, at most
  int32_t top_k = 4;                      // eagle3: children per expanded node and nodes expanded per depth
};

// SpecPV (issue 15; src/core/README.md): a verify step of a sequence at least min_context tokens long
// attends to part of its KV (sink, retrieval, window and buffer blocks of its block table; nothing is
// copied), and every `refresh`-th verify step, or when more than `buffer` tokens were accepted since the
// last full one, attends to all of it. Budgets are tokens. Needs a speculative method; one rank; not with
// an FP8 KV cache.
struct SpecPvConfig {
  int32_t min_context = 0;   // 0: off
  int32_t refresh = 8;       // verify steps per full verification; 1: every step full (exact)
  int32_t sink = 32, retrieval = 4096, window = 128;
  int32_t buffer = 20;       // plus the step's draft tokens
  // How a block's key bounds score against the queries (backend/ops.h: BlockScore): "specpv" (SpecPV's
  // max(q.Kmax, q.Kmin), averaged over queries and heads) or "quest" (an upper bound on every logit in the
  // block). SpecPV's form kept greedy output closer to plain decoding's (bench/RESULTS.md, 2026-11-27 CPU).
  std::string score = "specpv";

  bool enabled() const { return min_context > 0; }
};

enum class AdmissionPolicy { kGuaranteed, kOptimistic };
enum class SchedulingPolicy { kFcfs, kSmallFirst };

struct EngineConfig {
  std::string model_dir;
  // Where tokenizer.json and tokenizer_config.json (the chat template) are read; "": model_dir. Lets a
  // folder of config.json alone (random weights) borrow a tokenizer, as vLLM's --tokenizer does.
  std::string tokenizer_dir;
  bool random_weights = false;     // benchmarks: weights drawn from a seed, config.json alone
  // More safetensors files whose tensors join the model folder's (retrofit weights, draft heads).
  std::vector<std::string> extra_weight_files;
  // A retrofit's safetensors file (MLA-lite latent KV and/or DSA-lite sparse attention, tools/retrofit/);
  // "": the model as it is.
  std::string retrofit_file;
  std::string device = "cpu";      // "cpu" or "cuda"
  // Tensor-parallel ranks on this host (cpu: threads; cuda: one GPU each, over NCCL): every rank holds
  // 1/N of the heads, widths and vocabulary. 1: one rank.
  int32_t tensor_parallel = 1;
  // Mixture-of-experts models: each of the tensor_parallel ranks holds 1/N of the routed experts whole
  // instead of 1/N of every expert's width (attention and dense layers stay split). num_experts must divide
  // by N; a model without experts is refused. With one rank it changes nothing.
  bool expert_parallel = false;
  // Several processes (hosts, or processes of one machine standing for hosts) split one model, one rank
  // each (tensor_parallel 1 on each node, so far): node 0 runs the engine (Engine::create) and the others
  // Engine::follow(), all with the same nnodes, master_addr and master_port (the group also takes the port
  // after it). cuda nodes join through NCCL and run without CUDA graphs.
  int32_t nnodes = 1;
  int32_t node_rank = 0;
  std::string master_addr = "127.0.0.1";  // node 0's address, where it listens for the other nodes
  int32_t master_port = 29500;
  int32_t block_size = 16;
  int64_t kv_cache_bytes = 0;      // 0: derive from kv_cache_memory_fraction
  // KV cache element type: "auto" (the backend's compute dtype: f32 on cpu, bf16 on cuda), "bf16",
  // "f32" or "fp8" (refused by a backend that cannot store it, before the model loads).
  std::string kv_cache_dtype = "auto";
  double kv_cache_memory_fraction = 0.25;  // of free memory (host RAM on cpu, device memory on cuda)
  int32_t max_model_len = 0;       // 0: the model's max_position_embeddings
  int32_t max_num_seqs = 64;
  int32_t max_num_batched_tokens = 2048;
  int32_t max_num_partial_prefills = 1;
  int32_t long_prefill_token_threshold = 0;
  bool enable_chunked_prefill = true;
  bool enable_prefix_cache = true;
  AdmissionPolicy admission = AdmissionPolicy::kGuaranteed;
  SchedulingPolicy policy = SchedulingPolicy::kFcfs;
  int32_t max_waiting_requests = 4096;  // beyond this submit() answers resource_exhausted
  // SLO-aware scheduling (core/sched/slo_budget.h): with a TPOT target, each step's token budget is chosen
  // from measured step times to keep decodes within it while the oldest waiting prefill meets the TTFT
  // target; 0 = off (the fixed max_num_batched_tokens).
  double slo_ttft_ms = 0;
  double slo_tpot_ms = 0;
  // Admission control with a TTFT target (core/sched/slo_admission.h): a waiting request predicted to miss
  // the target waits behind those that can still meet it, and with slo_shed one predicted to miss it by
  // more than a margin is refused before it holds KV: it ends with FinishReason::kError and a Status of
  // StatusCode::kUnavailable ("the server is overloaded"). No effect without slo_ttft_ms.
  bool slo_shed = true;
  // Structured output: threads that fill a step's token masks (structured/mask_filler.h), the engine
  // thread included; 0: min(hardware threads / 2, 8); 1: the engine thread alone. Started at the first
  // constrained request.
  int32_t mask_threads = 0;
  // CUDA: run every step eagerly instead of replaying decode steps from CUDA graphs (debugging, profiling).
  bool enforce_eager = false;
  // Overlapped scheduling: while a step runs, the engine plans the next one and queues its forward, whose
  // token ids the device copies from the running step's samples, then applies the step's tokens and queues
  // the next sampling (so penalties and structured output see them). Off with speculation, SpecPV, SLO
  // targets or several ranks: those steps run one after another. Outputs are the same either way.
  bool overlap_scheduling = true;
  SpeculativeConfig speculative;
  SpecPvConfig specpv;
  // Called while the weights load: bytes read so far and in all (the CLI draws a progress line).
  std::function<void(size_t loaded, size_t total)> load_progress;

  const std::string& tokenizer_folder() const { return tokenizer_dir.empty() ? model_dir : tokenizer_dir; }
};

// Fixed-bucket histogram: counts[i] observations <= bounds[i] (not cumulative), the last bucket is +Inf.
struct Histogram {
  std::vector<double> bounds;
  std::vector<uint64_t> counts;  // bounds.size() + 1
  double sum = 0;
  uint64_t count = 0;

  explicit Histogram(std::vector<double> b = {}) : bounds(std::move(b)), counts(bounds.size() + 1, 0) {}
  void observe(double v);
};

// One KV layer group's pool (GPT-OSS: "sliding" and "full"). A sliding-window group's pool is sized for
// its window, so groups differ in block count, and in bytes per block.
struct KvGroupMetrics {
  std::string name;
  int32_t sliding_window = 0;  // 0: full attention
  int64_t bytes_per_block = 0;
  int64_t blocks_total = 0, blocks_used = 0;
};

// Where the engine's steps spent their wall time, in seconds summed over the steps that ran a batch:
// plan (drafts, SLO policy, SpecPV refresh, plan and commit, partial views), launch (the sampling rows, the
// runner checking, packing and uploading the step's inputs and enqueuing its forward: host work the device
// waits on with an asynchronous backend; on the CPU backend the forward and the sampling themselves),
// device (from the launch until the sampled rows, or the logits, are on the host), apply (verification,
// stop checks, streaming, KV moves, drafting for the next step). The four add up to those steps' wall
// time; on a GPU, plan + launch + apply is the host cost per step. With overlapped steps (overlap_scheduling)
// plan and launch are the next step's, done while the device runs this one, so only device and apply sit
// between a step's launch and its tokens: the host cost no longer adds to the step time.
struct StepPhaseSeconds {
  double plan = 0, launch = 0, device = 0, apply = 0;
};

// A snapshot of the engine's counters and gauges (names follow vLLM's metrics).
struct EngineMetrics {
  int64_t num_requests_running = 0, num_requests_waiting = 0;
  int64_t kv_blocks_total = 0, kv_blocks_used = 0;  // summed over kv_groups
  int64_t kv_blocks_used_peak = 0;                  // the most kv_blocks_used seen after any step
  std::vector<KvGroupMetrics> kv_groups;
  int64_t prefix_cache_queries = 0, prefix_cache_hits = 0, prefix_cache_evictions = 0;  // in tokens / blocks
  int64_t prompt_tokens_total = 0, generation_tokens_total = 0;
  int64_t num_preemptions_total = 0, num_rejections_total = 0;
  int64_t num_requests_shed_total = 0;  // refused by SLO admission control (EngineConfig::slo_shed)
  int64_t requests_finished_total = 0, steps_total = 0;
  int64_t overlapped_steps_total = 0;  // steps launched while the one before ran (EngineConfig::overlap_scheduling)
  // Speculative decoding (vLLM's spec_decode names): verify steps that carried drafts, drafts scored,
  // drafts accepted, and accepted drafts by position in their draft (index 0: the first draft).
  int64_t spec_decode_num_drafts = 0, spec_decode_num_draft_tokens = 0, spec_decode_num_accepted_tokens = 0;
  std::vector<int64_t> spec_decode_num_accepted_tokens_per_pos;
  // SpecPV: verify steps that read part of the KV, and those of SpecPV sequences that read all of it; tokens
  // whose KV a full verification computed again because a partial one had computed it.
  int64_t spec_decode_num_partial_verifies = 0, spec_decode_num_full_verifies = 0;
  int64_t spec_decode_num_recomputed_tokens = 0;
  StepPhaseSeconds step_seconds;
  Histogram time_to_first_token_s, time_per_output_token_s, e2e_request_latency_s, tokens_per_step;
};

using OutputCallback = std::function<void(const Output&)>;

class Engine {
 public:
  static Expected<std::unique_ptr<Engine>> create(const EngineConfig& config);
  // A node of rank > 0 of a multi-node group (config.nnodes > 1): loads its share of the model and runs the
  // steps node 0's engine sends until that engine ends (Ok) or the group fails (its error).
  static Status follow(const EngineConfig& config);
  virtual ~Engine() = default;

  // Queues the request; a request that can never run (prompt beyond the context, more KV than exists,
  // bad sampling params) is refused here with a Status that says why. Returns the request id.
  virtual Expected<std::string> submit(Request request, OutputCallback on_output) = 0;
  // Cancels at any stage; its blocks are freed at the next step and its callback gets kCancelled.
  virtual void cancel(const std::string& request_id) = 0;
  virtual EngineMetrics metrics() const = 0;
  virtual const tokenizer::Tokenizer& tokenizer() const = 0;
  virtual const EngineConfig& config() const = 0;
  virtual int32_t max_model_len() const = 0;
  virtual std::string model_name() const = 0;
  // How the model's family writes chat prompts. An engine that does not say (a test double) uses templates.
  virtual ChatFormat chat_format() const { return ChatFormat::kTemplate; }
  // Cancels everything outstanding and stops the engine thread.
  virtual void shutdown() = 0;
};

}  // namespace drift
