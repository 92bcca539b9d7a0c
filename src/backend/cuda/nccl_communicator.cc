#include "backend/cuda/nccl_communicator.h"

#include <cstdlib>
#include <cstring>
#include <mutex>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "backend/cuda/runtime/check.h"

namespace drift::backend {

namespace {

#define DRIFT_NCCL_CHECK(call)                                                                 \
  do {                                                                                         \
    const ncclResult_t r_ = (call);                                                            \
    DRIFT_CHECK(r_ == ncclSuccess, "{} failed: {}", #call, ncclGetErrorString(r_));             \
  } while (0)

ncclDataType_t nccl_type(const Tensor& x) {
  DRIFT_CHECK(x.dtype == DType::kF32 || x.dtype == DType::kBF16, "NCCL all_reduce of {}: F32 or BF16 only", x.describe());
  return x.dtype == DType::kF32 ? ncclFloat32 : ncclBfloat16;
}

}  // namespace

Expected<std::vector<std::unique_ptr<NcclCommunicator>>> NcclCommunicator::for_local_devices(
    std::span<CudaOps* const> ops) {
  const int n = int(ops.size());
  std::vector<int> devices;
  for (CudaOps* o : ops) devices.push_back(o->options().device);
  std::vector<ncclComm_t> comms(size_t(n), nullptr);
  if (const ncclResult_t r = ncclCommInitAll(comms.data(), n, devices.data()); r != ncclSuccess)
    return Status(StatusCode::kInternal, fmt::format("NCCL could not join {} local GPUs: {}", n, ncclGetErrorString(r)));
  std::shared_ptr<PeerGroup> peers;
  const char* env = std::getenv("DRIFT_PEER_ALL_REDUCE");
  if (env == nullptr || std::strcmp(env, "0") != 0) {
    std::string why;
    peers = PeerGroup::make(devices, why);
    if (peers == nullptr) spdlog::info("tensor parallelism: all-reduces over NCCL only ({})", why);
  }
  std::vector<std::unique_ptr<NcclCommunicator>> out;
  for (int r = 0; r < n; ++r)
    out.push_back(
        std::unique_ptr<NcclCommunicator>(new NcclCommunicator(comms[size_t(r)], *ops[size_t(r)], r, n, peers)));
  return out;
}

static_assert(sizeof(ncclUniqueId) == sizeof(NcclCommunicator::GroupId), "ncclUniqueId is 128 bytes");

Expected<NcclCommunicator::GroupId> NcclCommunicator::make_group_id() {
  ncclUniqueId id{};
  if (const ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess)
    return Status(StatusCode::kInternal, fmt::format("NCCL could not make a group id: {}", ncclGetErrorString(r)));
  GroupId bytes{};
  std::memcpy(bytes.data(), &id, sizeof(id));
  return bytes;
}

Expected<std::unique_ptr<NcclCommunicator>> NcclCommunicator::for_rank(CudaOps& ops, int32_t world, int32_t rank,
                                                                      const GroupId& id) {
  ncclUniqueId nccl_id{};
  std::memcpy(&nccl_id, id.data(), sizeof(nccl_id));
  ops.bind_thread();
  ncclComm_t comm = nullptr;
  if (const ncclResult_t r = ncclCommInitRank(&comm, world, nccl_id, rank); r != ncclSuccess)
    return Status(StatusCode::kUnavailable, fmt::format("NCCL rank {} of {} could not join its group: {}", rank, world,
                                                         ncclGetErrorString(r)));
  return std::unique_ptr<NcclCommunicator>(new NcclCommunicator(comm, ops, rank, world, nullptr));
}

NcclCommunicator::~NcclCommunicator() {
  if (gathered_ != nullptr) cudaFree(gathered_);
  for (void* p : outgrown_) cudaFree(p);
  if (!aborted_) ncclCommDestroy(comm_);
}

bool NcclCommunicator::peer_path(const Tensor& x) const {
  if (peers_ == nullptr || !use_peers_ || aborted_ || x.dtype != DType::kBF16 || x.ndim < 1) return false;
  const int64_t hidden = x.size(-1);
  return hidden % 8 == 0 && hidden <= cuda::kPeerMaxHidden && x.nbytes() <= PeerGroup::kInboxBytes &&
         reinterpret_cast<uintptr_t>(x.data) % 16 == 0;
}

cuda::PeerAllReduceParams NcclCommunicator::peer_params(const Tensor& x) const {
  cuda::PeerAllReduceParams p = peers_->params(rank_);
  p.x = static_cast<cuda::bf16*>(x.data);
  p.hidden = int32_t(x.size(-1));
  p.rows = x.numel() / p.hidden;
  return p;
}

bool NcclCommunicator::all_reduce_add_rms_norm(const Tensor& residual, const Tensor& x, const Tensor& weight, float eps,
                                               const Tensor& out) {
  if (!peer_path(x)) return false;
  DRIFT_CHECK(residual.dtype == DType::kBF16 && out.dtype == DType::kBF16 && weight.dtype == DType::kBF16,
              "fused all-reduce + add_rms_norm: residual {}, out {}, weight {} must be BF16", residual.describe(),
              out.describe(), weight.describe());
  DRIFT_CHECK(residual.numel() == x.numel() && out.numel() == x.numel() && weight.numel() == x.size(-1),
              "fused all-reduce + add_rms_norm: x {}, residual {}, out {}, weight {}", x.describe(), residual.describe(),
              out.describe(), weight.describe());
  cuda::PeerAllReduceParams p = peer_params(x);
  p.residual = static_cast<cuda::bf16*>(residual.data);
  p.weight = static_cast<const cuda::bf16*>(weight.data);
  p.out = static_cast<cuda::bf16*>(out.data);
  p.eps = eps;
  cuda::run(p, ops_->stream());
  return true;
}

void NcclCommunicator::all_reduce_sum(const Tensor& x) {
  if (peer_path(x)) {
    cuda::run(peer_params(x), ops_->stream());
    return;
  }
  DRIFT_NCCL_CHECK(ncclAllReduce(x.data, x.data, size_t(x.numel()), nccl_type(x), ncclSum, comm_, ops_->stream()));
}

void NcclCommunicator::all_gather_columns(const Tensor& x, const Tensor& out) {
  const size_t elem = dtype_size(x.dtype), cols = size_t(x.size(-1)), rows = size_t(x.numel()) / cols;
  DRIFT_CHECK_EQ(out.numel(), x.numel() * world_);
  // NCCL stacks the ranks' parts; each part's rows then go to their column block of `out`. The staging
  // buffer grows on the first steps of a new size (never inside a captured step of that size); the one it
  // outgrew stays allocated for the graphs captured with it.
  if (gathered_bytes_ < out.nbytes()) {
    if (gathered_ != nullptr) outgrown_.push_back(gathered_);
    DRIFT_CUDA_CHECK(cudaMalloc(&gathered_, out.nbytes()));
    gathered_bytes_ = out.nbytes();
  }
  DRIFT_NCCL_CHECK(ncclAllGather(x.data, gathered_, x.nbytes(), ncclUint8, comm_, ops_->stream()));
  const size_t part = cols * elem;
  for (int32_t r = 0; r < world_; ++r)
    DRIFT_CUDA_CHECK(cudaMemcpy2DAsync(static_cast<char*>(out.data) + size_t(r) * part, part * size_t(world_),
                                       static_cast<const char*>(gathered_) + size_t(r) * rows * part, part, part, rows,
                                       cudaMemcpyDeviceToDevice, ops_->stream()));
}

void NcclCommunicator::broadcast(const Tensor& x, int32_t root) {
  DRIFT_NCCL_CHECK(ncclBroadcast(x.data, x.data, x.nbytes(), ncclUint8, root, comm_, ops_->stream()));
}

Status NcclCommunicator::status() const {
  if (aborted_) return Status(StatusCode::kInternal, "NCCL group aborted: " + abort_reason_);
  ncclResult_t async = ncclSuccess;
  if (ncclCommGetAsyncError(comm_, &async) != ncclSuccess || async != ncclSuccess)
    return Status(StatusCode::kInternal, fmt::format("NCCL rank {} of {}: {}", rank_, world_, ncclGetErrorString(async)));
  return Status::Ok();
}

void NcclCommunicator::abort(const std::string& reason) {
  static std::mutex first;  // one abort per communicator, whichever rank's thread comes first
  std::lock_guard lock(first);
  if (aborted_) return;
  abort_reason_ = reason;
  aborted_ = true;
  if (peers_ != nullptr) peers_->abort();  // wakes every rank's peer all-reduce waiting on this one
  ncclCommAbort(comm_);  // wakes this rank's kernels waiting on a peer that will not come
}

bool use_peer_all_reduce(std::span<Ops* const> ranks, bool on) {
  bool available = true;
  for (Ops* o : ranks) {
    auto* nccl = dynamic_cast<NcclCommunicator*>(o->communicator());
    available = available && nccl != nullptr && nccl->has_peer_all_reduce();
    if (nccl != nullptr) nccl->set_peer_all_reduce(on);
  }
  return available;
}

}  // namespace drift::backend
