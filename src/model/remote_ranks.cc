#include "model/remote_ranks.h"

#include <array>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include <fmt/format.h>

namespace drift::model {

namespace {

// What the leader asks of its followers, first word of every header.
// kPing: nothing to do; it keeps an idle group's connections inside their timeout.
enum class Call : int32_t { kStop = 1, kAllocateKv, kAllocateWorkspace, kForward, kMoveKv, kPing };


constexpr int kHeaderWords = 512;
constexpr int kTensorWords = 3 + Tensor::kMaxDims;  // defined, dtype, ndim, shape

using HeaderWords = std::array<int32_t, kHeaderWords>;

Tensor header_tensor(HeaderWords& h) { return Tensor(h.data(), DType::kI32, {kHeaderWords}); }

Status group_status(const backend::Communicator& control, const backend::Ops& ops) {
  DRIFT_RETURN_IF_ERROR(control.status());
  return ops.communicator() != nullptr ? ops.communicator()->status() : Status::Ok();
}

class HeaderWriter {
 public:
  explicit HeaderWriter(Call call) { put(int32_t(call)); }
  void put(int64_t v) {
    DRIFT_CHECK(n_ < kHeaderWords, "a call to the followers needs more than {} header words", kHeaderWords);
    DRIFT_CHECK(v >= INT32_MIN && v <= INT32_MAX, "header value {} does not fit 32 bits", v);
    words_[size_t(n_++)] = int32_t(v);
  }
  void put(const Tensor& t) {
    put(t.defined() ? 1 : 0);
    put(int32_t(t.dtype));
    put(t.ndim);
    for (int d = 0; d < Tensor::kMaxDims; ++d) put(d < t.ndim ? t.shape[size_t(d)] : 0);
  }
  HeaderWords& words() { return words_; }

 private:
  HeaderWords words_{};
  int n_ = 0;
};

class HeaderReader {
 public:
  explicit HeaderReader(const HeaderWords& w) : words_(w) {}
  int32_t get() { return n_ < kHeaderWords ? words_[size_t(n_++)] : 0; }
  // A tensor's shape and dtype, its data a placeholder until FollowerBuffers::place(); undefined when the
  // leader's was.
  Tensor get_tensor() {
    const bool defined = get() != 0;
    Tensor t;
    t.dtype = DType(get());
    t.ndim = get();
    for (int d = 0; d < Tensor::kMaxDims; ++d) t.shape[size_t(d)] = get();
    if (!defined) return Tensor();
    t.data = reinterpret_cast<void*>(uintptr_t(64));
    return t;
  }

 private:
  const HeaderWords& words_;
  int n_ = 0;
};

// Sends (the leader, root 0) or receives (a follower) every defined tensor's bytes.
void share_tensors(backend::Ops& ops, const std::vector<Tensor*>& tensors) {
  for (Tensor* t : tensors)
    if (t->defined()) ops.broadcast(*t, 0);
}

// The tensors of a move_kv call, in the order both sides share.
std::vector<Tensor*> move_tensors(std::vector<KvRowMoves>& groups) {
  std::vector<Tensor*> tensors;
  for (KvRowMoves& m : groups) tensors.insert(tensors.end(), {&m.from, &m.to});
  return tensors;
}

class LeaderModel final : public Model {
 public:
  LeaderModel(std::unique_ptr<Model> local, backend::Ops& ops, std::shared_ptr<backend::Communicator> control,
              std::chrono::milliseconds heartbeat)
      : Model(local->config()), local_(std::move(local)), ops_(ops), control_(std::move(control)), heartbeat_period_(heartbeat) {
    description_ = local_->description();
    num_parameters_ = local_->num_parameters();
    heartbeat_ = std::thread([this] { beat(); });
  }
  // The followers' loops end with the group.
  ~LeaderModel() override {
    {
      std::lock_guard lock(call_mutex_);
      stopping_ = true;
    }
    stop_.notify_all();
    heartbeat_.join();
    send(HeaderWriter(Call::kStop));
  }

  std::vector<core::KvSpec> kv_specs(DType kv_dtype) const override { return local_->kv_specs(kv_dtype); }

