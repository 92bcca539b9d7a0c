#include "engine/engine_impl.h"

#include <algorithm>
#include <filesystem>
#include <random>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "base/trace.h"
#include "engine/backend_factory.h"
#include "model/registry.h"
#include "engine/multi_node.h"
#include "model/remote_ranks.h"
#include "model/tensor_parallel_model.h"
#include "weights/retrofit_config.h"
#include "weights/weight_store.h"
#include "spec/ngram_proposer.h"

namespace drift {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kNone: return "none";
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kCancelled: return "cancelled";
    case FinishReason::kError: return "error";
  }
  return "unknown";
}

Expected<std::unique_ptr<Engine>> Engine::create(const EngineConfig& config) {
  return engine::EngineImpl::create(config);
}

}  // namespace drift

namespace drift::engine {

namespace {

// vLLM's bucket boundaries, so dashboards built for it read ours.
const std::vector<double> kTtftBuckets = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
                                          2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
const std::vector<double> kTpotBuckets = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75,
                                          1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0};
const std::vector<double> kE2eBuckets = {0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0,
                                         40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
const std::vector<double> kTokensPerStepBuckets = {1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192};

// Positions are int32 on every path (block tables, kernels); one below 2^31 leaves room for the next token.
constexpr int64_t kMaxServedPositions = (int64_t(1) << 31) - 2;

Status check_speculative(const SpeculativeConfig& spec) {
  if (!spec.method.empty() && spec.method != "ngram" && spec.method != "eagle3")
    return invalid_argument(fmt::format("speculative method '{}' is not supported (ngram and eagle3 are)", spec.method));
  if (spec.method == "ngram" && (spec.num_tokens < 1 || spec.num_tokens > 64 || spec.ngram_min < 1 || spec.ngram_max < spec.ngram_min))
    return invalid_argument(fmt::format("speculative num_tokens must be in 1..64 and 1 <= ngram_min <= ngram_max, got {}, {}..{}",
                                        spec.num_tokens, spec.ngram_min, spec.ngram_max));
  if (spec.method != "eagle3") return Status::Ok();
  if (spec.draft_dir.empty()) return invalid_argument("speculative method eagle3 needs a draft head folder (--draft DIR)");
  if (spec.num_tokens < 1 || spec.num_tokens > 128 || spec.depth < 1 || spec.depth > 16 || spec.top_k < 1 || spec.top_k > 16)
    return invalid_argument(fmt::format("eagle3 needs 1..128 tree tokens (--spec-tokens), depth 1..16 (--spec-depth) and "
                                        "top-k 1..16 (--spec-topk), got {}, {} and {}", spec.num_tokens, spec.depth, spec.top_k));
  return Status::Ok();
}

Status check_specpv(const EngineConfig& config) {
  const SpecPvConfig& pv = config.specpv;
  if (pv.min_context < 0) return invalid_argument(fmt::format("specpv min_context must not be negative (0: off), got {}", pv.min_context));
  if (!pv.enabled()) return Status::Ok();
  if (config.speculative.method.empty())
    return invalid_argument("SpecPV (specpv min_context > 0) verifies drafts: it needs a speculative method (--speculative ngram)");
  if (config.tensor_parallel > 1)
    return unsupported(fmt::format("SpecPV scores one rank's queries; it does not run with tensor_parallel {}",
                                   config.tensor_parallel));
  // The block bounds read F32 or BF16 keys (ops.h: KeyBoundsParams), not FP8 codes with their scales.
  if (Expected<DType> kv = parse_kv_cache_dtype(config.kv_cache_dtype, DType::kF32); kv.ok() && *kv == DType::kF8E4M3)
    return unsupported("SpecPV scores blocks from F32 or BF16 keys; it does not run with --kv-cache-dtype fp8");
  if (pv.score != "quest" && pv.score != "specpv")
    return invalid_argument(fmt::format("specpv score must be quest or specpv, got '{}'", pv.score));
  if (pv.refresh < 1 || pv.sink < 0 || pv.retrieval < 0 || pv.window < 0 || pv.buffer < 0)
    return invalid_argument(fmt::format("specpv refresh must be at least 1 and its budgets not negative, got refresh {}, "
                                        "sink {}, retrieval {}, window {}, buffer {}",
                                        pv.refresh, pv.sink, pv.retrieval, pv.window, pv.buffer));
  return Status::Ok();
}

// DSA-lite's indexer and sparse attention read a sequence's whole block table (chains and EAGLE-3 draft
// trees alike); SpecPV's partial views would be read as whole tables, so that pairing is refused here
// rather than run wrong.
Status check_retrofit_modes(const EngineConfig& config) {
  if (config.retrofit_file.empty() || !config.specpv.enabled()) return Status::Ok();
  DRIFT_ASSIGN_OR_RETURN(const weights::RetrofitConfig retrofit, weights::read_retrofit_config(config.retrofit_file));
  if (retrofit.dsa_lite)
    return unsupported(fmt::format("retrofit {} has DSA-lite sparse attention, which does not run SpecPV partial "
                                   "verification (specpv min_context {}) yet: its indexer reads whole block tables; "
                                   "use --specpv-min-context 0",
                                   config.retrofit_file, config.specpv.min_context));
  return Status::Ok();
}

// The EAGLE-3 head's folder ("auto": the one a model folder carries beside its weights).
std::string draft_head_dir(const EngineConfig& config) {
  const std::string& dir = config.speculative.draft_dir;
  return dir == "auto" ? config.model_dir + "/eagle3" : dir;
}

// Whether a split target must lend the head its whole embedding: an EAGLE-3 head without its own (a
// folder that does not open says so when the head loads).
bool head_needs_target_embedding(const EngineConfig& config) {
  if (config.speculative.method != "eagle3" || config.tensor_parallel <= 1) return false;
  const Expected<weights::WeightStore> head = weights::WeightStore::open(draft_head_dir(config));
  return !head.ok() || !head->contains("embed_tokens.weight");
}

// Positions the engine serves: max_model_len where set, at most the model's own.
int64_t served_positions(const EngineConfig& config, int64_t model_positions) {
  return config.max_model_len > 0 ? std::min<int64_t>(config.max_model_len, model_positions) : model_positions;
}

}  // namespace

Expected<DType> parse_kv_cache_dtype(const std::string& name, DType compute) {
  if (name == "auto") return compute;
  if (name == "bf16" || name == "bfloat16") return DType::kBF16;
  if (name == "f32" || name == "fp32" || name == "float32") return DType::kF32;
  if (name == "fp8" || name == "fp8_e4m3") return DType::kF8E4M3;
  return invalid_argument(fmt::format("kv_cache_dtype '{}' is not one of auto, bf16, f32, fp8", name));
}

Expected<std::unique_ptr<Engine>> EngineImpl::create(const EngineConfig& config) {
  std::unique_ptr<EngineImpl> e(new EngineImpl());
  e->config_ = config;
  trace::install_crash_handlers();
  if (config.block_size <= 0) return invalid_argument(fmt::format("block_size must be positive, got {}", config.block_size));
  if (config.kv_cache_bytes < 0)
    return invalid_argument(fmt::format("kv_cache_bytes must not be negative (0: a fraction of free memory), got {}",
                                        config.kv_cache_bytes));
  if (config.max_model_len < 0)
    return invalid_argument(fmt::format("max_model_len must not be negative (0: the model's), got {}", config.max_model_len));
  if (config.slo_ttft_ms < 0 || config.slo_tpot_ms < 0)
    return invalid_argument(fmt::format("slo_ttft_ms and slo_tpot_ms must not be negative (0: off), got {} and {}",
                                        config.slo_ttft_ms, config.slo_tpot_ms));
  if (config.max_num_seqs <= 0 || config.max_num_batched_tokens <= 0)
    return invalid_argument("max_num_seqs and max_num_batched_tokens must be positive");
  if (config.mask_threads < 0 || config.mask_threads > 256)
    return invalid_argument(fmt::format("mask_threads must be in 0..256 (0: automatic), got {}", config.mask_threads));
  DRIFT_RETURN_IF_ERROR(check_multi_node(config));
  if (config.node_rank != 0)
    return invalid_argument(fmt::format("node_rank {}: the engine runs on node 0; the other nodes run Engine::follow "
                                        "(drift serve|generate with --node-rank)",
                                        config.node_rank));
  DRIFT_RETURN_IF_ERROR(check_speculative(config.speculative));
  DRIFT_RETURN_IF_ERROR(check_specpv(config));
  DRIFT_RETURN_IF_ERROR(check_retrofit_modes(config));
  DRIFT_RETURN_IF_ERROR(e->load(config));
  DRIFT_RETURN_IF_ERROR(e->size_kv_cache());
  DRIFT_RETURN_IF_ERROR(e->build_loop_parts());
  e->thread_ = std::thread([raw = e.get()] { raw->loop(); });
  return std::unique_ptr<Engine>(std::move(e));
}

Status EngineImpl::load(const EngineConfig& config) {
  std::shared_ptr<backend::Communicator> node_control;  // several nodes: the host channel of this node's calls
  RankGroup ranks;
  if (config.nnodes > 1) {
    DRIFT_ASSIGN_OR_RETURN(NodeGroup nodes, join_nodes(config));
    ranks.first = std::move(nodes.backend);
    node_control = std::move(nodes.control);
  } else {
    DRIFT_ASSIGN_OR_RETURN(ranks, make_rank_backends(config.device, std::max(config.tensor_parallel, 1)));
  }
  ops_ = std::move(ranks.first.ops);
  make_sampler_ = std::move(ranks.first.make_sampler);
  DRIFT_ASSIGN_OR_RETURN(kv_dtype_, parse_kv_cache_dtype(config.kv_cache_dtype, ops_->compute_dtype()));
  model::LoadOptions load;
  load.random_weights = config.random_weights;
  load.progress = config.load_progress;
  load.kv_dtype = kv_dtype_;
  load.extra_weight_files = config.extra_weight_files;
  load.retrofit_file = config.retrofit_file;
  load.max_positions = std::max<int32_t>(config.max_model_len, 0);
  load.expert_parallel = config.expert_parallel;
  // An EAGLE-3 head without its own embedding reads the target's whole table, which split ranks lack.
  load.lend_whole_embedding = head_needs_target_embedding(config);
  if (ranks.others.empty()) {
    DRIFT_ASSIGN_OR_RETURN(model_, model::load_model(config.model_dir, *ops_, load));
  } else {
    DRIFT_ASSIGN_OR_RETURN(model_, model::load_tensor_parallel(config.model_dir, {ops_.get(), std::move(ranks.others)}, load));
  }
  // The other nodes make every call this node's model makes (Engine::follow).
  if (config.nnodes > 1) model_ = model::lead_followers(std::move(model_), *ops_, std::move(node_control));
  model_name_ = std::filesystem::path(config.model_dir).lexically_normal().filename().string();
  if (model_name_.empty()) model_name_ = std::filesystem::path(config.model_dir).parent_path().filename().string();

  const std::string tokenizer_path = config.tokenizer_folder() + "/tokenizer.json";
  DRIFT_ASSIGN_OR_RETURN(tokenizer::Tokenizer tok, tokenizer::Tokenizer::from_file(tokenizer_path));
  tokenizer_ = std::make_unique<tokenizer::Tokenizer>(std::move(tok));
  eos_token_ids_ = model_->config().eos_token_ids;
  for (int32_t id : eos_token_ids_)
    if (id < 0 || id >= model_->vocab_size())
      return invalid_argument(fmt::format("{}: eos_token_id {} (config.json or generation_config.json) is outside the vocabulary [0, {})",
                                          config.model_dir, id, model_->vocab_size()));
  for (const std::string& token : model_->description().stop_tokens)
    if (const std::optional<int32_t> id = tokenizer_->token_to_id(token)) eos_token_ids_.push_back(*id);
  if (config.speculative.method == "ngram")
    proposer_ = std::make_unique<spec::NgramProposer>(config.speculative.ngram_min, config.speculative.ngram_max);
  if (config.speculative.method == "eagle3") {
    model::LoadOptions head_load;
    head_load.random_weights = config.random_weights;
    // The head drafts up to `depth` nodes past a sequence's last token, so past the served positions too.
    const int64_t served = served_positions(config, model_->config().max_position_embeddings);
    head_load.max_positions = int32_t(served + std::max(config.speculative.depth, 0));
    const std::string head_dir = draft_head_dir(config);
    if (ops_->world_size() > 1) {
      if (config.nnodes > 1)
        return unsupported(fmt::format("EAGLE-3 over {} nodes: the head reads the hidden states of one process's ranks",
                                       config.nnodes));
      DRIFT_ASSIGN_OR_RETURN(Backend solo, make_backend(config.device));
      head_ops_ = std::move(solo.ops);
      make_head_sampler_ = std::move(solo.make_sampler);
    }
    DRIFT_ASSIGN_OR_RETURN(draft_head_, model::load_eagle3_head(head_dir, *model_, head_ops(), head_load));
    // The head reads these layers' states from every target step.
    DRIFT_RETURN_IF_ERROR(model_->set_hidden_taps(draft_head_->eagle().capture_layers));
  }
  return Status::Ok();
}

Status EngineImpl::size_kv_cache() {
  const EngineConfig& config = config_;
  const int64_t model_len = model_->config().max_position_embeddings;
  if (config.max_model_len > model_len)
    spdlog::warn("drift: max_model_len {} is beyond {}'s {} positions (max_position_embeddings); serving {}",
                 config.max_model_len, model_name_, model_len, model_len);
  const int64_t served = served_positions(config, model_len);
  if (served > kMaxServedPositions)
    return invalid_argument(fmt::format("{} has max_position_embeddings {}; Drift serves at most {} positions: set "
                                        "max_model_len (--max-model-len)", model_name_, model_len, kMaxServedPositions));
  max_model_len_ = int32_t(served);
  // KV capacity: the budget in bytes, split into one pool per layer group; a sliding-window group's pool
  // holds only what its requests can keep at once (core/kv/kv_sizing.h), the full-attention groups the rest.
  const int64_t budget = config.kv_cache_bytes > 0
                             ? config.kv_cache_bytes
                             : int64_t(double(ops_->free_memory_bytes()) * config.kv_cache_memory_fraction);
  kv_specs_ = model_->kv_specs(kv_dtype_);
  const int64_t kv_budget = budget_after_bounds(draft_head_ ? budget_after_draft(budget) : budget);
  const core::KvPoolLimits limits{.budget_bytes = kv_budget, .block_size = config.block_size,
                                  .max_num_seqs = config.max_num_seqs,
                                  .max_step_tokens = config.max_num_batched_tokens, .max_model_len = max_model_len_};
  kv_blocks_ = core::pool_blocks_for_budget(kv_specs_, limits);
  for (size_t g = 0; g < kv_specs_.size(); ++g) {
    const int64_t bytes_per_block = kv_specs_[g].bytes_per_block(config.block_size);
    if (kv_blocks_[g] < 1)
      return resource_exhausted(fmt::format("the KV cache budget of {} bytes holds no block of group '{}' ({} bytes a block)",
                                            budget, kv_specs_[g].name, bytes_per_block));
    spdlog::debug("drift: {} on {}: KV group '{}': {} blocks of {} tokens ({} bytes each, {}), session length {}",
                  model_name_, ops_->name(), kv_specs_[g].name, kv_blocks_[g], config.block_size, bytes_per_block,
                  dtype_name(kv_dtype_), max_model_len_);
  }
  return Status::Ok();
}

// SpecPV keeps per-block key bounds beside each full-attention layer's cache (a min and a max row per
// block: 1/block_size of GQA's K and V, 2/block_size of a shared latent): their share of the budget.
int64_t EngineImpl::budget_after_bounds(int64_t budget) const {
  if (!config_.specpv.enabled() || config_.specpv.refresh == 1) return budget;  // refresh 1 never scores
  double kv = 0.0, bounds = 0.0;
  for (const core::KvSpec& g : kv_specs_) {
    const double per_token = double(g.bytes_per_token_per_layer() * g.num_layers);
    kv += per_token;
    if (g.sliding_window == 0 && g.kind != core::KvKind::kIndexer)
      bounds += per_token * (g.kind == core::KvKind::kGqa ? 1.0 : 2.0) / double(config_.block_size);
  }
  return int64_t(double(budget) * kv / (kv + bounds));
}

// The draft head keeps one layer of KV per block of the target group it shares: its share of the budget.
int64_t EngineImpl::budget_after_draft(int64_t budget) const {
  int64_t target = 0;
  for (const core::KvSpec& g : kv_specs_) target += g.bytes_per_token_per_layer() * g.num_layers;
  int64_t head = 0;
  for (const core::KvSpec& g : draft_head_->kv_specs(kv_dtype_)) head += g.bytes_per_token_per_layer() * g.num_layers;
  return int64_t(double(budget) * double(target) / double(target + head));
}

Status EngineImpl::build_drafter() {
  int32_t group = -1;
  for (size_t g = 0; g < kv_specs_.size() && group < 0; ++g)
    if (kv_specs_[g].sliding_window == 0) group = int32_t(g);
  if (group < 0)
    return unsupported(fmt::format("{}: an EAGLE-3 head shares a full-attention KV group's blocks, and this model has none",
                                   model_name_));
  const spec::Eagle3Geometry geometry{.block_size = config_.block_size, .max_num_seqs = config_.max_num_seqs,
                                      .max_num_tokens = runner_->config().max_num_tokens, .max_model_len = max_model_len_,
                                      .pool_blocks = kv_blocks_[size_t(group)], .kv_group = group,
                                      .cuda_graphs = runner_->config().cuda_graphs};
  const spec::Eagle3Options options{.num_tokens = config_.speculative.num_tokens, .depth = config_.speculative.depth,
                                    .top_k = config_.speculative.top_k};
  // A head step ranks at most top_k rows per sequence (an expansion's frontier).
  auto sampler = (head_ops_ ? make_head_sampler_ : make_sampler_)(config_.max_num_seqs * options.top_k,
                                                                  draft_head_->vocab_size());
  drafter_ = std::make_unique<spec::Eagle3Drafter>(std::move(draft_head_), *model_, head_ops(), geometry, options,
                                                   std::move(sampler));
  for (size_t g = 0; g < kv_specs_.size(); ++g) {
    kv_move_from_.push_back(ops_->alloc(DType::kI32, {runner_->config().max_num_tokens}));
    kv_move_to_.push_back(ops_->alloc(DType::kI32, {runner_->config().max_num_tokens}));
  }
  return Status::Ok();
}

Status EngineImpl::build_loop_parts() {
  const EngineConfig& config = config_;
  runner::RunnerConfig rc;
  rc.block_size = config.block_size;
  rc.num_blocks = kv_blocks_;
  rc.max_num_seqs = config.max_num_seqs;
  rc.max_num_tokens = std::max(config.max_num_batched_tokens, config.max_num_seqs);
  rc.max_model_len = max_model_len_;
  rc.kv_dtype = kv_dtype_;
  // A graph would replay the layers' collectives without the header that tells the other nodes' to run.
  rc.cuda_graphs = !config.enforce_eager && config.nnodes == 1;
  // A verify step samples 1 + drafts rows per sequence: the sampler takes up to a step's tokens.
  std::unique_ptr<sample::DeviceSampler> sampler = make_sampler_(rc.max_num_tokens, model_->vocab_size());
  // Overlapped steps need the sampler's launch and wait apart; on a host backend the host sampler gives
  // them (no faster there, but the same engine path, which the CPU tests check).
  overlap_ = config.overlap_scheduling && config.speculative.method.empty() && !config.specpv.enabled() &&
             config.slo_tpot_ms <= 0 && config.slo_ttft_ms <= 0 && config.tensor_parallel == 1 && config.nnodes == 1;
  if (overlap_ && sampler == nullptr) sampler = sample::make_host_sampler(rc.max_num_tokens, model_->vocab_size());
  runner_ = std::make_unique<runner::ModelRunner>(*model_, *ops_, rc, std::move(sampler));

  core::SchedulerConfig sc;
  sc.max_num_batched_tokens = config.max_num_batched_tokens;
  sc.max_num_seqs = config.max_num_seqs;
  sc.max_num_partial_prefills = config.max_num_partial_prefills;
  sc.long_prefill_token_threshold = config.long_prefill_token_threshold;
  sc.enable_chunked_prefill = config.enable_chunked_prefill;
  sc.enable_prefix_cache = config.enable_prefix_cache;
  sc.policy = config.policy == SchedulingPolicy::kFcfs ? core::SchedulePolicy::kFcfs : core::SchedulePolicy::kSmallFirst;
  sc.admission = config.admission == AdmissionPolicy::kGuaranteed ? core::AdmissionPolicy::kGuaranteed
                                                                   : core::AdmissionPolicy::kOptimistic;
  sc.max_model_len = max_model_len_;
  core::KvConfig kv;
  kv.block_size = config.block_size;
  kv.num_blocks = kv_blocks_;
  kv.groups = kv_specs_;
  DRIFT_ASSIGN_OR_RETURN(scheduler_, core::Scheduler::create(sc, kv));
  // A TTFT target alone never lowers the budget (slo_budget.h), but admission control needs the fitted
  // step time, so either target turns the policy on.
  if (config.slo_tpot_ms > 0 || config.slo_ttft_ms > 0)
    slo_.emplace(core::SloTargets{config.slo_ttft_ms / 1e3, config.slo_tpot_ms / 1e3}, config.max_num_batched_tokens,
                 std::min(config.max_num_batched_tokens, 16));
  if (config.slo_ttft_ms > 0) slo_admission_.emplace(config.slo_ttft_ms / 1e3, config.slo_shed);

  metrics_.time_to_first_token_s = Histogram(kTtftBuckets);
  metrics_.time_per_output_token_s = Histogram(kTpotBuckets);
  metrics_.e2e_request_latency_s = Histogram(kE2eBuckets);
  metrics_.tokens_per_step = Histogram(kTokensPerStepBuckets);
  for (size_t g = 0; g < kv_specs_.size(); ++g) {
    metrics_.kv_groups.push_back({.name = kv_specs_[g].name, .sliding_window = kv_specs_[g].sliding_window,
                                  .bytes_per_block = kv_specs_[g].bytes_per_block(config.block_size),
                                  .blocks_total = kv_blocks_[g]});
    metrics_.kv_blocks_total += kv_blocks_[g];
  }
  if (config.specpv.enabled()) {
    specpv_.emplace(*ops_, config.specpv, kv_specs_, config.block_size);
    runner_->set_query_tap(specpv_->query_tap());
  }
  // Per position of the accepted chain: a tree's depth, a chain's index.
  const int32_t positions = config.speculative.method == "eagle3" ? config.speculative.depth : config.speculative.num_tokens;
  metrics_.spec_decode_num_accepted_tokens_per_pos.assign(size_t(std::max(positions, 0)), 0);
  if (draft_head_) DRIFT_RETURN_IF_ERROR(build_drafter());
  return Status::Ok();
}

EngineImpl::~EngineImpl() { shutdown(); }

Expected<std::string> EngineImpl::submit(Request request, OutputCallback on_output) {
  DRIFT_RETURN_IF_ERROR(request.sampling.validate());
  if (request.max_tokens <= 0) return invalid_argument(fmt::format("max_tokens must be at least 1, got {}", request.max_tokens));
  if (request.prompt_tokens.empty() && request.prompt.empty())
    return invalid_argument("the prompt is empty: give prompt text or prompt token ids");
  auto state = std::make_unique<RequestState>();
  state->prompt_tokens = request.prompt_tokens.empty() ? tokenizer_->encode(request.prompt, request.add_special_tokens)
                                                       : request.prompt_tokens;
  const int64_t prompt_len = int64_t(state->prompt_tokens.size());
  if (prompt_len == 0) return invalid_argument("the prompt is empty");
  for (int32_t t : state->prompt_tokens)
    if (t < 0 || t >= model_->vocab_size())
      return invalid_argument(fmt::format("prompt token id {} is outside the vocabulary [0, {})", t, model_->vocab_size()));
  if (prompt_len >= max_model_len_)
    return invalid_argument(fmt::format("the prompt has {} tokens but the context length is {}: it leaves no room to "
                                        "generate (prompt must be at most {} tokens)",
                                        prompt_len, max_model_len_, max_model_len_ - 1));
  if (request.max_tokens_must_fit && prompt_len + request.max_tokens > max_model_len_)
    return invalid_argument(fmt::format("This model's maximum context length is {} tokens. However, you requested {} "
                                        "tokens ({} in the messages, {} in the completion). Please reduce the length "
                                        "of the messages or completion.",
                                        max_model_len_, prompt_len + request.max_tokens, prompt_len, request.max_tokens));
  state->max_tokens = int32_t(std::min<int64_t>(request.max_tokens, max_model_len_ - prompt_len));
  const int64_t reserve = config_.admission == AdmissionPolicy::kGuaranteed ? prompt_len + state->max_tokens : prompt_len + 1;
  for (size_t g = 0; g < kv_specs_.size(); ++g) {
    const int32_t needed = core::max_blocks_held(kv_specs_[g].sliding_window, reserve, config_.max_num_batched_tokens,
                                                 config_.block_size);
    if (needed > kv_blocks_[g])
      return invalid_argument(fmt::format("the request needs {} KV blocks of group '{}' ({} tokens) but that group's "
                                          "cache has only {} blocks ({} tokens); lower max_tokens or the prompt",
                                          needed, kv_specs_[g].name, reserve, kv_blocks_[g],
                                          int64_t(kv_blocks_[g]) * config_.block_size));
  }
  state->seed = request.sampling.seed ? *request.sampling.seed : std::random_device{}();
  state->decoder = std::make_unique<tokenizer::StreamDecoder>(*tokenizer_);
  state->stop_matcher = std::make_unique<StopMatcher>(request.stop);
  DRIFT_RETURN_IF_ERROR(attach_schema(*state, request));
  state->submitted = Clock::now();
  state->on_output = std::move(on_output);

  std::lock_guard lock(mu_);
  if (stopping_) return cancelled("the engine is shutting down");
  if (int32_t(inbox_.size()) + int32_t(live_ids_.size()) >= config_.max_waiting_requests)
    return resource_exhausted(fmt::format("the engine already holds {} requests (max_waiting_requests)", live_ids_.size()));
  state->seq_id = next_seq_id_++;
  if (request.id.empty()) request.id = fmt::format("req-{}", state->seq_id);
  if (live_ids_.contains(request.id)) return invalid_argument(fmt::format("request id '{}' is already in use", request.id));
  live_ids_[request.id] = state->seq_id;
  std::string id = request.id;
  state->request = std::move(request);
  trace::record(trace::Event::kSubmit, state->seq_id, prompt_len);
  inbox_.push_back(std::move(state));
  wake_.notify_one();
  return id;
}

void EngineImpl::cancel(const std::string& request_id) {
  std::lock_guard lock(mu_);
  cancels_.push_back(request_id);
  wake_.notify_one();
}

void EngineImpl::shutdown() {
  {
    std::lock_guard lock(mu_);
    if (stopping_ && !thread_.joinable()) return;
    stopping_ = true;
    wake_.notify_one();
  }
  if (thread_.joinable()) thread_.join();
}

EngineMetrics EngineImpl::metrics() const {
  std::lock_guard lock(metrics_mu_);
  return metrics_;
}

void EngineImpl::take_inbox() {
  std::deque<std::unique_ptr<RequestState>> incoming;
  std::vector<std::string> cancels;
  {
    std::lock_guard lock(mu_);
    incoming.swap(inbox_);
    cancels.swap(cancels_);
  }
  for (auto& state : incoming) {
    core::Sequence seq;
    seq.seq_id = state->seq_id;
    seq.tokens = state->prompt_tokens;
    seq.max_tokens = state->max_tokens;
    seq.priority = state->request.priority;
    seq.cache_namespace = state->request.cache_namespace;
    const int64_t id = state->seq_id;
    requests_[id] = std::move(state);
    Status added = scheduler_->add(std::move(seq));
    if (!added.ok()) {
      trace::record(trace::Event::kReject, id);
      std::lock_guard lock(metrics_mu_);
      ++metrics_.num_rejections_total;
      finish(id, FinishReason::kError, {}, added);
    }
  }
  for (const std::string& request_id : cancels) {
    int64_t seq_id = 0;
    {
      std::lock_guard lock(mu_);
      auto it = live_ids_.find(request_id);
      if (it == live_ids_.end()) continue;
      seq_id = it->second;
    }
    if (!requests_.contains(seq_id)) continue;
    trace::record(trace::Event::kCancel, seq_id);
    (void)scheduler_->abort(seq_id);
    finish(seq_id, FinishReason::kCancelled);
  }
}

void EngineImpl::loop() {
  for (;;) {
    {
      std::unique_lock lock(mu_);
      // num_sequences() counts finished and cancelled requests too: their blocks go back only at the
      // next commit, so the loop steps once more after the last request leaves.
      wake_.wait(lock, [&] {
        return stopping_ || !inbox_.empty() || !cancels_.empty() || !requests_.empty() ||
               scheduler_->num_sequences() > 0 || in_flight_.has_value();
      });
      if (stopping_) break;
    }
    take_inbox();
    if (!requests_.empty() || scheduler_->num_sequences() > 0 || in_flight_) run_step();
  }
  // The step in flight finishes and is applied (overlap_allowed() is false once stopping).
  while (in_flight_) continue_overlap();
  // Shutdown: everything still outstanding ends as cancelled, and its blocks go back.
  take_inbox();
  std::vector<int64_t> ids;
  for (const auto& [id, _] : requests_) ids.push_back(id);
  for (int64_t id : ids) {
    (void)scheduler_->abort(id);
    finish(id, FinishReason::kCancelled);
  }
}

void EngineImpl::emit(RequestState& state, Output out) {
  out.request_id = state.request.id;
  if (state.on_output) state.on_output(out);
}

void EngineImpl::finish(int64_t seq_id, FinishReason reason, std::string stop_reason, Status error, Output last) {
  auto it = requests_.find(seq_id);
  if (it == requests_.end()) return;
  RequestState& state = *it->second;
  if (specpv_) specpv_->forget(seq_id);
  if (reason == FinishReason::kStop || reason == FinishReason::kLength) {
    const core::FinishReason why = reason == FinishReason::kStop ? core::FinishReason::kStop : core::FinishReason::kLength;
    // A step in flight may still compute this request's pending token: its blocks go after that step.
    if (scheduler_->step_open()) {
      deferred_finishes_.emplace_back(seq_id, why);
    } else {
      (void)scheduler_->finish(seq_id, why);
    }
  }
  const auto now = Clock::now();
  Output out = std::move(last);
  out.finished = true;
  out.finish_reason = reason;
  out.stop_reason = std::move(stop_reason);
  out.error = std::move(error);
  out.usage = {int32_t(state.prompt_tokens.size()), int32_t(state.output_tokens.size()), state.num_cached_tokens};
  out.timings.queued_s = state.scheduled ? seconds_between(state.submitted, state.first_scheduled) : 0.0;
  out.timings.time_to_first_token_s = state.output_tokens.empty() ? 0.0 : seconds_between(state.submitted, state.first_token);
  out.timings.e2e_s = seconds_between(state.submitted, now);
  out.prompt_tokens = state.prompt_tokens;
  trace::record(trace::Event::kFinish, seq_id, int64_t(reason));
  {
    std::lock_guard lock(metrics_mu_);
    ++metrics_.requests_finished_total;
    metrics_.prompt_tokens_total += int64_t(state.prompt_tokens.size());
    metrics_.e2e_request_latency_s.observe(out.timings.e2e_s);
  }
  {
    std::lock_guard lock(mu_);
    live_ids_.erase(state.request.id);
  }
  std::unique_ptr<RequestState> owned = std::move(it->second);
  requests_.erase(it);
  emit(*owned, std::move(out));
}

void EngineImpl::refresh_gauges() {
  const core::PrefixCacheMetrics& prefix = scheduler_->prefix_cache().metrics();
  std::lock_guard lock(metrics_mu_);
  metrics_.num_requests_running = scheduler_->num_running();
  metrics_.num_requests_waiting = scheduler_->num_waiting();
  metrics_.kv_blocks_used = 0;
  for (int32_t g = 0; g < scheduler_->num_groups(); ++g) {
    metrics_.kv_groups[size_t(g)].blocks_used = scheduler_->pool(g).num_used();
    metrics_.kv_blocks_used += scheduler_->pool(g).num_used();
  }
  metrics_.kv_blocks_used_peak = std::max(metrics_.kv_blocks_used_peak, metrics_.kv_blocks_used);
  metrics_.prefix_cache_queries = prefix.query_tokens;
  metrics_.prefix_cache_hits = prefix.hit_tokens;
  metrics_.prefix_cache_evictions = prefix.evictions;
}

}  // namespace drift::engine
