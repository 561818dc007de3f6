#include "runtime/kernels/cpu/layernorm.h"

#include <cmath>

#include "runtime/dtype.h"

namespace tally::cpu {

template <typename T, typename Y>
void LayerNormForward(Y* y, T* mean, T* rstd, const T* x, const T* w, const T* b, int n, int c) {
  for (int i = 0; i < n; ++i) {
    const T* xi = x + static_cast<long>(i) * c;
    Y* yi = y + static_cast<long>(i) * c;
    T sum = 0;
    for (int j = 0; j < c; ++j) sum += xi[j];
    T m = sum / c;
    T var = 0;
    for (int j = 0; j < c; ++j) var += (xi[j] - m) * (xi[j] - m);
    T s = T(1) / std::sqrt(var / c + T(kLayerNormEps));
    for (int j = 0; j < c; ++j) yi[j] = StoredAs<Y>((xi[j] - m) * s * w[j] + b[j]);
    mean[i] = m;
    rstd[i] = s;
  }
}

// With x̂ = (x - mean)·rstd and g = dy·w, the input gradient is
//   dx = rstd · (g - mean(g) - x̂ · mean(g · x̂)).
template <typename T>
void LayerNormBackward(T* dx, T* dw, T* db, const T* dy, const T* x, const T* w, const T* mean,
                       const T* rstd, int n, int c) {
  for (int i = 0; i < n; ++i) {
    const T* dyi = dy + static_cast<long>(i) * c;
    const T* xi = x + static_cast<long>(i) * c;
    T* dxi = dx + static_cast<long>(i) * c;
    T m = mean[i], s = rstd[i];
    T g_mean = 0, gx_mean = 0;
    for (int j = 0; j < c; ++j) {
      T xhat = (xi[j] - m) * s;
      T g = dyi[j] * w[j];
      g_mean += g;
      gx_mean += g * xhat;
    }
    g_mean /= c;
    gx_mean /= c;
    for (int j = 0; j < c; ++j) {
      T xhat = (xi[j] - m) * s;
      db[j] += dyi[j];
      dw[j] += xhat * dyi[j];
      dxi[j] += s * (dyi[j] * w[j] - g_mean - xhat * gx_mean);
    }
  }
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
