#include "backend/cuda/runtime/cublaslt.h"

#include <utility>
#include <vector>

#include "backend/cuda/runtime/check.h"
#include "base/check.h"

namespace drift::backend::cuda {

struct CublasLt::Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  std::vector<cublasLtMatmulAlgo_t> candidates;  // the heuristic's picks, best first, until tuned

  ~Plan() {
    if (d != nullptr) cublasLtMatrixLayoutDestroy(d);
    if (b != nullptr) cublasLtMatrixLayoutDestroy(b);
    if (a != nullptr) cublasLtMatrixLayoutDestroy(a);
    if (desc != nullptr) cublasLtMatmulDescDestroy(desc);
  }
};

size_t CublasLt::KeyHash::operator()(const Key& key) const {
  const Shape& s = key.shape;
  size_t h = 0;
  for (int64_t v : {s.m, s.n, s.k, s.ld_x, s.ld_w, s.ld_out, int64_t(s.batch), s.stride_x, s.stride_w, s.stride_out})
    h = h * 1000003u ^ std::hash<int64_t>()(v);
  return h * 1000003u ^ size_t(key.alignment * 4 + s.out_f32 * 2 + key.bias);
}

CublasLt::CublasLt(void* workspace, size_t workspace_bytes, int num_sms, int64_t autotune_max_m)
    : workspace_(workspace), workspace_bytes_(workspace_bytes), num_sms_(num_sms), autotune_max_m_(autotune_max_m) {
  DRIFT_CUBLAS_CHECK(cublasLtCreate(&handle_));
}

CublasLt::~CublasLt() {
  plans_.clear();
  if (handle_ != nullptr) cublasLtDestroy(handle_);
}

CublasLt::Plan& CublasLt::plan(const Key& key) {
  auto it = plans_.find(key);
  if (it != plans_.end()) return *it->second;
  auto p = std::make_unique<Plan>();
  // Column-major view of the row-major product: out^T [n, m] = w [n, k] (stored as k x n, transposed)
  // times x^T [k, m].
  DRIFT_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t trans_a = CUBLAS_OP_T, trans_b = CUBLAS_OP_N;
  DRIFT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a, sizeof(trans_a)));
  DRIFT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b, sizeof(trans_b)));
  if (key.bias) {
    const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    const cudaDataType_t bias_type = CUDA_R_16BF;
    DRIFT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
    DRIFT_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof(bias_type)));
  }
  const Shape& s = key.shape;
  const cudaDataType_t out_type = s.out_f32 ? CUDA_R_32F : CUDA_R_16BF;
  DRIFT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->a, CUDA_R_16BF, uint64_t(s.k), uint64_t(s.n), s.ld_w));
  DRIFT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->b, CUDA_R_16BF, uint64_t(s.k), uint64_t(s.m), s.ld_x));
  DRIFT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->d, out_type, uint64_t(s.n), uint64_t(s.m), s.ld_out));
  if (s.batch > 1) {
    const std::pair<cublasLtMatrixLayout_t, int64_t> layouts[] = {{p->a, s.stride_w}, {p->b, s.stride_x}, {p->d, s.stride_out}};
    for (const auto& [layout, stride] : layouts) {
      DRIFT_CUBLAS_CHECK(
          cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &s.batch, sizeof(s.batch)));
      DRIFT_CUBLAS_CHECK(
          cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)));
    }
  }

  cublasLtMatmulPreference_t pref = nullptr;
  DRIFT_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t ws = workspace_bytes_;
  const uint32_t align = uint32_t(key.alignment);
  DRIFT_CUBLAS_CHECK(
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
    DRIFT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr, &align, sizeof(align)));
  constexpr int kCandidates = 8;
  cublasLtMatmulHeuristicResult_t results[kCandidates] = {};
  int found = 0;
  // Small weights (under 16 MiB) gain microseconds at most, and asking for more candidates costs host time.
  const bool tune_it = s.m <= autotune_max_m_ && s.n * s.k >= (int64_t(8) << 20);
  const int wanted = tune_it ? kCandidates : 1;
  const cublasStatus_t st =
      cublasLtMatmulAlgoGetHeuristic(handle_, p->desc, p->a, p->b, p->d, p->d, pref, wanted, results, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  DRIFT_CHECK(st == CUBLAS_STATUS_SUCCESS && found > 0,
              "cuBLASLt has no algorithm for m={} n={} k={} batch={} out={} bias={} alignment={} (status {})", s.m,
              s.n, s.k, s.batch, s.out_f32 ? "f32" : "bf16", key.bias, key.alignment, int(st));
  p->algo = results[0].algo;
  for (int i = 0; found > 1 && i < found; ++i) p->candidates.push_back(results[i].algo);
  return *plans_.emplace(key, std::move(p)).first->second;
}