  void allocate_kv_cache(std::span<const int32_t> num_blocks, int32_t block_size, DType kv_dtype) override {
    const std::unique_lock lock = begin_call();
    HeaderWriter h(Call::kAllocateKv);
    h.put(block_size);
    h.put(int32_t(kv_dtype));
    h.put(int64_t(num_blocks.size()));
    for (int32_t b : num_blocks) h.put(b);
    send(h);
    local_->allocate_kv_cache(num_blocks, block_size, kv_dtype);
  }

  void allocate_workspace(int32_t max_tokens, int32_t max_logits) override {
    const std::unique_lock lock = begin_call();
    HeaderWriter h(Call::kAllocateWorkspace);
    h.put(max_tokens);
    h.put(max_logits);
    send(h);
    local_->allocate_workspace(max_tokens, max_logits);
  }

  void forward(const ForwardContext& ctx, const Tensor& logits) override {
    const std::unique_lock lock = begin_call();
    ForwardContext sent = ctx;
    HeaderWriter h(Call::kForward);
    for (int64_t v : {int64_t(ctx.num_tokens), int64_t(ctx.num_seqs), int64_t(ctx.num_logits), int64_t(ctx.max_query_len),
                      int64_t(ctx.kv_groups.size())})
      h.put(v);
    send_with(h, input_tensors(sent));
    local_->forward(ctx, logits);
  }

  void move_kv(std::span<const KvRowMoves> groups) override {
    const std::unique_lock lock = begin_call();
    std::vector<KvRowMoves> sent(groups.begin(), groups.end());
    HeaderWriter h(Call::kMoveKv);
    h.put(int64_t(sent.size()));
    send_with(h, move_tensors(sent));
    local_->move_kv(groups);
  }

  Status status() const override {
    DRIFT_RETURN_IF_ERROR(local_->status());
    return group_status(*control_, ops_);
  }

  Status set_hidden_taps(std::span<const int32_t>) override {
    return unsupported(fmt::format("{}: hidden-state taps (EAGLE-3) run on one rank, not a group of {} nodes",
                                   config_.architecture, ops_.world_size()));
  }

 private:
  void send(HeaderWriter&& h) { send(h); }
  void send(HeaderWriter& h) { control_->broadcast(header_tensor(h.words()), 0); }
  // The header with the inputs' shapes, then the inputs through the layers' communicator.
  void send_with(HeaderWriter& h, const std::vector<Tensor*>& inputs) {
    for (const Tensor* t : inputs) h.put(*t);
    send(h);
    share_tensors(ops_, inputs);
  }

  // One call at a time reaches the followers, a step's or the heartbeat's.
  std::unique_lock<std::mutex> begin_call() {
    std::unique_lock lock(call_mutex_);
    last_call_ = std::chrono::steady_clock::now();
    return lock;
  }

  void beat() {
    std::unique_lock lock(call_mutex_);
    while (!stop_.wait_for(lock, heartbeat_period_, [&] { return stopping_; }))
      if (std::chrono::steady_clock::now() - last_call_ >= heartbeat_period_) {
        send(HeaderWriter(Call::kPing));
        last_call_ = std::chrono::steady_clock::now();
      }
  }

