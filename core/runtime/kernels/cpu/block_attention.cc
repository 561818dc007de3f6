#include "core/runtime/kernels/cpu/block_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/runtime/kernels/cpu/fast_math.h"
#include "core/runtime/kernels/cpu/gemm.h"
#include "core/runtime/kernels/cpu/parallel.h"

namespace tally::cpu {
namespace {

// exp of a score less its row's max (or lse): FastExp in float, as the serial softmax.
inline float ScoreExp(float x) { return FastExp(x); }
inline double ScoreExp(double x) { return std::exp(x); }

// The calling thread's buffer number `slot` (0..1) of at least n elements (kernel
// scratch, outside the memory ledger, as the matmuls' packing buffers are).
template <typename T>
T* Scratch(int slot, int64_t n) {
  thread_local std::vector<T> buffers[2];
  if (buffers[slot].size() < size_t(n)) buffers[slot].resize(size_t(n));
  return buffers[slot].data();
}

// S (tq, tk) = Q·Kᵀ/√hs of sequence i, head h.
template <typename T>
void Scores(T* s, Rows<const T> q, Rows<const T> k, int i, int h, int hs, BlockPositions at) {
  const T scale = T(1) / std::sqrt(T(hs));
  Gemm(Trans::kNo, Trans::kYes, at.tq, at.tk, hs, scale, q.Row(i, 0) + h * hs, q.ld,
       k.Row(i, 0) + h * hs, k.ld, T(0), s, at.tk);
}

template <typename T>
void Forward(Rows<T> o, T* lse, Rows<const T> q, Rows<const T> k, Rows<const T> v, int b, int c,
             int nh, BlockPositions at) {
  const int hs = c / nh, tq = at.tq, tk = at.tk;
  ParallelFor(int64_t(b) * nh, 1, [&](int64_t first, int64_t last) {
    T* s = Scratch<T>(0, int64_t(tq) * tk);
    T* ob = Scratch<T>(1, int64_t(tq) * hs);
    std::vector<T> m(tq), l(tq);  // each row's max and sum of exponentials
    for (int64_t pair = first; pair < last; ++pair) {
      const int i = static_cast<int>(pair / nh), h = static_cast<int>(pair % nh);
      Scores(s, q, k, i, h, hs, at);
      // Each row's visible scores into exp(S − m), the rest zero.
      for (int r = 0; r < tq; ++r) {
        T* row = s + int64_t(r) * tk;
        const int n = at.Visible(r);
        m[r] = n > 0 ? *std::max_element(row, row + n) : T(0);
        T sum = 0;
        for (int j = 0; j < n; ++j) {
          row[j] = ScoreExp(row[j] - m[r]);
          sum += row[j];
        }
        std::fill(row + n, row + tk, T(0));
        l[r] = sum;
      }
      Gemm(Trans::kNo, Trans::kNo, tq, hs, tk, T(1), s, tk, v.Row(i, 0) + h * hs, v.ld, T(0), ob,
           hs);
      T* lse_h = lse + pair * tq;
      for (int r = 0; r < tq; ++r) {
        if (at.Visible(r) == 0) continue;
        const T lse_b = m[r] + std::log(l[r]);
        T* out = o.Row(i, r) + h * hs;
        const T* block = ob + int64_t(r) * hs;
        if (lse_h[r] == -std::numeric_limits<T>::infinity()) {
          const T inv = T(1) / l[r];
          for (int d = 0; d < hs; ++d) out[d] = block[d] * inv;
          lse_h[r] = lse_b;
          continue;
        }
        const T top = std::max(lse_h[r], lse_b);
        const T merged = top + std::log(std::exp(lse_h[r] - top) + std::exp(lse_b - top));
        const T keep = std::exp(lse_h[r] - merged);
        const T add = std::exp(lse_b - merged) / l[r];
        for (int d = 0; d < hs; ++d) out[d] = out[d] * keep + block[d] * add;
        lse_h[r] = merged;
      }
    }
  });
}

template <typename T>
void Backward(Rows<T> dq, Rows<T> dk, Rows<T> dv, Rows<const T> q, Rows<const T> k, Rows<const T> v,
              Rows<const T> dout, const T* lse, const T* delta, int b, int c, int nh,
              BlockPositions at) {
  const int hs = c / nh, tq = at.tq, tk = at.tk;
  const T scale = T(1) / std::sqrt(T(hs));
  ParallelFor(int64_t(b) * nh, 1, [&](int64_t first, int64_t last) {
    T* p = Scratch<T>(0, int64_t(tq) * tk);
    T* ds = Scratch<T>(1, int64_t(tq) * tk);
    for (int64_t pair = first; pair < last; ++pair) {
      const int i = static_cast<int>(pair / nh), h = static_cast<int>(pair % nh);
      const T* lse_h = lse + pair * tq;
      const T* delta_h = delta + pair * tq;
      Scores(p, q, k, i, h, hs, at);
      for (int r = 0; r < tq; ++r) {
        T* row = p + int64_t(r) * tk;
        const int n = at.Visible(r);
        for (int j = 0; j < n; ++j) row[j] = ScoreExp(row[j] - lse_h[r]);
        std::fill(row + n, row + tk, T(0));
      }
      const T* dy = dout.Row(i, 0) + h * hs;
      // dV += Pᵀ·dO; dP = dO·Vᵀ into ds, then dS = P ⊙ (dP − D) in place.
      Gemm(Trans::kYes, Trans::kNo, tk, hs, tq, T(1), p, tk, dy, dout.ld, T(1),
           dv.Row(i, 0) + h * hs, dv.ld);
      Gemm(Trans::kNo, Trans::kYes, tq, tk, hs, T(1), dy, dout.ld, v.Row(i, 0) + h * hs, v.ld, T(0),
           ds, tk);
      for (int r = 0; r < tq; ++r) {
        const int64_t at_row = int64_t(r) * tk;
        for (int j = 0; j < tk; ++j) {
          ds[at_row + j] = p[at_row + j] * (ds[at_row + j] - delta_h[r]);
        }
      }
      Gemm(Trans::kNo, Trans::kNo, tq, hs, tk, scale, ds, tk, k.Row(i, 0) + h * hs, k.ld, T(1),
           dq.Row(i, 0) + h * hs, dq.ld);
      Gemm(Trans::kYes, Trans::kNo, tk, hs, tq, scale, ds, tk, q.Row(i, 0) + h * hs, q.ld, T(1),
           dk.Row(i, 0) + h * hs, dk.ld);
    }
  });
}

}  // namespace

template <typename T>
void BlockAttentionStart(Rows<T> o, T* lse, int b, int tq, int c, int nh) {
  for (int i = 0; i < b; ++i) {
    for (int r = 0; r < tq; ++r) std::fill(o.Row(i, r), o.Row(i, r) + c, T(0));
  }
  std::fill(lse, lse + int64_t(b) * nh * tq, -std::numeric_limits<T>::infinity());
}

template <typename T>
void BlockAttentionForward(Rows<T> o, T* lse, Rows<const T> q, Rows<const T> k, Rows<const T> v,
                           int b, int c, int nh, BlockPositions at) {
  if (at.Masked()) return;
  Forward(o, lse, q, k, v, b, c, nh, at);
}

template <typename T>
void AttentionDelta(T* delta, Rows<const T> dout, Rows<const T> o, int b, int tq, int c, int nh) {
  const int hs = c / nh;
  for (int i = 0; i < b; ++i) {
    for (int h = 0; h < nh; ++h) {
      for (int r = 0; r < tq; ++r) {
        const T* dy = dout.Row(i, r) + h * hs;
        const T* y = o.Row(i, r) + h * hs;
        T sum = 0;
        for (int d = 0; d < hs; ++d) sum += dy[d] * y[d];
        delta[(int64_t(i) * nh + h) * tq + r] = sum;
      }
    }
  }
}

template <typename T>
void BlockAttentionBackward(Rows<T> dq, Rows<T> dk, Rows<T> dv, Rows<const T> q, Rows<const T> k,
                            Rows<const T> v, Rows<const T> dout, const T* lse, const T* delta,
                            int b, int c, int nh, BlockPositions at) {
  if (at.Masked()) return;
  Backward(dq, dk, dv, q, k, v, dout, lse, delta, b, c, nh, at);
}

#define TALLY_BLOCK_ATTENTION(T)                                                                   \
  template void BlockAttentionStart(Rows<T>, T*, int, int, int, int);                              \
  template void BlockAttentionForward(Rows<T>, T*, Rows<const T>, Rows<const T>, Rows<const T>,    \
                                      int, int, int, BlockPositions);                              \
  template void AttentionDelta(T*, Rows<const T>, Rows<const T>, int, int, int, int);              \
  template void BlockAttentionBackward(Rows<T>, Rows<T>, Rows<T>, Rows<const T>, Rows<const T>,    \
                                       Rows<const T>, Rows<const T>, const T*, const T*, int, int, \
                                       int, BlockPositions);
TALLY_BLOCK_ATTENTION(float)
TALLY_BLOCK_ATTENTION(double)
#undef TALLY_BLOCK_ATTENTION

}  // namespace tally::cpu
