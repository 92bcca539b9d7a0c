#include <cstdio>
#include <map>

#include "commands.h"

namespace drift::cli {

namespace {
int g_exit_code = 0;
}

int exit_code() { return g_exit_code; }

void fail(const std::string& message) {
  std::fprintf(stderr, "drift: %s\n", message.c_str());
  g_exit_code = 1;
}

std::string default_model_dir() { return DRIFT_DEFAULT_MODEL_DIR; }

bool run_as_follower(const EngineConfig& c) {
  if (c.node_rank == 0) return false;
  std::fprintf(stderr, "drift: node %d of %d, following node 0 at %s:%d\n", c.node_rank, c.nnodes, c.master_addr.c_str(),
               c.master_port);
  if (const Status s = Engine::follow(c); !s.ok()) {
    fail(s.to_string());
  } else {
    std::fprintf(stderr, "drift: node %d: node 0 ended the group\n", c.node_rank);
  }
  return true;
}

CLI::Validator at_least(double min) {
  const std::string bound = CLI::detail::to_string(min);
  return CLI::Validator(
      [min, bound](std::string& text) -> std::string {
        double value = 0;
        if (!CLI::detail::lexical_cast(text, value)) return "'" + text + "' is not a number";
        return value < min ? "must be at least " + bound + ", got " + text : std::string();
      },
      ">= " + bound);
}

namespace {

// Which model, on what, split how.
void add_model_options(CLI::App& cmd, EngineConfig& c) {
  c.model_dir = default_model_dir();
  cmd.add_option("-m,--model", c.model_dir, "Hugging Face model folder (config.json, safetensors, tokenizer.json)")
      ->capture_default_str();
  cmd.add_option("--tokenizer", c.tokenizer_dir,
                 "Folder of tokenizer.json and tokenizer_config.json when not the model's (e.g. a config.json alone)");
  cmd.add_flag("--random-weights", c.random_weights, "Draw the weights from a seed: config.json alone (benchmarks)");
  cmd.add_option("--device", c.device, "cpu or cuda")->check(CLI::IsMember({"cpu", "cuda"}))->capture_default_str();
  cmd.add_option("--tensor-parallel,--tp", c.tensor_parallel,
                 "Ranks the model is split over on this host (cpu: threads; cuda: one GPU each, over NCCL)")
      ->check(CLI::Range(1, 64))->capture_default_str();
  cmd.add_option("--nnodes", c.nnodes,
                 "Processes (hosts) splitting the model, one rank each (cpu, --tensor-parallel 1); node 0 serves")
      ->check(CLI::Range(1, 64))->capture_default_str();
  cmd.add_option("--node-rank", c.node_rank, "This process's node (0: the engine; others follow node 0's steps)")
      ->check(CLI::Range(0, 63))->capture_default_str();
  cmd.add_option("--master-addr", c.master_addr, "Node 0's address, where it waits for the other nodes")
      ->capture_default_str();
  cmd.add_option("--master-port", c.master_port, "Node 0's port for the other nodes")
      ->check(CLI::Range(1, 65535))->capture_default_str();
  cmd.add_flag("--expert-parallel,--ep", c.expert_parallel,
               "MoE models: place the routed experts whole across the --tensor-parallel ranks (1/N of them each) "
               "instead of splitting every expert's width");
}

// The KV cache: its blocks, size, dtype, and what a retrofit changes in it.
void add_cache_options(CLI::App& cmd, EngineConfig& c) {
  cmd.add_option("--block-size", c.block_size, "Tokens per KV block")->check(CLI::Range(1, 1024))->capture_default_str();
  cmd.add_option("--kv-cache-bytes", c.kv_cache_bytes, "KV cache size in bytes (0: a fraction of free memory)")
      ->check(at_least(0))->capture_default_str();
  cmd.add_option("--kv-cache-fraction", c.kv_cache_memory_fraction, "Fraction of free memory for the KV cache")
      ->check(CLI::Range(0.0, 0.95))->capture_default_str();
  cmd.add_option("--kv-cache-dtype", c.kv_cache_dtype,
                 "KV cache dtype: auto (f32 on cpu, bf16 on cuda), bf16, f32 or fp8 (where a backend stores it)")
      ->check(CLI::IsMember({"auto", "bf16", "f32", "fp8"}))->capture_default_str();
  cmd.add_option("--retrofit", c.retrofit_file,
                 "Retrofit weights (safetensors from tools/retrofit/): MLA-lite latent KV and/or DSA-lite sparse attention");
}

// Speculative decoding (n-gram lookup, EAGLE-3 trees) and SpecPV's partial verification.
void add_speculative_options(CLI::App& cmd, EngineConfig& c) {
  cmd.add_option("--speculative", c.speculative.method,
                 "Speculative decoding: ngram (prompt lookup, greedy requests), eagle3 (a draft head: --draft) or empty for off")
      ->check(CLI::IsMember({"", "ngram", "eagle3"}));
  cmd.add_option_function<std::vector<std::string>>(
         "--draft",
         [&c](const std::vector<std::string>& dir) {
           c.speculative.method = "eagle3";
           c.speculative.draft_dir = dir.empty() || dir[0].empty() ? "auto" : dir[0];
           // A tree's defaults (--spec-* below run after this and override them): the bundled head's
           // acceptance grows up to about here, and a 33-row verify step costs a decode step on a GPU.
           c.speculative.num_tokens = 32;
           c.speculative.depth = 7;
           c.speculative.top_k = 8;
         },
         "EAGLE-3 speculative decoding with the draft head in DIR (alone: the model folder's eagle3/)")
      ->expected(0, 1)
      ->type_name("[DIR]");
  cmd.add_option("--spec-tokens", c.speculative.num_tokens, "Drafts (EAGLE-3: tree nodes) per sequence per step")
      ->check(CLI::Range(1, 128))->capture_default_str();
  cmd.add_option("--spec-depth", c.speculative.depth, "EAGLE-3: tree depth, at most")
      ->check(CLI::Range(1, 16))->capture_default_str();
  cmd.add_option("--spec-topk", c.speculative.top_k, "EAGLE-3: children per expanded node, and nodes expanded per depth")
      ->check(CLI::Range(1, 16))->capture_default_str();
  cmd.add_option("--spec-ngram-max", c.speculative.ngram_max, "Longest n-gram prompt lookup matches")
      ->check(CLI::Range(1, 64))->capture_default_str();
  cmd.add_option("--specpv-min-context", c.specpv.min_context,
                 "SpecPV: verify drafts of sequences this long against part of their KV (0: off)")
      ->check(at_least(0))->capture_default_str();
  cmd.add_option("--specpv-refresh", c.specpv.refresh, "SpecPV: verify steps per full verification (1: exact)")
      ->check(CLI::Range(1, 1 << 20))->capture_default_str();
  cmd.add_option("--specpv-sink", c.specpv.sink, "SpecPV: first tokens always read")->check(at_least(0))->capture_default_str();
  cmd.add_option("--specpv-retrieval", c.specpv.retrieval, "SpecPV: tokens of the retrieved blocks")
      ->check(at_least(0))->capture_default_str();
  cmd.add_option("--specpv-window", c.specpv.window, "SpecPV: newest tokens read before the buffer")
      ->check(at_least(0))->capture_default_str();
  cmd.add_option("--specpv-buffer", c.specpv.buffer,
                 "SpecPV: tokens accepted between full verifications, besides the step's drafts")
      ->check(at_least(0))->capture_default_str();
  cmd.add_option("--specpv-score", c.specpv.score,
                 "SpecPV: how blocks score against the queries: quest (bound on every logit) or specpv (SpecPV's mean)")
      ->check(CLI::IsMember({"quest", "specpv"}))->capture_default_str();
}

// What a step holds, in what order requests start, and how steps are launched.
void add_scheduling_options(CLI::App& cmd, EngineConfig& c) {
  cmd.add_option("--max-model-len", c.max_model_len, "Session length in tokens (0: the model's; above it: the model's, with a warning)")
      ->check(at_least(0))->capture_default_str();
  cmd.add_option("--max-num-seqs", c.max_num_seqs, "Sequences per step")->check(CLI::Range(1, 4096))->capture_default_str();
  cmd.add_option("--max-num-batched-tokens", c.max_num_batched_tokens, "Tokens per step")
      ->check(CLI::Range(1, 1 << 20))->capture_default_str();
  cmd.add_flag("!--no-prefix-cache", c.enable_prefix_cache, "Disable prefix reuse");
  cmd.add_flag("!--no-chunked-prefill", c.enable_chunked_prefill, "Prefill each prompt in one step");
  cmd.add_option("--mask-threads", c.mask_threads,
                 "Structured output: threads filling a step's token masks, the engine's included (0: min(cores/2, 8); "
                 "1: the engine thread alone)")
      ->check(CLI::Range(0, 256))->capture_default_str();
  cmd.add_flag("!--no-overlap-scheduling", c.overlap_scheduling,
               "Plan and launch each step only after the previous one's tokens are back (no overlap)");
  cmd.add_flag("--enforce-eager,--no-cuda-graphs", c.enforce_eager,
               "CUDA: launch every step's kernels directly instead of replaying decode steps from CUDA graphs");
  const std::map<std::string, AdmissionPolicy> admission{{"guaranteed", AdmissionPolicy::kGuaranteed},
                                                         {"optimistic", AdmissionPolicy::kOptimistic}};
  cmd.add_option("--admission", c.admission,
                 "guaranteed: reserve prompt + max_tokens of KV before starting; optimistic: preempt by recompute")
      ->transform(CLI::CheckedTransformer(admission, CLI::ignore_case).description("{guaranteed,optimistic}"))
      ->default_str(c.admission == AdmissionPolicy::kGuaranteed ? "guaranteed" : "optimistic");
  const std::map<std::string, SchedulingPolicy> policy{{"fcfs", SchedulingPolicy::kFcfs},
                                                       {"small-first", SchedulingPolicy::kSmallFirst}};
  cmd.add_option("--policy", c.policy, "Order of waiting requests: fcfs or small-first")
      ->transform(CLI::CheckedTransformer(policy, CLI::ignore_case).description("{fcfs,small-first}"))
      ->default_str(c.policy == SchedulingPolicy::kFcfs ? "fcfs" : "small-first");
  cmd.add_option("--slo-tpot-ms", c.slo_tpot_ms,
                 "SLO-aware scheduling: keep steps within this time per output token while decodes run (0: off)")
      ->check(at_least(0))->capture_default_str();
  cmd.add_option("--slo-ttft-ms", c.slo_ttft_ms,
                 "SLO-aware scheduling: give the oldest waiting prefill the budget to reach its first token in time; "
                 "requests predicted to miss it wait behind those that can still meet it")
      ->check(at_least(0))->capture_default_str();
  const std::map<std::string, bool> on_off{{"on", true}, {"off", false}};
  cmd.add_option("--slo-shed", c.slo_shed,
                 "With --slo-ttft-ms: refuse (HTTP 503, overloaded) a waiting request predicted to miss the TTFT "
                 "target by more than a quarter of it, before it holds KV")
      ->transform(CLI::CheckedTransformer(on_off, CLI::ignore_case).description("{on,off}"))
      ->default_str(c.slo_shed ? "on" : "off");
}

}  // namespace

void add_engine_options(CLI::App& cmd, EngineConfig& c) {
  add_model_options(cmd, c);
  add_cache_options(cmd, c);
  add_speculative_options(cmd, c);
  add_scheduling_options(cmd, c);
}

void add_sampling_options(CLI::App& cmd, SamplingParams& s) {
  cmd.add_option("--temperature", s.temperature, "0 = greedy")->capture_default_str();
  cmd.add_option("--top-k", s.top_k, "Keep the k most likely tokens (0: off)");
  cmd.add_option("--top-p", s.top_p, "Nucleus sampling mass (1: off)");
  cmd.add_option("--min-p", s.min_p, "Drop tokens below min_p x the top probability (0: off)");
  cmd.add_option("--repetition-penalty", s.repetition_penalty, "1: off");
  cmd.add_option("--presence-penalty", s.presence_penalty, "0: off");
  cmd.add_option("--frequency-penalty", s.frequency_penalty, "0: off");
  cmd.add_option("--seed", s.seed, "Seed for reproducible sampling");
}

}  // namespace drift::cli
