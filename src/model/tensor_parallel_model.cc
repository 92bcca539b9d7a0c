#include "model/tensor_parallel_model.h"

#include <optional>

#include <fmt/format.h>

#include "model/layer_plan.h"
#include "model/registry.h"
#include "model/tensor_split.h"
#include "model/weight_loader.h"

namespace drift::model {

namespace {

class TensorParallelModel final : public Model {
 public:
  TensorParallelModel(const weights::ModelConfig& config, RankBackends ranks)
      : Model(config), owned_(std::move(ranks.others)), inputs_(owned_.size() + 1), logits_(owned_.size() + 1) {
    ops_.push_back(ranks.first);
    for (const auto& o : owned_) ops_.push_back(o.get());
    models_.resize(ops_.size());
    // GPU ranks only queue work: between steps their threads poll rather than sleep (rank_threads.h), for
    // longer than a decode step lasts.
    const auto spin = ops_[0]->device() == Device::kCuda ? std::chrono::microseconds(20000) : std::chrono::microseconds(0);
    threads_ = std::make_unique<backend::RankThreads>(
        int32_t(ops_.size()),
        [this](const Status& failure) {
          for (backend::Ops* ops : ops_)
            if (ops->communicator() != nullptr) ops->communicator()->abort(failure.message());
        },
        spin);
  }

  Status load(const std::string& model_dir, const LoadOptions& options) {
    DRIFT_RETURN_IF_ERROR(on_every_rank([&](int32_t r) -> Status {
      LoadOptions mine = options;
      if (r != 0) mine.progress = nullptr;  // rank 0 speaks for the group
      DRIFT_ASSIGN_OR_RETURN(models_[size_t(r)], load_model(model_dir, *ops_[size_t(r)], mine));
      return Status::Ok();
    }));
    description_ = models_[0]->description();
    num_parameters_ = models_[0]->num_parameters();
    if (options.lend_whole_embedding) DRIFT_RETURN_IF_ERROR(load_whole_embedding(model_dir, options));
    return Status::Ok();
  }

  std::vector<core::KvSpec> kv_specs(DType kv_dtype) const override { return models_[0]->kv_specs(kv_dtype); }

  void allocate_kv_cache(std::span<const int32_t> num_blocks, int32_t block_size, DType kv_dtype) override {
    check(on_every_rank([&](int32_t r) {
      models_[size_t(r)]->allocate_kv_cache(num_blocks, block_size, kv_dtype);
      return Status::Ok();
    }));
  }

  void allocate_workspace(int32_t max_tokens, int32_t max_logits) override {
    check(on_every_rank([&](int32_t r) {
      models_[size_t(r)]->allocate_workspace(max_tokens, max_logits);
      // Rank 0 writes the caller's logits; the others need their own for the gather's result.
      if (r != 0) logits_[size_t(r)] = ops_[size_t(r)]->alloc(DType::kF32, {std::max(max_logits, 1), vocab_size()});
      return Status::Ok();
    }));
  }

  void forward(const ForwardContext& ctx, const Tensor& logits) override {
    keep_failure(on_every_rank([&](int32_t r) {
      const ForwardContext mine = share_inputs(r, ctx);
      const Tensor out = r == 0 ? logits : logits_[size_t(r)].view.slice(0, ctx.num_logits);
      models_[size_t(r)]->forward(mine, out);
      return communicator_status(r);
    }));
  }

  // Every rank records its share of the step, the inputs' broadcast included, on its own queue.
  std::unique_ptr<backend::CapturedWork> capture_forward(backend::Ops&, const ForwardContext& ctx,
                                                         const Tensor& logits) override;

  // Queues each rank's recorded step on that rank (a graph launch is bound to its GPU's thread).
  void replay(std::span<const std::unique_ptr<backend::CapturedWork>> graphs) {
    if (!failure_.ok()) return;  // a failed capture may have left a rank without its graph
    keep_failure(on_every_rank([&](int32_t r) {
      graphs[size_t(r)]->replay();
      return communicator_status(r);
    }));
  }

