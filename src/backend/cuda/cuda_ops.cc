// CudaOps: checks each op's shapes and dtypes (programmer errors abort with both values printed), fills
// the kernel's parameter struct and queues the launcher on the backend's stream.
#include "backend/cuda/cuda_ops.h"

#include <fmt/format.h>

#include <algorithm>

#include "backend/cuda/ops/launch.h"
#include "backend/cuda/runtime/check.h"
#include "backend/cuda/runtime/cublaslt.h"
#include "backend/cuda/runtime/graph.h"
#include "backend/cuda/tensor_checks.h"

namespace drift::backend {

namespace {

using cuda::bf16;
using cuda::bf16_mut;
using cuda::bf16_ptr;
using cuda::check_device;
using cuda::check_dtype;
using cuda::i32_ptr;

std::shared_ptr<void> device_alloc(size_t bytes) {
  void* p = nullptr;
  DRIFT_CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(bytes, 256)));
  return std::shared_ptr<void>(p, [](void* q) { cudaFree(q); });
}

}  // namespace

int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return count;
}

Expected<std::unique_ptr<Ops>> make_cuda_ops(const CudaOptions& options) {
  const int count = cuda_device_count();
  if (options.device < 0 || options.device >= count)
    return unsupported(fmt::format("CUDA device {} is not available ({} device(s) found)", options.device, count));
  return std::unique_ptr<Ops>(std::make_unique<CudaOps>(options));
}

void CudaOps::bind_thread() { DRIFT_CUDA_CHECK(cudaSetDevice(options_.device)); }

CudaOps::CudaOps(const CudaOptions& options) : options_(options) {
  DRIFT_CUDA_CHECK(cudaSetDevice(options.device));
  DRIFT_CUDA_CHECK(cudaDeviceGetAttribute(&num_sms_, cudaDevAttrMultiProcessorCount, options.device));
  DRIFT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  cublas_workspace_ = device_alloc(options.cublas_workspace_bytes);
  attention_workspace_ = device_alloc(options.attention_workspace_bytes);
  split_counters_ = device_alloc(kMaxSplitCounters * sizeof(int32_t));
  DRIFT_CUDA_CHECK(cudaMemset(split_counters_.get(), 0, kMaxSplitCounters * sizeof(int32_t)));
  lt_ = std::make_unique<cuda::CublasLt>(cublas_workspace_.get(), options.cublas_workspace_bytes, num_sms_,
                                         options.gemm_autotune_max_rows);
}

CudaOps::~CudaOps() {
  if (stream_ != nullptr) {
    cudaStreamSynchronize(stream_);
    lt_.reset();
    cudaStreamDestroy(stream_);
  }
}

Buffer CudaOps::alloc(DType dtype, std::initializer_list<int64_t> shape) {
  Tensor view(nullptr, dtype, shape, Device::kCuda);
  std::shared_ptr<void> memory = device_alloc((view.nbytes() + 255) / 256 * 256);
  view.data = memory.get();
  return Buffer{std::move(memory), view};
}

Buffer CudaOps::alloc_host(DType dtype, std::initializer_list<int64_t> shape) {
  Tensor view(nullptr, dtype, shape, Device::kCpu);
  void* p = nullptr;
  DRIFT_CUDA_CHECK(cudaHostAlloc(&p, std::max<size_t>(view.nbytes(), 64), cudaHostAllocDefault));
  view.data = p;
  return Buffer{std::shared_ptr<void>(p, [](void* q) { cudaFreeHost(q); }), view};
}

namespace {

// An event on the ops' stream; record() outside any capture only.
class CudaQueueMark final : public QueueMark {
 public:
  explicit CudaQueueMark(cudaStream_t stream) : stream_(stream) {
    DRIFT_CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming));
  }
  ~CudaQueueMark() override { cudaEventDestroy(event_); }
  void record() override { DRIFT_CUDA_CHECK(cudaEventRecord(event_, stream_)); }
  void wait() override { DRIFT_CUDA_CHECK(cudaEventSynchronize(event_)); }  // a never-recorded event has passed

 private:
  cudaStream_t stream_;
  cudaEvent_t event_ = nullptr;
};

}  // namespace

std::unique_ptr<QueueMark> CudaOps::make_mark() { return std::make_unique<CudaQueueMark>(stream_); }

void CudaOps::begin_capture() {
  DRIFT_CUDA_CHECK(cudaStreamSynchronize(stream_));
  DRIFT_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
}

std::unique_ptr<CapturedWork> CudaOps::end_capture() {
  cudaGraph_t graph = nullptr;
  DRIFT_CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
  return std::make_unique<cuda::CudaGraph>(graph, stream_);
}

void CudaOps::copy_from_host(const Tensor& dst, const void* src) {
  check_device(dst, "copy_from_host");
  if (dst.nbytes() == 0) return;
  DRIFT_CUDA_CHECK(cudaMemcpyAsync(dst.data, src, dst.nbytes(), cudaMemcpyHostToDevice, stream_));
}

