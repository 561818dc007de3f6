#include "runtime/kernels/cpu/attention.h"

#include <algorithm>
#include <cmath>

#include "runtime/kernels/cpu/fast_math.h"
#include "runtime/kernels/cpu/gemm.h"

namespace tally::cpu {

template <typename T>
void AttentionForward(T* y, T* att, const T* qkv, int b, int t, int c, int nh) {
  int hs = c / nh;
  T scale = T(1) / std::sqrt(T(hs));
  for (int i = 0; i < b; ++i) {
    const T* base = qkv + static_cast<long>(i) * t * 3 * c;
    for (int h = 0; h < nh; ++h) {
      const T* q = base + h * hs;
      const T* k = base + c + h * hs;
      const T* v = base + 2 * c + h * hs;
      T* p = att + (static_cast<long>(i) * nh + h) * t * t;
      // S = Q·Kᵀ·scale, every row of Q against every row of K (the mask comes next).
      Gemm(Trans::kNo, Trans::kYes, t, t, hs, scale, q, 3 * c, k, 3 * c, T(0), p, t);
      for (int row = 0; row < t; ++row) {
        T* s = p + static_cast<long>(row) * t;
        T max = s[0];
        for (int col = 1; col <= row; ++col) max = std::max(max, s[col]);
        T sum = 0;
        for (int col = 0; col <= row; ++col) {
          s[col] = FastExp(s[col] - max);
          sum += s[col];
        }
        T inv = T(1) / sum;
        for (int col = 0; col <= row; ++col) s[col] *= inv;
        for (int col = row + 1; col < t; ++col) s[col] = 0;  // the future is masked out
      }
      // Y = P·V, written into head h's columns of y.
      Gemm(Trans::kNo, Trans::kNo, t, hs, t, T(1), p, t, v, 3 * c, T(0),
           y + static_cast<long>(i) * t * c + h * hs, c);
    }
  }
}

// With P the softmax and dP = dY·Vᵀ, the softmax backward is
//   dS = P ⊙ (dP - rowsum(dP ⊙ P)),
// and then dQ = dS·K·scale, dK = dSᵀ·Q·scale, dV = Pᵀ·dY.
template <typename T>
void AttentionBackward(T* dqkv, T* scratch, const T* dy, const T* qkv, const T* att, int b, int t,
                       int c, int nh) {
  int hs = c / nh;
  T scale = T(1) / std::sqrt(T(hs));
  for (int i = 0; i < b; ++i) {
    const T* base = qkv + static_cast<long>(i) * t * 3 * c;
    T* dbase = dqkv + static_cast<long>(i) * t * 3 * c;
    const T* dyi = dy + static_cast<long>(i) * t * c;
    for (int h = 0; h < nh; ++h) {
      const T* q = base + h * hs;
      const T* k = base + c + h * hs;
      const T* v = base + 2 * c + h * hs;
      const T* p = att + (static_cast<long>(i) * nh + h) * t * t;
      const T* dyh = dyi + h * hs;
      T* ds = scratch;
      // dV = Pᵀ·dY
      Gemm(Trans::kYes, Trans::kNo, t, hs, t, T(1), p, t, dyh, c, T(0), dbase + 2 * c + h * hs,
           3 * c);
      // dP = dY·Vᵀ, then the softmax backward in place.
      Gemm(Trans::kNo, Trans::kYes, t, t, hs, T(1), dyh, c, v, 3 * c, T(0), ds, t);
      for (int row = 0; row < t; ++row) {
        const T* pr = p + static_cast<long>(row) * t;
        T* dr = ds + static_cast<long>(row) * t;
        T dot = 0;
        for (int col = 0; col <= row; ++col) dot += dr[col] * pr[col];
        for (int col = 0; col <= row; ++col) dr[col] = pr[col] * (dr[col] - dot);
        for (int col = row + 1; col < t; ++col) dr[col] = 0;
      }
      // dQ = dS·K·scale, dK = dSᵀ·Q·scale
      Gemm(Trans::kNo, Trans::kNo, t, hs, t, scale, ds, t, k, 3 * c, T(0), dbase + h * hs, 3 * c);
      Gemm(Trans::kYes, Trans::kNo, t, hs, t, scale, ds, t, q, 3 * c, T(0), dbase + c + h * hs,
           3 * c);
    }
  }
}

template void AttentionForward(float*, float*, const float*, int, int, int, int);
template void AttentionForward(double*, double*, const double*, int, int, int, int);
template void AttentionBackward(float*, float*, const float*, const float*, const float*, int, int,
                                int, int);
template void AttentionBackward(double*, double*, const double*, const double*, const double*, int,
                                int, int, int);

}  // namespace tally::cpu