  void move_kv(std::span<const KvRowMoves> groups) override {
    keep_failure(on_every_rank([&](int32_t r) {
      std::vector<KvRowMoves> mine(groups.begin(), groups.end());
      std::vector<Tensor*> tensors;
      for (KvRowMoves& m : mine) tensors.insert(tensors.end(), {&m.from, &m.to});
      share(r, tensors);
      models_[size_t(r)]->move_kv(mine);
      return communicator_status(r);
    }));
  }

  Status status() const override { return failure_; }

  // The residual stream is whole on every rank after each all-reduce: rank 0's taps are the model's.
  Status set_hidden_taps(std::span<const int32_t> layers) override { return models_[0]->set_hidden_taps(layers); }
  Tensor hidden_taps() const override { return models_[0]->hidden_taps(); }
  Tensor token_embedding() const override { return whole_embedding_.view; }

 private:
  // Rank 0's copy of the whole [vocab, hidden] embedding, read as one rank would (random weights: the same
  // first draw every rank makes).
  Status load_whole_embedding(const std::string& model_dir, const LoadOptions& options) {
    return on_every_rank([&](int32_t r) -> Status {
      if (r != 0) return Status::Ok();
      std::optional<weights::WeightStore> store;
      if (!options.random_weights) {
        DRIFT_ASSIGN_OR_RETURN(weights::WeightStore opened, weights::WeightStore::open(model_dir));
        store.emplace(std::move(opened));
      }
      WeightLoader loader = store ? WeightLoader::from_store(*store, *ops_[0])
                                  : WeightLoader::random(options.seed, options.random_std, *ops_[0]);
      DRIFT_ASSIGN_OR_RETURN(whole_embedding_,
                             loader.load("model.embed_tokens.weight", {config_.vocab_size, config_.hidden_size}));
      return Status::Ok();
    });
  }

  Status on_every_rank(const std::function<Status(int32_t)>& work) {
    return threads_->run([&](int32_t r) {
      ops_[size_t(r)]->bind_thread();
      return work(r);
    });
  }

  Status communicator_status(int32_t r) const {
    const backend::Communicator* comm = ops_[size_t(r)]->communicator();
    return comm != nullptr ? comm->status() : Status::Ok();
  }

  // Sizing the buffers happens once, at load: a rank failing there stops the process with its message.
  static void check(const Status& s) { DRIFT_CHECK(s.ok(), "{}", s.to_string()); }
  // A step's failure is kept for status(): the group is spent, and every later step returns the same error.
  void keep_failure(const Status& s) {
    if (!s.ok() && failure_.ok()) failure_ = s;
  }

  // The step's inputs as rank r sees them: rank 0's own tensors, broadcast into each other rank's memory.
  ForwardContext share_inputs(int32_t r, const ForwardContext& ctx) {
    ForwardContext mine = ctx;
    if (r != 0) mine.query_tap = nullptr;  // SpecPV's scores read rank 0's queries
    share(r, input_tensors(mine));
    return mine;
  }

  // Broadcasts the defined tensors from rank 0; on the other ranks they are repointed into their arena.
  // Tensors lying close together in rank 0's memory (the runner's one input buffer) go as the one byte
  // range holding them: a single collective a step instead of one per tensor. Scattered ones (a test's
  // own buffers) go one by one. Every rank sees rank 0's addresses, so all make the same choice.
  void share(int32_t r, const std::vector<Tensor*>& tensors) {
    std::vector<Tensor*> defined;
    int64_t padded = 0;
    char *lo = nullptr, *hi = nullptr;
    for (Tensor* t : tensors) {
      if (!t->defined()) continue;
      defined.push_back(t);
      padded += int64_t((t->nbytes() + 3) / 4 * 4);
      char* begin = static_cast<char*>(t->data);
      lo = lo == nullptr ? begin : std::min(lo, begin);
      hi = std::max(hi, begin + t->nbytes());
    }
    if (defined.empty()) return;
    backend::Ops& ops = *ops_[size_t(r)];
    const int64_t range = hi - lo;
    if (range <= 2 * padded + 4096) {
      Tensor span(lo, DType::kU8, {range}, defined[0]->device);
      if (r != 0) {
        char* base = static_cast<char*>(arena(r, range).data);
        for (Tensor* t : defined) t->data = base + (static_cast<char*>(t->data) - lo);
        span.data = base;
      }
      ops.broadcast(span, 0);
      return;
    }
    if (r != 0) {
      char* next = static_cast<char*>(arena(r, padded).data);
      for (Tensor* t : defined) {
        t->data = next;
        next += (t->nbytes() + 3) / 4 * 4;
      }
    }
    for (Tensor* t : defined) ops.broadcast(*t, 0);
  }

