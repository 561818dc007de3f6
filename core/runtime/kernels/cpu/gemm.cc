#include "core/runtime/kernels/cpu/gemm.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <oneapi/dnnl/dnnl.hpp>
#include <tuple>
#include <vector>

#include "core/runtime/clock.h"
#include "core/runtime/kernels/cpu/convert.h"
#include "core/runtime/kernels/cpu/parallel.h"

namespace tally::cpu {
namespace {

// One oneDNN primitive build at a time in the process: its primitive cache and JIT
// registry are shared by every thread, and its own locks are invisible to
// ThreadSanitizer (an uninstrumented library), which would otherwise report the ranks'
// first builds.
std::mutex building;

[[noreturn]] void Fail(const char* what, const char* why) {
  // Only shapes the model has validated reach a matmul: a failure here is a bug in tally or
  // a broken oneDNN installation, not bad input.
  std::fprintf(stderr, "[kernels] oneDNN %s failed: %s\n", what, why);
  std::abort();
}

// oneDNN's matmul for bf16 operands, one primitive per shape and thread count (a primitive
// divides its work for the threads there were when it was built), built on first use by
// the calling thread and kept (a model has a handful of shapes). oneDNN 2.6 has one from
// AVX-512 on (with AVX512-BF16 or AMX instructions where they exist, converting
// otherwise) and none on an AVX2-only CPU: Run then says false, and remembers it.
class BF16Matmuls {
 public:
  bool Run(Trans ta, Trans tb, int m, int n, int k, float alpha, const BFloat16* a, int lda,
           const BFloat16* b, int ldb, float beta, float* c, int ldc, const float* bias) {
    const Shape shape{ta == Trans::kYes, tb == Trans::kYes, bias != nullptr, m, n, k, lda, ldb,
                      ldc, alpha, beta, omp_get_max_threads()};
    auto it = cache_.find(shape);
    if (it == cache_.end()) {
      if (cache_.size() >= 256) cache_.clear();
      it = cache_.emplace(shape, Build(shape)).first;
    }
    if (!it->second) return false;
    Entry& e = *it->second;
    e.a.set_data_handle(const_cast<BFloat16*>(a));
    e.b.set_data_handle(const_cast<BFloat16*>(b));
    e.c.set_data_handle(c);
    if (bias != nullptr) {
      e.bias.set_data_handle(const_cast<float*>(bias));
      e.matmul.execute(stream_, {{DNNL_ARG_SRC, e.a},
                                 {DNNL_ARG_WEIGHTS, e.b},
                                 {DNNL_ARG_BIAS, e.bias},
                                 {DNNL_ARG_DST, e.c}});
    } else {
      e.matmul.execute(stream_,
                       {{DNNL_ARG_SRC, e.a}, {DNNL_ARG_WEIGHTS, e.b}, {DNNL_ARG_DST, e.c}});
    }
    return true;
  }

 private:
  struct Shape {
    bool ta, tb, bias;
    int m, n, k, lda, ldb, ldc;
    float alpha, beta;
    int threads;
    bool operator<(const Shape& o) const {
      return std::tie(ta, tb, bias, m, n, k, lda, ldb, ldc, alpha, beta, threads) <
             std::tie(o.ta, o.tb, o.bias, o.m, o.n, o.k, o.lda, o.ldb, o.ldc, o.alpha, o.beta,
                      o.threads);
    }
  };
  struct Entry {
    dnnl::matmul matmul;
    dnnl::memory a, b, c, bias;
  };

  std::optional<Entry> Build(const Shape& s) {
    using dnnl::memory;
    // op(A) (m, k) and op(B) (k, n) as strides over the row-major storage.
    const memory::desc a({s.m, s.k}, memory::data_type::bf16,
                         s.ta ? memory::dims{1, s.lda} : memory::dims{s.lda, 1});
    const memory::desc b({s.k, s.n}, memory::data_type::bf16,
                         s.tb ? memory::dims{1, s.ldb} : memory::dims{s.ldb, 1});
    const memory::desc c({s.m, s.n}, memory::data_type::f32, memory::dims{s.ldc, 1});
    // The bias, one per column, added to every row.
    const memory::desc bias = s.bias ? memory::desc({1, s.n}, memory::data_type::f32,
                                                    memory::dims{s.n, 1})
                                     : memory::desc();
    dnnl::primitive_attr attr;
    if (s.alpha != 1.0f) attr.set_output_scales(0, {s.alpha});
    if (s.beta != 0.0f) {
      dnnl::post_ops sum;
      sum.append_sum(s.beta);
      attr.set_post_ops(sum);
    }
    std::lock_guard<std::mutex> lock(building);
    try {
      dnnl::matmul::primitive_desc pd(
          s.bias ? dnnl::matmul::desc(a, b, bias, c) : dnnl::matmul::desc(a, b, c), attr, engine_);
      return Entry{dnnl::matmul(pd), memory(a, engine_, nullptr), memory(b, engine_, nullptr),
                   memory(c, engine_, nullptr),
                   s.bias ? memory(bias, engine_, nullptr) : memory()};
    } catch (const dnnl::error&) {
      return std::nullopt;  // no bf16 matmul on this CPU
    }
  }