void CublasLt::matmul(const Shape& shape, const __nv_bfloat16* x, const __nv_bfloat16* w, const __nv_bfloat16* bias,
                      void* out, cudaStream_t stream) {
  DRIFT_CHECK(!(bias != nullptr && shape.out_f32), "cuBLASLt path: bias with an fp32 output");
  // Every matrix of a batch starts at base + i * stride, and every row at a multiple of its ld: the
  // alignment cuBLASLt may assume is the lowest set bit over all of these byte offsets.
  const uintptr_t out_size = shape.out_f32 ? 4 : 2;
  uintptr_t bits = reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(w) | reinterpret_cast<uintptr_t>(out) |
                   reinterpret_cast<uintptr_t>(bias) | 256 | uintptr_t(shape.ld_x * 2) | uintptr_t(shape.ld_w * 2) |
                   uintptr_t(shape.ld_out) * out_size;
  if (shape.batch > 1)
    bits |= uintptr_t(shape.stride_x * 2) | uintptr_t(shape.stride_w * 2) | uintptr_t(shape.stride_out) * out_size;
  const int32_t alignment = int32_t(bits & (~bits + 1));  // lowest set bit
  Plan& p = plan({shape, bias != nullptr, alignment});
  if (bias != nullptr)
    DRIFT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
  if (!p.candidates.empty()) {
    cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
    DRIFT_CUDA_CHECK(cudaStreamIsCapturing(stream, &capturing));
    if (capturing == cudaStreamCaptureStatusNone) tune(p, x, w, out, stream);
  }
  const float alpha = 1.0f, beta = 0.0f;
  DRIFT_CUBLAS_CHECK(cublasLtMatmul(handle_, p.desc, &alpha, w, p.a, x, p.b, &beta, out, p.d, out, p.d, &p.algo,
                                    workspace_, workspace_bytes_, stream));
}

// Each candidate runs once to warm up, then its best of three timed runs counts; a candidate that fails
// to launch is skipped. The product is computed again by the caller, so `out` may hold any candidate's.
void CublasLt::tune(Plan& p, const __nv_bfloat16* x, const __nv_bfloat16* w, void* out, cudaStream_t stream) {
  const float alpha = 1.0f, beta = 0.0f;
  cudaEvent_t start = nullptr, stop = nullptr;
  DRIFT_CUDA_CHECK(cudaEventCreate(&start));
  DRIFT_CUDA_CHECK(cudaEventCreate(&stop));
  float best_ms = -1.0f;
  for (const cublasLtMatmulAlgo_t& algo : p.candidates) {
    auto run = [&] {
      return cublasLtMatmul(handle_, p.desc, &alpha, w, p.a, x, p.b, &beta, out, p.d, out, p.d, &algo, workspace_,
                            workspace_bytes_, stream);
    };
    if (run() != CUBLAS_STATUS_SUCCESS) continue;
    float fastest = -1.0f;
    for (int rep = 0; rep < 3; ++rep) {
      DRIFT_CUDA_CHECK(cudaEventRecord(start, stream));
      DRIFT_CUBLAS_CHECK(run());
      DRIFT_CUDA_CHECK(cudaEventRecord(stop, stream));
      DRIFT_CUDA_CHECK(cudaEventSynchronize(stop));
      float ms = 0.0f;
      DRIFT_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
      if (fastest < 0 || ms < fastest) fastest = ms;
    }
    if (best_ms < 0 || fastest < best_ms) {
      best_ms = fastest;
      p.algo = algo;
    }
  }
  DRIFT_CUDA_CHECK(cudaEventDestroy(start));
  DRIFT_CUDA_CHECK(cudaEventDestroy(stop));
  p.candidates.clear();
}

}  // namespace drift::backend::cuda