void CudaOps::copy_to_host(void* dst, const Tensor& src) {
  check_device(src, "copy_to_host");
  if (src.nbytes() == 0) return;
  DRIFT_CUDA_CHECK(cudaMemcpyAsync(dst, src.data, src.nbytes(), cudaMemcpyDeviceToHost, stream_));
  DRIFT_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaOps::synchronize() { DRIFT_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

size_t CudaOps::free_memory_bytes() const {
  size_t free = 0, total = 0;
  DRIFT_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  return free;
}

// An id outside the table gives a zero row here (a GatherRowsParams rule), so the whole table is part 0.
void CudaOps::embedding(const Tensor& ids, const Tensor& table, const Tensor& out) { embedding_part(ids, table, 0, out); }

void CudaOps::embedding_part(const Tensor& ids, const Tensor& table, int64_t first_id, const Tensor& out) {
  check_dtype(ids, DType::kI32, "embedding_part ids");
  check_device(table, "embedding_part");
  DRIFT_CHECK(out.dtype == table.dtype, "cuda embedding_part: table {} and out {} differ", table.describe(), out.describe());
  const int64_t num_tokens = ids.numel(), hidden = table.size(1);
  DRIFT_CHECK_EQ(out.numel(), num_tokens * hidden);
  // Ids of other ranks' rows fall outside [0, num_src_rows) once shifted: zero rows.
  cuda::run(cuda::GatherRowsParams{.src = table.data, .index = i32_ptr(ids), .out = out.data, .num_rows = num_tokens,
                                   .num_src_rows = table.size(0), .row_bytes = hidden * int64_t(dtype_size(table.dtype)),
                                   .first_row = first_id},
            stream_);
}

void CudaOps::rms_norm(const Tensor& x, const Tensor& w, float eps, const Tensor& out) {
  if (omitted(OpFamily::kNorms)) return;
  check_dtype(x, DType::kBF16, "rms_norm x");
  check_dtype(w, DType::kBF16, "rms_norm weight");
  check_dtype(out, DType::kBF16, "rms_norm out");
  const int64_t hidden = w.numel();
  DRIFT_CHECK_EQ(x.numel() % hidden, int64_t(0));
  DRIFT_CHECK_EQ(out.numel(), x.numel());
  cuda::run(cuda::RmsNormParams{.x = bf16_ptr(x), .residual = nullptr, .weight = bf16_ptr(w), .out = bf16_mut(out),
                                .num_rows = x.numel() / hidden, .hidden = int32_t(hidden), .eps = eps},
            stream_);
}

void CudaOps::add_rms_norm(const Tensor& residual, const Tensor& x, const Tensor& w, float eps, const Tensor& out) {
  if (omitted(OpFamily::kNorms)) return;
  check_dtype(residual, DType::kBF16, "add_rms_norm residual");
  check_dtype(x, DType::kBF16, "add_rms_norm x");
  check_dtype(w, DType::kBF16, "add_rms_norm weight");
  check_dtype(out, DType::kBF16, "add_rms_norm out");
  const int64_t hidden = w.numel();
  DRIFT_CHECK_EQ(residual.numel(), x.numel());
  DRIFT_CHECK_EQ(out.numel(), x.numel());
  DRIFT_CHECK_EQ(x.numel() % hidden, int64_t(0));
  cuda::run(cuda::RmsNormParams{.x = bf16_ptr(x), .residual = bf16_mut(residual), .weight = bf16_ptr(w),
                                .out = bf16_mut(out), .num_rows = x.numel() / hidden, .hidden = int32_t(hidden),
                                .eps = eps},
            stream_);
}

void CudaOps::linear(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& out) {
  check_dtype(x, DType::kBF16, "linear x");
  check_dtype(w, DType::kBF16, "linear weight");
  check_device(out, "linear out");
  DRIFT_CHECK(out.dtype == DType::kBF16 || out.dtype == DType::kF32, "cuda linear writes BF16 or F32, got {}",
              out.describe());
  const int64_t n = w.size(0), k = w.size(1), m = x.numel() / k;
  DRIFT_CHECK_EQ(x.size(-1), k);
  DRIFT_CHECK_EQ(out.numel(), m * n);
  if (omitted(out.dtype == DType::kF32 ? OpFamily::kLogits : OpFamily::kLinears)) return;
  if (bias.defined()) {
    check_dtype(bias, DType::kBF16, "linear bias");
    DRIFT_CHECK_EQ(bias.numel(), n);
  }
  cuda::run(cuda::GemmParams{.x = bf16_ptr(x), .w = bf16_ptr(w), .bias = bias.defined() ? bf16_ptr(bias) : nullptr,
                             .out = out.data, .m = m, .n = n, .k = k, .out_f32 = out.dtype == DType::kF32,
                             .allow_gemv = options_.small_batch_gemv,
                             .split_by_iterations = options_.gemv_split_by_iterations,
                             .stream_rows = options_.gemv_stream, .lt = lt_.get()},
            stream_);
}

namespace {

// Shape checks shared by the op and its fused form.
cuda::RotaryParams rotary_params(const Tensor& q, const Tensor& k, const Tensor& positions, const RopeParams& p) {
  check_dtype(q, DType::kBF16, "rope q");
  check_dtype(positions, DType::kI32, "rope positions");
  check_dtype(p.cos_sin, DType::kF32, "rope table");
  const int64_t num_tokens = positions.numel();
  DRIFT_CHECK_EQ(q.ndim, 3);
  DRIFT_CHECK_EQ(q.size(0), num_tokens);
  DRIFT_CHECK_EQ(p.cos_sin.size(1), int64_t(p.rotary_dim));
  DRIFT_CHECK(p.rotary_dim > 0 && p.rotary_dim % 2 == 0 && p.rotary_dim <= q.size(2), "rotary_dim {} for head_dim {}",
              p.rotary_dim, q.size(2));
  const int64_t q_packed = q.size(1) * q.size(2);
  DRIFT_CHECK(p.q_row_stride == 0 || p.q_row_stride >= q_packed, "rope q row stride {} under a row of {}",
              p.q_row_stride, q_packed);
  int64_t k_stride = 0;
  if (k.defined()) {
    check_dtype(k, DType::kBF16, "rope k");
    DRIFT_CHECK_EQ(k.ndim, 3);
    DRIFT_CHECK_EQ(k.size(0), num_tokens);
    DRIFT_CHECK_EQ(k.size(2), q.size(2));
    const int64_t k_packed = k.size(1) * k.size(2);
    DRIFT_CHECK(p.k_row_stride == 0 || p.k_row_stride >= k_packed, "rope k row stride {} under a row of {}",
                p.k_row_stride, k_packed);
    k_stride = p.k_row_stride > 0 ? p.k_row_stride : k_packed;
  }
  return cuda::RotaryParams{.q = bf16_mut(q), .k = k.defined() ? bf16_mut(k) : nullptr,
                               .positions = i32_ptr(positions), .cos_sin = p.cos_sin.data_as<float>(),
                               .num_tokens = num_tokens, .q_row_stride = p.q_row_stride > 0 ? p.q_row_stride : q_packed,
                               .k_row_stride = k_stride, .num_q_heads = int32_t(q.size(1)),
                               .num_k_heads = k.defined() ? int32_t(k.size(1)) : 0, .head_dim = int32_t(q.size(2)),
                               .rotary_dim = p.rotary_dim, .max_positions = int32_t(p.cos_sin.size(0)),
                               .interleaved = p.interleaved};
}

}  // namespace

void CudaOps::rope(const Tensor& q, const Tensor& k, const Tensor& positions, const RopeParams& p) {
  cuda::run(rotary_params(q, k, positions, p), stream_);
}

void CudaOps::silu_mul(const Tensor& gate_up, const Tensor& out) {
  check_dtype(gate_up, DType::kBF16, "silu_mul gate_up");
  check_dtype(out, DType::kBF16, "silu_mul out");
  const int64_t ffn = out.size(-1);
  DRIFT_CHECK_EQ(gate_up.size(-1), 2 * ffn);
  DRIFT_CHECK_EQ(gate_up.numel(), 2 * out.numel());
  cuda::run(cuda::SiluMulParams{.gate_up = bf16_ptr(gate_up), .out = bf16_mut(out), .num_rows = out.numel() / ffn,
                                .ffn = ffn},
            stream_);
}

void CudaOps::linear_silu_mul(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& gate_up,
                              const Tensor& act) {
  if (omitted(OpFamily::kLinears)) return;
  check_dtype(x, DType::kBF16, "linear_silu_mul x");
  check_dtype(w, DType::kBF16, "linear_silu_mul weight");
  check_dtype(act, DType::kBF16, "linear_silu_mul act");
  const int64_t n = w.size(0), k = w.size(1), m = x.numel() / k;
  DRIFT_CHECK_EQ(x.size(-1), k);
  DRIFT_CHECK_EQ(n % 2, int64_t(0));
  DRIFT_CHECK_EQ(act.numel(), m * n / 2);
  if (bias.defined()) {
    check_dtype(bias, DType::kBF16, "linear_silu_mul bias");
    DRIFT_CHECK_EQ(bias.numel(), n);
  }
  const cuda::GemmParams gemm{.x = bf16_ptr(x), .w = bf16_ptr(w), .bias = bias.defined() ? bf16_ptr(bias) : nullptr,
                              .out = act.data, .m = m, .n = n, .k = k, .allow_gemv = options_.small_batch_gemv,
                              .swiglu = true, .split_by_iterations = options_.gemv_split_by_iterations,
                              .lt = lt_.get()};
  if (!options_.fuse_swiglu_gemv || !cuda::gemv_supports(gemm)) {  // cuBLASLt (many rows) or unfused
    Ops::linear_silu_mul(x, w, bias, gate_up, act);
    return;
  }
  cuda::run(gemm, stream_);
}

void CudaOps::gather_rows(const Tensor& x, const Tensor& rows, const Tensor& out) {
  check_device(x, "gather_rows x");
  check_dtype(rows, DType::kI32, "gather_rows rows");
  DRIFT_CHECK(out.dtype == x.dtype, "cuda gather_rows: x {} and out {} differ", x.describe(), out.describe());
  const int64_t row_elems = x.size(0) > 0 ? x.numel() / x.size(0) : 0;
  DRIFT_CHECK_EQ(out.numel(), rows.numel() * row_elems);
  cuda::run(cuda::GatherRowsParams{.src = x.data, .index = i32_ptr(rows), .out = out.data, .num_rows = rows.numel(),
                                   .num_src_rows = x.size(0), .row_bytes = row_elems * int64_t(dtype_size(x.dtype))},
            stream_);
}

void CudaOps::scatter_rows(const Tensor& x, const Tensor& rows, const Tensor& out) {
  check_device(out, "scatter_rows out");
  check_dtype(rows, DType::kI32, "scatter_rows rows");
  DRIFT_CHECK(out.dtype == x.dtype, "cuda scatter_rows: x {} and out {} differ", x.describe(), out.describe());
  const int64_t row_elems = out.size(0) > 0 ? out.numel() / out.size(0) : 0;
  DRIFT_CHECK_EQ(x.numel(), rows.numel() * row_elems);
  cuda::run(cuda::GatherRowsParams{.src = x.data, .index = i32_ptr(rows), .out = out.data, .num_rows = rows.numel(),
                                   .num_src_rows = out.size(0), .row_bytes = row_elems * int64_t(dtype_size(x.dtype)),
                                   .scatter = true},
            stream_);
}

void CudaOps::add(const Tensor& a, const Tensor& b, const Tensor& out) {
  check_device(a, "add");
  DRIFT_CHECK(a.dtype == DType::kBF16 || a.dtype == DType::kF32, "cuda add: {}", a.describe());
  DRIFT_CHECK(b.dtype == a.dtype && out.dtype == a.dtype, "cuda add: {} + {} -> {}", a.describe(), b.describe(),
              out.describe());
  DRIFT_CHECK_EQ(a.numel(), b.numel());
  DRIFT_CHECK_EQ(out.numel(), a.numel());
  cuda::run(cuda::AddParams{.a = a.data, .b = b.data, .out = out.data, .n = a.numel(), .f32 = a.dtype == DType::kF32},
            stream_);
}

namespace {

// An FP8 write: bf16 rows quantized into e4m3 caches with a scale per (token, head) row.
cuda::KvWriteParams fp8_kv_write_params(const WriteKvParams& p) {
  const Tensor &k = p.k, &v = p.v, &k_cache = p.k_cache;
  check_dtype(k, DType::kBF16, "write_kv k (into an FP8 cache)");
  const int64_t num_tokens = p.slot_mapping.numel(), num_slots = k_cache.size(0) * k_cache.size(1);
  const int64_t heads = k_cache.size(2), head_dim = k_cache.size(3);
  auto check_scales = [&](const Tensor& scales, const Tensor& cache, const char* what) {
    check_dtype(cache, DType::kF8E4M3, what);
    check_dtype(scales, DType::kF32, "write_kv scales");
    DRIFT_CHECK(cache.size(2) == heads && cache.size(3) == head_dim && scales.numel() == num_slots * heads,
                "cuda write_kv: cache {} with scales {} (one per [slot, head] row)", cache.describe(), scales.describe());
  };
  check_scales(p.k_scale, k_cache, "write_kv k_cache");
  DRIFT_CHECK_EQ(k.size(0), num_tokens);
  DRIFT_CHECK_EQ(k.numel(), num_tokens * heads * head_dim);
  if (v.defined()) {
    check_scales(p.v_scale, p.v_cache, "write_kv v_cache");
    check_dtype(v, DType::kBF16, "write_kv v (into an FP8 cache)");
    DRIFT_CHECK_EQ(v.numel(), num_tokens * heads * head_dim);
  }
  const int64_t row = heads * head_dim;
  return cuda::KvWriteParams{.k = k.data, .v = v.defined() ? v.data : nullptr,
                             .slot_mapping = i32_ptr(p.slot_mapping), .k_cache = k_cache.data,
                             .v_cache = v.defined() ? p.v_cache.data : nullptr, .num_tokens = num_tokens,
                             .num_slots = num_slots, .k_row_bytes = row, .v_row_bytes = v.defined() ? row : 0,
                             .k_stride_bytes = (p.k_row_stride > 0 ? p.k_row_stride : row) * 2,
                             .v_stride_bytes = (p.v_row_stride > 0 ? p.v_row_stride : row) * 2,
                             .k_scale = p.k_scale.data_as<float>(),
                             .v_scale = v.defined() ? p.v_scale.data_as<float>() : nullptr,
                             .num_heads = int32_t(heads), .head_dim = int32_t(head_dim)};
}

// Shape checks shared by the op and its fused form.
cuda::KvWriteParams kv_write_params(const WriteKvParams& p) {
  const Tensor &k = p.k, &v = p.v, &k_cache = p.k_cache, &v_cache = p.v_cache;
  check_device(k, "write_kv k");
  check_dtype(p.slot_mapping, DType::kI32, "write_kv slot_mapping");
  if (k_cache.dtype == DType::kF8E4M3) return fp8_kv_write_params(p);
  DRIFT_CHECK(k_cache.dtype == k.dtype, "cuda write_kv: k {} into cache {}", k.describe(), k_cache.describe());
  const int64_t num_tokens = p.slot_mapping.numel();
  const int64_t num_slots = k_cache.size(0) * k_cache.size(1);
  const int64_t k_row_bytes = num_tokens > 0 ? int64_t(k.nbytes()) / num_tokens : 0;
  const int64_t elem = int64_t(dtype_size(k.dtype));
  const int64_t k_stride_bytes = p.k_row_stride > 0 ? p.k_row_stride * elem : k_row_bytes;
  DRIFT_CHECK_EQ(k.size(0), num_tokens);
  DRIFT_CHECK_EQ(int64_t(k_cache.nbytes()), num_slots * k_row_bytes);
  DRIFT_CHECK_GE(k_stride_bytes, k_row_bytes);
  int64_t v_row_bytes = 0, v_stride_bytes = 0;
  if (v.defined()) {
    DRIFT_CHECK(v_cache.dtype == v.dtype, "cuda write_kv: v {} into cache {}", v.describe(), v_cache.describe());
    DRIFT_CHECK_EQ(v.size(0), num_tokens);
    v_row_bytes = num_tokens > 0 ? int64_t(v.nbytes()) / num_tokens : 0;
    v_stride_bytes = p.v_row_stride > 0 ? p.v_row_stride * int64_t(dtype_size(v.dtype)) : v_row_bytes;
    DRIFT_CHECK_EQ(int64_t(v_cache.nbytes()), num_slots * v_row_bytes);
    DRIFT_CHECK_GE(v_stride_bytes, v_row_bytes);
  }
  return cuda::KvWriteParams{.k = k.data, .v = v.defined() ? v.data : nullptr,
                                .slot_mapping = i32_ptr(p.slot_mapping), .k_cache = k_cache.data,
                                .v_cache = v.defined() ? v_cache.data : nullptr, .num_tokens = num_tokens,
                                .num_slots = num_slots, .k_row_bytes = k_row_bytes, .v_row_bytes = v_row_bytes,
                                .k_stride_bytes = k_stride_bytes, .v_stride_bytes = v_stride_bytes};
}

}  // namespace

void CudaOps::write_kv(const WriteKvParams& p) {
  if (omitted(OpFamily::kRopeWrite)) return;
  cuda::KvWriteParams kv = kv_write_params(p);
  if (p.k_norm_weight.defined()) {
    // One bf16 row per token, normalised in shared memory on its way to the cache.
    check_dtype(p.k, DType::kBF16, "write_kv k (with a norm)");
    check_dtype(p.k_norm_weight, DType::kBF16, "write_kv k_norm_weight");
    const int64_t row = p.k_cache.size(2) * p.k_cache.size(3);
    DRIFT_CHECK(!p.v.defined() && p.k_norm_weight.numel() <= row && row * 2 <= 48 * 1024,
                "cuda write_kv: a k norm of {} features for rows of {} (no v, rows up to 24k values)",
                p.k_norm_weight.numel(), row);
    kv.num_heads = int32_t(p.k_cache.size(2));
    kv.head_dim = int32_t(p.k_cache.size(3));
    kv.k_norm_weight = bf16_ptr(p.k_norm_weight);
    kv.k_norm_features = int32_t(p.k_norm_weight.numel());
    kv.k_norm_eps = p.k_norm_eps;
  }
  cuda::run(kv, stream_);
}

void CudaOps::rope_write_kv(const Tensor& q, const Tensor& positions, const RopeParams& rope, const WriteKvParams& kv) {
  if (omitted(OpFamily::kRopeWrite)) return;
  DRIFT_CHECK(!kv.k_norm_weight.defined(), "cuda rope_write_kv: a k norm goes through write_kv");
  DRIFT_CHECK_EQ(kv.slot_mapping.numel(), positions.numel());
  cuda::run(rotary_params(q, kv.k, positions, rope), kv_write_params(kv), stream_);
}

cuda::AttentionParams cuda::cache_attention_params(const CacheAttention& c, const char* op) {
  auto name = [&](const char* tensor) { return fmt::format("{} {}", op, tensor); };
  check_dtype(c.q, DType::kBF16, name("q").c_str());
  const bool latent = !c.v_cache.defined();  // MLA: V is the first out.size(2) features of each k_cache row
  const bool fp8 = c.k_cache.dtype == DType::kF8E4M3;
  const DType cache_dtype = fp8 ? DType::kF8E4M3 : DType::kBF16;
  check_dtype(c.k_cache, cache_dtype, name("k_cache").c_str());
  if (!latent) check_dtype(c.v_cache, cache_dtype, name("v_cache").c_str());
  if (fp8) {
    // A latent cache (MLA) has one scale per row, for K and V alike.
    check_dtype(c.k_scale, DType::kF32, name("k_scale").c_str());
    if (!latent) check_dtype(c.v_scale, DType::kF32, name("v_scale").c_str());
    const int64_t rows = c.k_cache.numel() / c.k_cache.size(3);
    DRIFT_CHECK(c.k_scale.numel() == rows && (latent || c.v_scale.numel() == rows),
                "cuda {}: FP8 cache {} needs a scale per row, got {} and {}", op, c.k_cache.describe(),
                c.k_scale.describe(), latent ? "none for V" : c.v_scale.describe());
  }
  check_dtype(c.out, DType::kBF16, name("out").c_str());
  check_dtype(c.block_tables, DType::kI32, name("block_tables").c_str());
  check_dtype(c.query_start, DType::kI32, name("query_start").c_str());
  const int32_t num_tokens = int32_t(c.q.size(0)), num_heads = int32_t(c.q.size(1)), head_dim = int32_t(c.q.size(2));
  const int32_t num_seqs = int32_t(c.query_start.numel()) - 1;
  const int32_t head_dim_v = latent ? int32_t(c.out.size(-1)) : head_dim;
  DRIFT_CHECK_EQ(c.k_cache.size(3), int64_t(head_dim));
  if (latent) {
    DRIFT_CHECK(c.k_cache.size(2) == 1 && head_dim_v <= head_dim,
                "cuda {}: a latent cache {} (one row per token) read as values of width {}", op,
                c.k_cache.describe(), head_dim_v);
  } else {
    DRIFT_CHECK_EQ(c.v_cache.size(3), int64_t(head_dim));  // head_dim_v != head_dim: not on this backend yet
  }
  DRIFT_CHECK_EQ(c.out.numel(), int64_t(num_tokens) * num_heads * head_dim_v);
  DRIFT_CHECK(c.q_row_stride == 0 || c.q_row_stride >= int64_t(num_heads) * head_dim,
              "cuda {}: q row stride {} under a row of {} heads x {}", op, c.q_row_stride, num_heads, head_dim);
  DRIFT_CHECK_EQ(c.block_tables.size(0), int64_t(num_seqs));
  return {.q = bf16_ptr(c.q), .k_cache = fp8 ? nullptr : bf16_ptr(c.k_cache),
          .v_cache = latent || fp8 ? nullptr : bf16_ptr(c.v_cache),
          .k_cache8 = fp8 ? c.k_cache.data_as<uint8_t>() : nullptr, .v_cache8 = fp8 ? c.v_cache.data_as<uint8_t>() : nullptr,
          .k_scale = fp8 ? c.k_scale.data_as<float>() : nullptr, .v_scale = fp8 ? c.v_scale.data_as<float>() : nullptr,
          .out = bf16_mut(c.out), .block_tables = i32_ptr(c.block_tables), .query_start = i32_ptr(c.query_start),
          .q_row_stride = c.q_row_stride > 0 ? c.q_row_stride : int64_t(num_heads) * head_dim,
          .num_tokens = num_tokens, .num_seqs = num_seqs, .num_heads = num_heads,
          .num_kv_heads = int32_t(c.k_cache.size(2)), .head_dim = head_dim, .head_dim_v = head_dim_v,
          .block_size = int32_t(c.k_cache.size(1)), .max_blocks_per_seq = int32_t(c.block_tables.size(1)),
          .num_splits = 1, .scale = c.scale};
}

namespace {

// Shape and dtype checks of paged_attention, then its kernel parameters (num_splits 1).
cuda::AttentionParams attention_params(const PagedAttentionParams& p) {
  cuda::AttentionParams a = cuda::cache_attention_params(
      {.q = p.q, .k_cache = p.k_cache, .v_cache = p.v_cache, .out = p.out, .block_tables = p.block_tables,
       .query_start = p.query_start, .k_scale = p.k_scale, .v_scale = p.v_scale, .q_row_stride = p.q_row_stride,
       .scale = p.scale},
      "paged_attention");
  check_dtype(p.context_lens, DType::kI32, "paged_attention context_lens");
  DRIFT_CHECK_EQ(p.context_lens.numel(), int64_t(a.num_seqs));
  if (p.sinks.defined()) check_dtype(p.sinks, DType::kF32, "paged_attention sinks");
  if (p.q_positions.defined()) {
    check_dtype(p.q_positions, DType::kI32, "paged_attention q_positions");
    DRIFT_CHECK_EQ(p.q_positions.numel(), int64_t(a.num_tokens));
  }
  if (p.tree_mask.defined()) {
    check_dtype(p.tree_mask, DType::kU32, "paged_attention tree_mask");
    DRIFT_CHECK_EQ(p.tree_mask.size(0), int64_t(a.num_tokens));
  }
  DRIFT_CHECK(p.block_positions.defined() == p.view_blocks.defined(),
              "cuda paged_attention: block_positions and view_blocks come together");
  if (p.block_positions.defined()) {
    check_dtype(p.block_positions, DType::kI32, "paged_attention block_positions");
    check_dtype(p.view_blocks, DType::kI32, "paged_attention view_blocks");
    DRIFT_CHECK_EQ(p.block_positions.numel(), p.block_tables.numel());
    DRIFT_CHECK_EQ(p.view_blocks.numel(), int64_t(a.num_seqs));
  }
  a.context_lens = i32_ptr(p.context_lens);
  a.q_positions = p.q_positions.defined() ? i32_ptr(p.q_positions) : nullptr;
  a.tree_mask = p.tree_mask.defined() ? p.tree_mask.data_as<uint32_t>() : nullptr;
  a.block_positions = p.block_positions.defined() ? i32_ptr(p.block_positions) : nullptr;
  a.view_blocks = p.view_blocks.defined() ? i32_ptr(p.view_blocks) : nullptr;
  a.sinks = p.sinks.defined() ? p.sinks.data_as<float>() : nullptr;
  a.mask_words = p.tree_mask.defined() ? int32_t(p.tree_mask.size(1)) : 0;
  a.sliding_window = p.sliding_window;
  return a;
}

// The most keys one query of the step may attend to: its list (sparse), else its table's slots.
int64_t most_keys(const cuda::AttentionParams& a) {
  return a.selected != nullptr ? int64_t(a.top_k) : int64_t(a.max_blocks_per_seq) * a.block_size;
}

}  // namespace

bool CudaOps::fp8_on_tensor_cores(const cuda::AttentionParams& a) const {
  return options_.fp8_tensor_cores && cuda::decode_attention_fp8_supports(a);
}

int32_t CudaOps::decode_splits(const cuda::AttentionParams& a) const {
  // The split count decode_split_cost ranks first for the longest context the table allows (ties to fewer
  // splits: less to merge), at least 32 keys per split, at most 64 (or CudaOptions::decode_max_splits), and no
  // more partial results than the workspace holds. Only shapes decide: the launch stays capturable.
  const int64_t max_keys = most_keys(a);
  const int64_t per_split_floats = int64_t(a.num_tokens) * a.num_heads * (a.head_dim + 2);
  const int64_t cap = options_.decode_max_splits > 0 ? std::min(options_.decode_max_splits, cuda::kDecodeMaxSplits)
                                                      : cuda::kDecodeMaxSplits;
  int64_t max_splits = std::min<int64_t>((max_keys + 31) / 32, cap);
  max_splits = std::min<int64_t>(max_splits, int64_t(options_.attention_workspace_bytes / 4) / per_split_floats);
  const int32_t ctas_per_split = a.num_tokens * a.num_kv_heads * a.head_slices;
  return cuda::cheapest_decode_splits(ctas_per_split, a.split_slots, int32_t(max_keys), int32_t(max_splits));
}

int32_t CudaOps::decode_split_slots(const cuda::AttentionParams& a) const {
  return num_sms_ * (fp8_on_tensor_cores(a)
                         ? cuda::decode_attention_fp8_ctas_per_sm(a.head_dim)
                         : cuda::decode_attention_ctas_per_sm(a.head_dim, a.num_heads / a.head_slices, a.num_kv_heads));
}

int32_t CudaOps::decode_head_slices(const cuda::AttentionParams& a) const {
  // Few (token, kv head) pairs (batch 1: 8 for GPT-OSS and Llama) give the GPU a few dozen warps, each running
  // every head of its group on one chunk after another. Halve the heads a CTA takes while it keeps two and the
  // pairs' CTAs still fit one an SM.
  if (!options_.decode_head_slices || fp8_on_tensor_cores(a)) return 1;
  const int64_t group = a.num_heads / a.num_kv_heads, pairs = int64_t(a.num_tokens) * a.num_kv_heads;
  int32_t slices = 1;
  while (group % (2 * slices) == 0 && group / (2 * slices) >= 2 && pairs * 2 * slices <= num_sms_) slices *= 2;
  return slices;
}

int32_t CudaOps::mla_splits(const cuda::AttentionParams& a, cuda::MlaKernel kernel) const {
  // The split count with the least time in units of latent bytes per SM: waves of CTAs times the rows a
  // split reads, plus one query token's partial results (written and read once by the merge) spread over
  // the SMs. The batch enters only through the waves, so steps that fit one wave split alike whatever
  // their batch (a graph's padded bucket and the eager step it stands for give the same bits). At least 64
  // keys per split, at most kMlaMaxSplits, no more partial results than the workspace holds. Only shapes
  // decide: the launch stays capturable.
  const int64_t heads_per_cta = cuda::mla_attention_heads_per_cta(kernel, a.num_heads);
  const int64_t ctas = int64_t(a.num_tokens) * ((a.num_heads + heads_per_cta - 1) / heads_per_cta);
  const int64_t slots = int64_t(num_sms_) * cuda::mla_attention_ctas_per_sm(kernel);
  const int64_t max_keys = most_keys(a);
  const int64_t per_split_floats = int64_t(a.num_tokens) * a.num_heads * (a.head_dim_v + 2);
  const int64_t cap = options_.mla_max_splits > 0 ? std::min(options_.mla_max_splits, cuda::kMlaMaxSplits)
                                                   : cuda::kMlaMaxSplits;
  const int64_t max_splits = std::max<int64_t>(
      1, std::min<int64_t>({(max_keys + 63) / 64, cap, int64_t(options_.attention_workspace_bytes / 4) / per_split_floats}));
  int64_t splits = 1;
  double best = -1.0;
  for (int64_t s = 1; s <= max_splits; ++s) {
    const int64_t waves = (ctas * s + slots - 1) / slots;
    const double cost = double(waves) * double((max_keys + s - 1) / s + 16) * a.head_dim * 2 +
                        double(s) * double(a.num_heads) * double(a.head_dim_v + 2) * 8.0 / double(num_sms_);
    if (best < 0 || cost < best) {
      best = cost;
      splits = s;
    }
  }
  return int32_t(splits);
}

void CudaOps::paged_attention(const PagedAttentionParams& p) {
  launch_attention(attention_params(p), p.max_query_len);
}

void CudaOps::launch_attention(cuda::AttentionParams a, int32_t max_query_len) {
  if (omitted(OpFamily::kAttention)) return;
  if (a.num_tokens == 0) return;
  if (a.v_cache == nullptr && a.v_cache8 == nullptr) {  // MLA's shared latent
    DRIFT_CHECK(cuda::mla_attention_supports(a.head_dim, a.head_dim_v, a.num_kv_heads),
                "cuda paged_attention: latent rows of {} read as values of {} are not supported", a.head_dim,
                a.head_dim_v);
    const cuda::MlaKernel kernel = cuda::mla_attention_kernel(
        a, {.tensor_cores = options_.mla_tensor_cores, .wgmma = options_.mla_wgmma});
    a.num_splits = mla_splits(a, kernel);
    if (a.num_splits > 1) {
      a.partial_out = static_cast<float*>(attention_workspace_.get());
      a.partial_lse = a.partial_out + int64_t(a.num_tokens) * a.num_heads * a.num_splits * a.head_dim_v;
    }
    return cuda::run_mla_attention(a, kernel, stream_);
  }
  const bool decode_ok = cuda::decode_attention_supports(a.head_dim, a.num_heads, a.num_kv_heads);
  const bool prefill_ok = cuda::prefill_attention_supports(a.head_dim, a.num_heads, a.num_kv_heads);
  DRIFT_CHECK(decode_ok || prefill_ok, "cuda paged_attention: head_dim {} with {} heads over {} kv heads is not supported",
              a.head_dim, a.num_heads, a.num_kv_heads);
  DRIFT_CHECK(a.selected == nullptr || decode_ok,
              "cuda sparse_paged_attention: head_dim {} with {} heads over {} kv heads is not supported", a.head_dim,
              a.num_heads, a.num_kv_heads);
  // One new token per sequence (decode), a sparse step (each query its own keys), a few tokens a sequence
  // where the prefill kernel would not fill one wave (CudaOptions::split_kv_max_tokens_per_seq), or a shape
  // only the per-token kernel covers: split-KV decoding.
  const bool few_per_seq = max_query_len > 0 && max_query_len <= options_.split_kv_max_tokens_per_seq &&
                           prefill_ok && cuda::prefill_attention_ctas(a) < num_sms_;
  const bool prefill =
      a.selected == nullptr && (!decode_ok || (a.num_tokens != a.num_seqs && prefill_ok && !few_per_seq));
  if (prefill) return cuda::run_prefill_attention(a, stream_);
  a.head_slices = decode_head_slices(a);
  a.split_slots = decode_split_slots(a);
  a.num_splits = decode_splits(a);
  if (a.num_splits > 1) {
    a.partial_out = static_cast<float*>(attention_workspace_.get());
    a.partial_lse = a.partial_out + int64_t(a.num_tokens) * a.num_heads * a.num_splits * a.head_dim;
    if (int64_t(a.num_tokens) * a.num_kv_heads * a.head_slices <= kMaxSplitCounters)
      a.split_counters = static_cast<int32_t*>(split_counters_.get());
  }
  cuda::run_decode_attention(
      a, fp8_on_tensor_cores(a) ? cuda::DecodeKernel::kTensorCores : cuda::DecodeKernel::kCudaCores, stream_);
}

void CudaOps::concat(const Tensor& a, const Tensor& b, const Tensor& out) {
  check_device(a, "concat a");
  check_device(b, "concat b");
  DRIFT_CHECK(b.dtype == a.dtype && out.dtype == a.dtype, "cuda concat: {} and {} -> {}", a.describe(), b.describe(),
              out.describe());
  const int64_t rows = a.size(0);
  DRIFT_CHECK_EQ(b.size(0), rows);
  DRIFT_CHECK_EQ(out.numel(), a.numel() + b.numel());
  if (rows == 0) return;
  cuda::run(cuda::ConcatParams{.a = a.data, .b = b.data, .out = out.data, .num_rows = rows,
                               .a_row_bytes = int64_t(a.nbytes()) / rows, .b_row_bytes = int64_t(b.nbytes()) / rows},
            stream_);
}

void CudaOps::batched_linear(const Tensor& x, const Tensor& w, const Tensor& out) {
  if (omitted(OpFamily::kLinears)) return;
  check_dtype(x, DType::kBF16, "batched_linear x");
  check_dtype(w, DType::kBF16, "batched_linear weight");
  check_dtype(out, DType::kBF16, "batched_linear out");
  const int64_t t = x.size(0), b = x.size(1), k = x.size(2), n = w.size(1);
  DRIFT_CHECK_EQ(w.size(0), b);
  DRIFT_CHECK_EQ(w.size(2), k);
  DRIFT_CHECK_EQ(out.numel(), t * b * n);
  cuda::run(cuda::BatchedGemmParams{.x = bf16_ptr(x), .w = bf16_ptr(w), .out = bf16_mut(out), .m = t, .n = n, .k = k,
                                    .batch = int32_t(b), .lt = lt_.get()},
            stream_);
}

void CudaOps::copy(const Tensor& src, const Tensor& dst) {
  check_device(src, "copy src");
  check_device(dst, "copy dst");
  DRIFT_CHECK_EQ(src.nbytes(), dst.nbytes());
  if (src.nbytes() == 0) return;
  DRIFT_CUDA_CHECK(cudaMemcpyAsync(dst.data, src.data, src.nbytes(), cudaMemcpyDeviceToDevice, stream_));
}

Status CudaOps::check_attention(const AttentionShape& s) {
  if (s.kv_dtype != DType::kBF16 && s.kv_dtype != DType::kF8E4M3)
    return unsupported(fmt::format("the cuda backend keeps the KV cache in BF16 or F8_E4M3, not {}", dtype_name(s.kv_dtype)));
  if (s.kv_dtype == DType::kF8E4M3 && !s.shared_kv &&
      !cuda::decode_attention_supports(int32_t(s.head_dim), int32_t(s.num_heads), int32_t(s.num_kv_heads)))
    return unsupported(fmt::format("an F8_E4M3 KV cache on cuda needs head_dim a multiple of 8 up to 128 and at most "
                                   "8 query heads per kv head; this layer has head_dim {}, {} heads over {} kv heads",
                                   s.head_dim, s.num_heads, s.num_kv_heads));
  if (s.sparse_top_k > 0 && s.kv_dtype != DType::kBF16)
    return unsupported("the cuda sparse attention (DSA-lite) reads a BF16 KV cache; use --kv-cache-dtype bf16");
  if (s.sparse_top_k > 0 && !cuda::indexer_supports(int32_t(s.index_heads), int32_t(s.index_dim)))
    return unsupported(fmt::format("the cuda DSA-lite indexer takes keys of a multiple of 8 features up to 128 and "
                                   "heads x features up to 1024; this layer's indexer has {} heads of {}",
                                   s.index_heads, s.index_dim));
  if (s.sparse_top_k > 0 && (s.sinks || s.sliding_window > 0))
    return unsupported("the cuda sparse attention (DSA-lite) takes no sink logits and no sliding window");
  if (s.sparse_top_k > 0 && !s.shared_kv &&
      !cuda::decode_attention_supports(int32_t(s.head_dim), int32_t(s.num_heads), int32_t(s.num_kv_heads)))
    return unsupported(fmt::format("the cuda sparse attention (DSA-lite) takes head_dim a multiple of 8 up to 128 and "
                                   "at most 8 query heads per kv head; this layer has head_dim {}, {} heads over {} "
                                   "kv heads",
                                   s.head_dim, s.num_heads, s.num_kv_heads));
  if (s.shared_kv) {
    if (!cuda::mla_attention_supports(int32_t(s.head_dim), int32_t(s.head_dim_v), int32_t(s.num_kv_heads)))
      return unsupported(fmt::format("the cuda latent attention (MLA) takes one latent row per token of a width that "
                                     "is a multiple of 8 up to 1024, values its first features (a multiple of 4); this layer has {} "
                                     "kv heads of width {}, values of {}",
                                     s.num_kv_heads, s.head_dim, s.head_dim_v));
    return Status::Ok();
  }
  if (s.head_dim_v != s.head_dim)
    return unsupported(fmt::format("attention with value width {} != key width {} is not on the cuda backend",
                                   s.head_dim_v, s.head_dim));
  const int32_t d = int32_t(s.head_dim), h = int32_t(s.num_heads), hk = int32_t(s.num_kv_heads);
  if (!cuda::decode_attention_supports(d, h, hk) && !cuda::prefill_attention_supports(d, h, hk))
    return unsupported(fmt::format("the cuda attention kernels take head_dim a multiple of 8 up to 128 and at most 64 "
                                   "query heads per kv head; this layer has head_dim {}, {} heads over {} kv heads",
                                   d, h, hk));
  return Status::Ok();
}

}  // namespace drift::backend
