#include "backend/cuda/peer_group.h"

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>

#include "backend/cuda/runtime/check.h"

namespace drift::backend {

namespace {

// Whether every pair of `devices` can read each other's memory; the first pair that cannot, in `why`.
bool all_pairs_reach(std::span<const int> devices, std::string& why) {
  for (int a : devices)
    for (int b : devices) {
      if (a == b) continue;
      int ok = 0;
      DRIFT_CUDA_CHECK(cudaDeviceCanAccessPeer(&ok, a, b));
      if (ok == 0) {
        why = fmt::format("GPU {} cannot reach GPU {}'s memory", a, b);
        return false;
      }
    }
  return true;
}

void enable_peer_access(int device, std::span<const int> devices) {
  DRIFT_CUDA_CHECK(cudaSetDevice(device));
  for (int peer : devices) {
    if (peer == device) continue;
    const cudaError_t e = cudaDeviceEnablePeerAccess(peer, 0);
    if (e == cudaErrorPeerAccessAlreadyEnabled)
      (void)cudaGetLastError();  // enabled by an earlier group: fine, and not an error to keep
    else
      DRIFT_CUDA_CHECK(e);
  }
}

}  // namespace

std::shared_ptr<PeerGroup> PeerGroup::make(std::span<const int> devices, std::string& why) {
  const int world = int(devices.size());
  std::vector<int> sorted(devices.begin(), devices.end());
  std::sort(sorted.begin(), sorted.end());
  if (world < 2 || world > cuda::kMaxPeerRanks) {
    why = fmt::format("{} ranks (the peer all-reduce takes 2 to {})", world, cuda::kMaxPeerRanks);
    return nullptr;
  }
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) {
    why = "a GPU holds two ranks";
    return nullptr;
  }
  if (!all_pairs_reach(devices, why)) return nullptr;
  int current = 0;
  DRIFT_CUDA_CHECK(cudaGetDevice(&current));
  std::shared_ptr<PeerGroup> g(new PeerGroup());
  g->devices_.assign(devices.begin(), devices.end());
  const size_t inbox_bytes = 2 * size_t(world) * kInboxBytes;
  for (int device : devices) {
    enable_peer_access(device, devices);
    void *inbox = nullptr, *counters = nullptr;
    DRIFT_CUDA_CHECK(cudaMalloc(&inbox, inbox_bytes));
    DRIFT_CUDA_CHECK(cudaMalloc(&counters, 2 * sizeof(uint32_t)));
    DRIFT_CUDA_CHECK(cudaMemset(inbox, cuda::kPeerEmptyByte, inbox_bytes));
    DRIFT_CUDA_CHECK(cudaMemset(counters, 0, 2 * sizeof(uint32_t)));
    g->inboxes_.push_back(inbox);
    g->counters_.push_back(static_cast<uint32_t*>(counters));
  }
  void* flag = nullptr;
  DRIFT_CUDA_CHECK(cudaHostAlloc(&flag, sizeof(int), cudaHostAllocPortable | cudaHostAllocMapped));
  g->abort_flag_ = static_cast<int*>(flag);
  *g->abort_flag_ = 0;
  for (int device : devices) {  // the empty inboxes are in place before any rank's first call
    DRIFT_CUDA_CHECK(cudaSetDevice(device));
    DRIFT_CUDA_CHECK(cudaDeviceSynchronize());
  }
  DRIFT_CUDA_CHECK(cudaSetDevice(current));
  return g;
}

PeerGroup::~PeerGroup() {
  int current = 0;
  cudaGetDevice(&current);
  for (size_t i = 0; i < devices_.size(); ++i) {
    cudaSetDevice(devices_[i]);
    cudaFree(inboxes_[i]);
    cudaFree(counters_[i]);
  }
  if (abort_flag_ != nullptr) cudaFreeHost(abort_flag_);
  cudaSetDevice(current);
}

cuda::PeerAllReduceParams PeerGroup::params(int32_t rank) const {
  cuda::PeerAllReduceParams p;
  for (size_t i = 0; i < devices_.size(); ++i) p.inboxes[i] = inboxes_[i];
  p.inbox_bytes = int64_t(kInboxBytes);
  p.turn = counters_[size_t(rank)];
  p.arrived = counters_[size_t(rank)] + 1;
  p.abort_flag = abort_flag_;
  p.rank = rank;
  p.world = int32_t(devices_.size());
  return p;
}

void PeerGroup::abort() { *reinterpret_cast<volatile int*>(abort_flag_) = 1; }

}  // namespace drift::backend
