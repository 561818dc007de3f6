#include "core/runtime/kernels/cpu/linear.h"

#include <algorithm>

#include "core/runtime/kernels/cpu/cpu_clones.h"
#include "core/runtime/kernels/cpu/parallel.h"

namespace tally::cpu {
namespace {

// The layer's gradients with its matmul operands of type O (T, or bf16 roundings of them).
template <typename O, typename T, typename X, typename W>
void Backward(T* dx, T* dw, const T* dy, const X* x, const W* w, int n, int c, int oc,
              bool accumulate_dx) {
  const O* g = AsOperand<O>(2, dy, n, oc);
  if (dx != nullptr) {
    Gemm(Trans::kNo, Trans::kNo, n, c, oc, T(1), g, oc, AsOperand<O>(1, w, oc, c), c,
         accumulate_dx ? T(1) : T(0), dx, c);
  }
  if (dw != nullptr) {
    Gemm(Trans::kYes, Trans::kNo, oc, c, n, T(1), g, oc, AsOperand<O>(0, x, n, c), c, T(1), dw, c);
  }
}

// out[j] += Σ_i rows[i·ld + j] for j in [first, last), each column over the rows in order
// (row after row: the rows stream through once). The float version, the training path's,
// for AVX-512, AVX2 and the baseline (cpu_clones.h).
template <typename T>
[[gnu::always_inline]] inline void ColumnSums(T* out, const T* rows, int n, int64_t ld,
                                              int64_t first, int64_t last) {
  for (int i = 0; i < n; ++i) {
    const T* row = rows + static_cast<long>(i) * ld;
    for (int64_t j = first; j < last; ++j) out[j] += row[j];
  }
}
TALLY_CPU_CLONES void AddColumnSums(float* out, const float* rows, int n, int64_t ld,
                                    int64_t first, int64_t last) {
  ColumnSums(out, rows, n, ld, first, last);
}
void AddColumnSums(double* out, const double* rows, int n, int64_t ld, int64_t first,
                   int64_t last) {
  ColumnSums(out, rows, n, ld, first, last);
}

}  // namespace

template <typename T, typename X, typename W>
void LinearForward(T* y, const X* x, const W* w, const T* b, int n, int c, int oc,
                   MatmulInputs inputs) {
  if constexpr (std::is_same_v<T, float>) {
    if (inputs == MatmulInputs::kBF16) {
      // The bf16 matmul adds the bias as it writes y.
      return Gemm(Trans::kNo, Trans::kYes, n, oc, c, 1.0f, AsOperand<BFloat16>(0, x, n, c), c,
                  AsOperand<BFloat16>(1, w, oc, c), c, 0.0f, y, oc, b);
    }
  }
  if constexpr (std::is_same_v<T, X> && std::is_same_v<T, W>) {
    // Start every row from the bias, then let the GEMM add x·Wᵀ on top (beta = 1).
    ParallelFor(n, GrainFor(oc), [&](int64_t first, int64_t last) {
      for (int64_t i = first; i < last; ++i) {
        T* row = y + i * oc;
        if (b != nullptr) {
          std::copy(b, b + oc, row);
        } else {
          std::fill(row, row + oc, T(0));
        }
      }
    });
    Gemm(Trans::kNo, Trans::kYes, n, oc, c, T(1), x, c, w, c, T(1), y, oc);
  } else {
    CHECK(false) << "a bf16 x or w needs bf16 matmul inputs";
  }
}

template <typename T, typename X, typename W>
void LinearBackward(T* dx, T* dw, T* db, const T* dy, const X* x, const W* w, int n, int c, int oc,
                    bool accumulate_dx, MatmulInputs inputs) {
  bool bf16 = false;
  if constexpr (std::is_same_v<T, float>) {
    bf16 = inputs == MatmulInputs::kBF16;
    if (bf16) Backward<BFloat16>(dx, dw, dy, x, w, n, c, oc, accumulate_dx);
  }
  if constexpr (std::is_same_v<T, X> && std::is_same_v<T, W>) {
    if (!bf16) Backward<T>(dx, dw, dy, x, w, n, c, oc, accumulate_dx);
  } else {
    CHECK(bf16) << "a bf16 x or w needs bf16 matmul inputs";
  }
  if (db != nullptr) {  // by columns, each summed over the rows in order
    ParallelFor(oc, GrainFor(n), [&](int64_t first, int64_t last) {
      AddColumnSums(db, dy, n, oc, first, last);
    });
  }
}

// x and w each fp32 or bf16 (fp32 sums); double for the tests.
template void LinearForward(float*, const float*, const float*, const float*, int, int, int,
                            MatmulInputs);
template void LinearForward(float*, const float*, const BFloat16*, const float*, int, int, int,
                            MatmulInputs);
template void LinearForward(float*, const BFloat16*, const float*, const float*, int, int, int,
                            MatmulInputs);
template void LinearForward(float*, const BFloat16*, const BFloat16*, const float*, int, int, int,
                            MatmulInputs);
template void LinearBackward(float*, float*, float*, const float*, const float*, const float*,
                             int, int, int, bool, MatmulInputs);
template void LinearBackward(float*, float*, float*, const float*, const float*, const BFloat16*,
                             int, int, int, bool, MatmulInputs);
template void LinearBackward(float*, float*, float*, const float*, const BFloat16*, const float*,
                             int, int, int, bool, MatmulInputs);
template void LinearBackward(float*, float*, float*, const float*, const BFloat16*, const BFloat16*,
                             int, int, int, bool, MatmulInputs);
template void LinearForward(double*, const double*, const double*, const double*, int, int, int,
                            MatmulInputs);
template void LinearBackward(double*, double*, double*, const double*, const double*,
                             const double*, int, int, int, bool, MatmulInputs);

}  // namespace tally::cpu