  std::unique_ptr<Model> local_;
  backend::Ops& ops_;
  std::shared_ptr<backend::Communicator> control_;
  std::chrono::milliseconds heartbeat_period_;
  std::mutex call_mutex_;
  std::condition_variable stop_;
  bool stopping_ = false;
  std::chrono::steady_clock::time_point last_call_ = std::chrono::steady_clock::now();
  std::thread heartbeat_;  // last: it reads the members above
};

// A follower's buffers, in its backend's memory: the step's inputs as the leader described them, and its
// logits.
class FollowerBuffers {
 public:
  explicit FollowerBuffers(backend::Ops& ops) : ops_(ops) {}
  // Places every defined tensor of `tensors` (shapes set) in one arena, grown to the largest step seen.
  void place(const std::vector<Tensor*>& tensors) {
    int64_t bytes = 0;
    for (const Tensor* t : tensors)
      if (t->defined()) bytes += int64_t((t->nbytes() + 255) / 256 * 256);
    if (!arena_.view.defined() || int64_t(arena_.view.nbytes()) < bytes)
      arena_ = ops_.alloc(DType::kU8, {std::max<int64_t>(bytes * 2, 4096)});
    char* next = static_cast<char*>(arena_.view.data);
    for (Tensor* t : tensors) {
      if (!t->defined()) continue;
      t->data = next;
      t->device = arena_.view.device;
      next += (t->nbytes() + 255) / 256 * 256;
    }
  }
  void size_logits(int32_t max_logits, int64_t vocab) { logits_ = ops_.alloc(DType::kF32, {std::max(max_logits, 1), vocab}); }
  Tensor logits(int32_t rows) const { return logits_.view.slice(0, rows); }

 private:
  backend::Ops& ops_;
  backend::Buffer arena_, logits_;
};

// The inputs the header describes, received into the follower's buffers.
void receive_inputs(HeaderReader& in, backend::Ops& ops, FollowerBuffers& buffers, const std::vector<Tensor*>& inputs) {
  for (Tensor* t : inputs) *t = in.get_tensor();
  buffers.place(inputs);
  share_tensors(ops, inputs);
}

void follow_forward(HeaderReader& in, Model& model, backend::Ops& ops, FollowerBuffers& buffers) {
  ForwardContext ctx;
  ctx.num_tokens = in.get();
  ctx.num_seqs = in.get();
  ctx.num_logits = in.get();
  ctx.max_query_len = in.get();
  ctx.kv_groups.resize(size_t(in.get()));
  receive_inputs(in, ops, buffers, input_tensors(ctx));
  model.forward(ctx, buffers.logits(ctx.num_logits));
}

void follow_move_kv(HeaderReader& in, Model& model, backend::Ops& ops, FollowerBuffers& buffers) {
  std::vector<KvRowMoves> groups(size_t(in.get()));
  receive_inputs(in, ops, buffers, move_tensors(groups));
  model.move_kv(groups);
}

}  // namespace

std::unique_ptr<Model> lead_followers(std::unique_ptr<Model> local, backend::Ops& ops,
                                      std::shared_ptr<backend::Communicator> control, std::chrono::milliseconds heartbeat) {
  return std::make_unique<LeaderModel>(std::move(local), ops, std::move(control), heartbeat);
}

Status follow_leader(Model& model, backend::Ops& ops, backend::Communicator& control) {
  if (ops.communicator() == nullptr)
    return invalid_argument("follow_leader: this rank's backend has no communicator to its leader");
  FollowerBuffers buffers(ops);
  for (;;) {
    HeaderWords words{};
    control.broadcast(header_tensor(words), 0);
    DRIFT_RETURN_IF_ERROR(control.status());
    HeaderReader in(words);
    switch (Call(in.get())) {
      case Call::kStop:
        return Status::Ok();
      case Call::kPing:
        break;
      case Call::kAllocateKv: {
        const int32_t block_size = in.get();
        const DType dtype = DType(in.get());
        std::vector<int32_t> num_blocks(size_t(in.get()));
        for (int32_t& b : num_blocks) b = in.get();
        model.allocate_kv_cache(num_blocks, block_size, dtype);
        break;
      }
      case Call::kAllocateWorkspace: {
        const int32_t max_tokens = in.get(), max_logits = in.get();
        model.allocate_workspace(max_tokens, max_logits);
        buffers.size_logits(max_logits, model.vocab_size());
        break;
      }
      case Call::kForward:
        follow_forward(in, model, ops, buffers);
        break;
      case Call::kMoveKv:
        follow_move_kv(in, model, ops, buffers);
        break;
      default:
        return internal_error(fmt::format("rank {}: the leader sent an unknown call {}", ops.rank(), words[0]));
    }
    DRIFT_RETURN_IF_ERROR(group_status(control, ops));
    DRIFT_RETURN_IF_ERROR(model.status());
  }
}

}  // namespace drift::model