  dnnl::engine engine_{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream_{engine_};
  std::map<Shape, std::optional<Entry>> cache_;
};

std::atomic<bool> timing{false};
std::atomic<int64_t> matmul_nanos{0};

// Adds one Gemm call's wall time to matmul_nanos while timing is on. Only the outermost
// call on a thread counts (the bf16 Gemm falls back on the float one on AVX2-only CPUs).
class MatmulTimer {
 public:
  MatmulTimer()
      : start_(depth_++ == 0 && timing.load(std::memory_order_relaxed) ? MonotonicNanos() : -1) {}
  ~MatmulTimer() {
    --depth_;
    if (start_ < 0) return;
    const int64_t nanos = MonotonicNanos() - start_;
    matmul_nanos.fetch_add(omp_in_parallel() ? nanos / omp_get_num_threads() : nanos,
                           std::memory_order_relaxed);
  }
  MatmulTimer(const MatmulTimer&) = delete;
  MatmulTimer& operator=(const MatmulTimer&) = delete;

 private:
  static thread_local int depth_;
  const int64_t start_;
};
thread_local int MatmulTimer::depth_ = 0;

// rows x cols of bf16 values (`ld` between rows) widened, exactly, into the calling
// thread's fp32 buffer `slot` (0 or 1), contiguous.
const float* Widened(int slot, const BFloat16* from, int rows, int cols, int ld) {
  thread_local std::vector<float> buffers[2];
  std::vector<float>& buffer = buffers[slot];
  if (buffer.size() < size_t(rows) * size_t(cols)) buffer.resize(size_t(rows) * size_t(cols));
  if (ld == cols) {
    Widen(buffer.data(), from, int64_t(rows) * cols);
  } else {
    for (int r = 0; r < rows; ++r) Widen(buffer.data() + size_t(r) * cols, from + int64_t(r) * ld, cols);
  }
  return buffer.data();
}

}  // namespace

void Gemm(Trans ta, Trans tb, int m, int n, int k, float alpha, const float* a, int lda,
          const float* b, int ldb, float beta, float* c, int ldc) {
  const MatmulTimer timer;
  UseIntraOpThreads();
  const dnnl_status_t status =
      dnnl_sgemm(ta == Trans::kYes ? 'T' : 'N', tb == Trans::kYes ? 'T' : 'N', m, n, k, alpha, a,
                 lda, b, ldb, beta, c, ldc);
  if (status != dnnl_success) Fail("sgemm", "invalid arguments");
}

void Gemm(Trans ta, Trans tb, int m, int n, int k, double alpha, const double* a, int lda,
          const double* b, int ldb, double beta, double* c, int ldc) {
  cblas_dgemm(CblasRowMajor, ta == Trans::kYes ? CblasTrans : CblasNoTrans,
              tb == Trans::kYes ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta,
              c, ldc);
}

void Gemm(Trans ta, Trans tb, int m, int n, int k, float alpha, const BFloat16* a, int lda,
          const BFloat16* b, int ldb, float beta, float* c, int ldc, const float* bias) {
  const MatmulTimer timer;
  UseIntraOpThreads();
  thread_local BF16Matmuls matmuls;
  if (matmuls.Run(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, bias)) return;
  // No bf16 matmul here: the same products (a bf16 x bf16 product is exact in fp32),
  // summed in fp32 by sgemm.
  const int a_rows = ta == Trans::kYes ? k : m, a_cols = ta == Trans::kYes ? m : k;
  const int b_rows = tb == Trans::kYes ? n : k, b_cols = tb == Trans::kYes ? k : n;
  if (bias != nullptr) {  // C starts from the bias (beta is 0 with one)
    for (int r = 0; r < m; ++r) std::copy(bias, bias + n, c + int64_t(r) * ldc);
    beta = 1.0f;
  }
  Gemm(ta, tb, m, n, k, alpha, Widened(0, a, a_rows, a_cols, lda), a_cols,
       Widened(1, b, b_rows, b_cols, ldb), b_cols, beta, c, ldc);
}

void RoundToBF16(BFloat16* to, const float* from, int64_t rows, int64_t cols, int64_t ld) {
  // Blocks of about 2^16 values on the matmuls' threads: of the values themselves when
  // they are contiguous (a flat conversion is one row), else of whole rows. Each element
  // is rounded on its own, so the result does not depend on how many threads.
  constexpr int64_t kBlock = int64_t(1) << 16;
  UseIntraOpThreads();
  if (ld == cols) {
    const int64_t n = rows * cols, blocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (blocks > 1)
    for (int64_t i = 0; i < blocks; ++i) {
      Round(to + i * kBlock, from + i * kBlock, std::min(kBlock, n - i * kBlock));
    }
    return;
  }
  const int64_t block = std::max<int64_t>(1, kBlock / std::max<int64_t>(1, cols));
  const int64_t blocks = (rows + block - 1) / block;
#pragma omp parallel for schedule(static) if (blocks > 1)
  for (int64_t i = 0; i < blocks; ++i) {
    const int64_t end = std::min(rows, (i + 1) * block);
    for (int64_t r = i * block; r < end; ++r) Round(to + r * cols, from + r * ld, cols);
  }
}

BFloat16* BF16Scratch(int slot, int64_t n) {
  thread_local std::vector<BFloat16> buffers[4];
  std::vector<BFloat16>& buffer = buffers[slot];
  if (int64_t(buffer.size()) < n) buffer.resize(size_t(n));
  return buffer.data();
}

void TimeMatmuls(bool on) { timing.store(on, std::memory_order_relaxed); }

double MatmulSeconds() { return double(matmul_nanos.load(std::memory_order_relaxed)) * 1e-9; }

const char* MatmulIsa() {
  switch (dnnl_get_effective_cpu_isa()) {
    case dnnl_cpu_isa_sse41: return "sse41";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    default: return "other";
  }
}

void SetBlasThreads(int threads) {
  SetIntraOpThreads(threads);
  openblas_set_num_threads(IntraOpThreads());
}

}  // namespace tally::cpu