  // Rank r's input arena of at least `bytes`; it grows to the largest step seen (the first steps of each
  // shape; never inside a captured one).
  const Tensor& arena(int32_t r, int64_t bytes) {
    backend::Buffer& a = inputs_[size_t(r)];
    const int64_t words = (bytes + 3) / 4;
    if (!a.view.defined() || a.view.numel() < words) a = ops_[size_t(r)]->alloc(DType::kI32, {std::max<int64_t>(words * 2, 1024)});
    return a.view;
  }

  std::vector<backend::Ops*> ops_;                    // [world] rank r's backend
  std::vector<std::unique_ptr<backend::Ops>> owned_;  // ranks 1..world-1
  std::vector<std::unique_ptr<Model>> models_;        // [world] rank r's share of the model
  std::vector<backend::Buffer> inputs_;               // [world] int32 arena of a step's inputs (ranks > 0)
  std::vector<backend::Buffer> logits_;               // [world] [max_logits, vocab] fp32 (ranks > 0)
  std::unique_ptr<backend::RankThreads> threads_;
  Status failure_;  // the first failed step's error; ok while the group works
  backend::Buffer whole_embedding_;  // on rank 0, with LoadOptions::lend_whole_embedding
};

// One step recorded on every rank. The ranks' graphs read the input arenas of the capture; a larger step
// later grows an arena into a new buffer, so the old ones are kept here while the graphs live.
class RankGraphs final : public backend::CapturedWork {
 public:
  RankGraphs(TensorParallelModel& model, std::vector<std::unique_ptr<backend::CapturedWork>> graphs,
             std::vector<backend::Buffer> arenas)
      : model_(model), graphs_(std::move(graphs)), arenas_(std::move(arenas)) {}
  void replay() override { model_.replay(graphs_); }

 private:
  TensorParallelModel& model_;
  std::vector<std::unique_ptr<backend::CapturedWork>> graphs_;  // [world]
  std::vector<backend::Buffer> arenas_;                         // [world] what graphs_ read (rank 0's unused)
};

std::unique_ptr<backend::CapturedWork> TensorParallelModel::capture_forward(backend::Ops&, const ForwardContext& ctx,
                                                                            const Tensor& logits) {
  std::vector<std::unique_ptr<backend::CapturedWork>> graphs(ops_.size());
  keep_failure(on_every_rank([&](int32_t r) {
    backend::Ops& ops = *ops_[size_t(r)];
    const Tensor out = r == 0 ? logits : logits_[size_t(r)].view.slice(0, ctx.num_logits);
    ops.begin_capture();
    // Recorded with the step: every replay sends rank 0's new inputs. The arena was sized by the same step
    // run directly before, so nothing grows inside the capture.
    const ForwardContext mine = share_inputs(r, ctx);
    models_[size_t(r)]->forward(mine, out);
    graphs[size_t(r)] = ops.end_capture();
    return communicator_status(r);
  }));
  return std::make_unique<RankGraphs>(*this, std::move(graphs), inputs_);
}

}  // namespace

Expected<std::unique_ptr<Model>> load_tensor_parallel(const std::string& model_dir, RankBackends ranks,
                                                      const LoadOptions& options) {
  DRIFT_ASSIGN_OR_RETURN(weights::ModelConfig config, weights::load_model_config(model_dir));
  for (const auto& other : ranks.others)
    if (other->world_size() != ranks.world_size() || ranks.first->world_size() != ranks.world_size())
      return invalid_argument(fmt::format("{} backends given for a group of {} ranks", ranks.world_size(),
                                          other->world_size()));
  // Refused once, by the field, before any rank reads a weight.
  DRIFT_RETURN_IF_ERROR(check_tensor_split(config, plan_layers(config), ranks.world_size(), options.expert_parallel));
  auto model = std::make_unique<TensorParallelModel>(config, std::move(ranks));
  DRIFT_RETURN_IF_ERROR(model->load(model_dir, options));
  return std::unique_ptr<Model>(std::move(model));
}

}  // namespace drift::model
