#include "core/runtime/kernels/cpu/layernorm.h"

#include <cmath>

#include "core/runtime/dtype.h"
#include "core/runtime/kernels/cpu/cpu_clones.h"
#include "core/runtime/kernels/cpu/parallel.h"
#include "core/runtime/kernels/cpu/store.h"

namespace tally::cpu {
namespace {

// A row's mean and variance are sums over its channels in order, a chain of dependent
// additions. R rows at a time keep R chains in flight (each row still summed in order, so
// the values are those of one row at a time), which the processor overlaps.
constexpr int kRows = 8;

// Rows [first, first + R) of LayerNormForward. Always inlined, so that each clone below
// compiles it for its own target.
template <int R, typename T, typename Y>
[[gnu::always_inline]] inline void ForwardRows(Y* y, T* mean, T* rstd, const T* x, const T* w,
                                               const T* b, int64_t first, int c) {
  const T* xr = x + first * c;
  T sum[R] = {}, m[R], var[R] = {};
  for (int j = 0; j < c; ++j) {
    for (int r = 0; r < R; ++r) sum[r] += xr[r * c + j];
  }
  for (int r = 0; r < R; ++r) m[r] = sum[r] / c;
  for (int j = 0; j < c; ++j) {
    for (int r = 0; r < R; ++r) var[r] += (xr[r * c + j] - m[r]) * (xr[r * c + j] - m[r]);
  }
  for (int r = 0; r < R; ++r) {
    const T s = T(1) / std::sqrt(var[r] / c + T(kLayerNormEps));
    const T* xi = xr + r * c;
    Y* yi = y + (first + r) * c;
    const T mr = m[r];
    StoreEach(yi, c, [&](long j) { return (xi[j] - mr) * s * w[j] + b[j]; });
    mean[first + r] = mr;
    rstd[first + r] = s;
  }
}

template <typename T, typename Y>
[[gnu::always_inline]] inline void Forward(Y* y, T* mean, T* rstd, const T* x, const T* w,
                                           const T* b, int64_t first, int64_t last, int c) {
  int64_t i = first;
  for (; i + kRows <= last; i += kRows) ForwardRows<kRows>(y, mean, rstd, x, w, b, i, c);
  for (; i < last; ++i) ForwardRows<1>(y, mean, rstd, x, w, b, i, c);
}

// With x̂ = (x - mean)·rstd and g = dy·w, the input gradient is
//   dx = rstd · (g - mean(g) - x̂ · mean(g · x̂)),
// rows [first, first + R) of it, the two means summed R rows at a time as above.
template <int R, typename T>
[[gnu::always_inline]] inline void BackwardRows(T* dx, const T* dy, const T* x, const T* w,
                                                const T* mean, const T* rstd, int64_t first,
                                                int c) {
  const T* xr = x + first * c;
  const T* dyr = dy + first * c;
  T g_mean[R] = {}, gx_mean[R] = {}, m[R], s[R];
  for (int r = 0; r < R; ++r) {
    m[r] = mean[first + r];
    s[r] = rstd[first + r];
  }
  for (int j = 0; j < c; ++j) {
    for (int r = 0; r < R; ++r) {
      T xhat = (xr[r * c + j] - m[r]) * s[r];
      T g = dyr[r * c + j] * w[j];
      g_mean[r] += g;
      gx_mean[r] += g * xhat;
    }
  }
  for (int r = 0; r < R; ++r) {
    const T gm = g_mean[r] / c, gxm = gx_mean[r] / c, mr = m[r], sr = s[r];
    const T* xi = xr + r * c;
    const T* dyi = dyr + r * c;
    T* dxi = dx + (first + r) * c;
    for (int j = 0; j < c; ++j) {
      T xhat = (xi[j] - mr) * sr;
      dxi[j] += sr * (dyi[j] * w[j] - gm - xhat * gxm);
    }
  }
}

template <typename T>
[[gnu::always_inline]] inline void BackwardInput(T* dx, const T* dy, const T* x, const T* w,
                                                 const T* mean, const T* rstd, int64_t first,
                                                 int64_t last, int c) {
  int64_t i = first;
  for (; i + kRows <= last; i += kRows) BackwardRows<kRows>(dx, dy, x, w, mean, rstd, i, c);
  for (; i < last; ++i) BackwardRows<1>(dx, dy, x, w, mean, rstd, i, c);
}

// dw and db over columns [first, last), each summed over the n rows in order.
template <typename T>
[[gnu::always_inline]] inline void BackwardWeights(T* dw, T* db, const T* dy, const T* x,
                                                   const T* mean, const T* rstd, int n,
                                                   int64_t first, int64_t last, int c) {
  for (int i = 0; i < n; ++i) {
    const T* dyi = dy + static_cast<long>(i) * c;
    const T* xi = x + static_cast<long>(i) * c;
    const T m = mean[i], s = rstd[i];
    for (int64_t j = first; j < last; ++j) {
      T xhat = (xi[j] - m) * s;
      db[j] += dyi[j];
      dw[j] += xhat * dyi[j];
    }
  }
}

// The float versions (the training path) are compiled for AVX-512, for AVX2 and for the
// baseline (cpu_clones.h; no contraction or reassociation, so the same values in each).
TALLY_CPU_CLONES void ForwardBlock(float* y, float* mean, float* rstd, const float* x,
                                   const float* w, const float* b, int64_t first, int64_t last,
                                   int c) {
  Forward(y, mean, rstd, x, w, b, first, last, c);
}
TALLY_CPU_CLONES void ForwardBlock(BFloat16* y, float* mean, float* rstd, const float* x,
                                   const float* w, const float* b, int64_t first, int64_t last,
                                   int c) {
  Forward(y, mean, rstd, x, w, b, first, last, c);
}
void ForwardBlock(double* y, double* mean, double* rstd, const double* x, const double* w,
                  const double* b, int64_t first, int64_t last, int c) {
  Forward(y, mean, rstd, x, w, b, first, last, c);
}
TALLY_CPU_CLONES void BackwardInputBlock(float* dx, const float* dy, const float* x,
                                         const float* w, const float* mean, const float* rstd,
                                         int64_t first, int64_t last, int c) {
  BackwardInput(dx, dy, x, w, mean, rstd, first, last, c);
}
void BackwardInputBlock(double* dx, const double* dy, const double* x, const double* w,
                        const double* mean, const double* rstd, int64_t first, int64_t last,
                        int c) {
  BackwardInput(dx, dy, x, w, mean, rstd, first, last, c);
}
TALLY_CPU_CLONES void BackwardWeightsBlock(float* dw, float* db, const float* dy, const float* x,
                                           const float* mean, const float* rstd, int n,
                                           int64_t first, int64_t last, int c) {
  BackwardWeights(dw, db, dy, x, mean, rstd, n, first, last, c);
}
void BackwardWeightsBlock(double* dw, double* db, const double* dy, const double* x,
                          const double* mean, const double* rstd, int n, int64_t first,
                          int64_t last, int c) {
  BackwardWeights(dw, db, dy, x, mean, rstd, n, first, last, c);
}

}  // namespace

template <typename T, typename Y>
void LayerNormForward(Y* y, T* mean, T* rstd, const T* x, const T* w, const T* b, int n, int c) {
  ParallelFor(n, GrainFor(4 * c), [&](int64_t first, int64_t last) {
    ForwardBlock(y, mean, rstd, x, w, b, first, last, c);
  });
}

// dx by rows; dw and db (sums over the rows) by columns.
template <typename T>
void LayerNormBackward(T* dx, T* dw, T* db, const T* dy, const T* x, const T* w, const T* mean,
                       const T* rstd, int n, int c) {
  ParallelFor(n, GrainFor(6 * c), [&](int64_t first, int64_t last) {
    BackwardInputBlock(dx, dy, x, w, mean, rstd, first, last, c);
  });
  ParallelFor(c, GrainFor(3 * int64_t(n)), [&](int64_t first, int64_t last) {
    BackwardWeightsBlock(dw, db, dy, x, mean, rstd, n, first, last, c);
  });
}

template void LayerNormForward(float*, float*, float*, const float*, const float*, const float*,
                               int, int);
template void LayerNormForward(BFloat16*, float*, float*, const float*, const float*, const float*,
                               int, int);
template void LayerNormForward(double*, double*, double*, const double*, const double*,
                               const double*, int, int);
template void LayerNormBackward(float*, float*, float*, const float*, const float*, const float*,
                                const float*, const float*, int, int);
template void LayerNormBackward(double*, double*, double*, const double*, const double*,
                                const double*, const double*, const double*, int, int);

}  // namespace tally::cpu
