#include "runtime/kernels/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "runtime/kernels/cpu/fast_math.h"
#include "runtime/kernels/cpu/parallel.h"

namespace tally::cpu {
namespace {

// Each row of S (t, t) in place: softmax over the columns up to the row's own position,
// zeros after it (the future is masked out).
template <typename T>
void CausalSoftmax(T* p, int t) {
  for (int row = 0; row < t; ++row) {
    T* s = p + static_cast<long>(row) * t;
    T max = s[0];
    for (int col = 1; col <= row; ++col) max = std::max(max, s[col]);
    T sum = 0;
    if constexpr (std::is_same_v<T, float>) {
      ExpMinus(s, s, max, row + 1);
      for (int col = 0; col <= row; ++col) sum += s[col];
    } else {
      for (int col = 0; col <= row; ++col) {
        s[col] = FastExp(s[col] - max);
        sum += s[col];
      }
    }
    T inv = T(1) / sum;
    for (int col = 0; col <= row; ++col) s[col] *= inv;
    for (int col = row + 1; col < t; ++col) s[col] = 0;
  }
}

// dP (t, t) in place into dS = P ⊙ (dP - rowsum(dP ⊙ P)), zeros past each row's position.
template <typename T>
void CausalSoftmaxBackward(T* ds, const T* p, int t) {
  for (int row = 0; row < t; ++row) {
    const T* pr = p + static_cast<long>(row) * t;
    T* dr = ds + static_cast<long>(row) * t;
    T dot = 0;
    for (int col = 0; col <= row; ++col) dot += dr[col] * pr[col];
    for (int col = 0; col <= row; ++col) dr[col] = pr[col] * (dr[col] - dot);
    for (int col = row + 1; col < t; ++col) dr[col] = 0;
  }
}

// Attention with its matmul operands of type O (T, or bf16 roundings of them): each
// sequence's qkv (and dy) rounded once per thread that takes one of its heads, each head's
// P (and dS) as it is formed. The (sequence, head) pairs run on the intra-op threads, a
// block of pairs each, every pair's matmuls on its own thread.
template <typename O, typename T, typename Q>
void Forward(T* y, T* att, const Q* qkv, int b, int t, int c, int nh) {
  int hs = c / nh;
  T scale = T(1) / std::sqrt(T(hs));
  ParallelFor(int64_t(b) * nh, 1, [&](int64_t first, int64_t last) {
    const O* base = nullptr;
    for (int64_t pair = first; pair < last; ++pair) {
      const int i = static_cast<int>(pair / nh), h = static_cast<int>(pair % nh);
      if (base == nullptr || pair % nh == 0) {
        base = AsOperand<O>(0, qkv + static_cast<long>(i) * t * 3 * c, t, 3 * c);
      }
      const O* q = base + h * hs;
      const O* k = base + c + h * hs;
      const O* v = base + 2 * c + h * hs;
      T* p = att + pair * t * t;
      // S = Q·Kᵀ·scale, every row of Q against every row of K; then P = softmax(S).
      Gemm(Trans::kNo, Trans::kYes, t, t, hs, scale, q, 3 * c, k, 3 * c, T(0), p, t);
      CausalSoftmax(p, t);
      // Y = P·V, written into head h's columns of y.
      Gemm(Trans::kNo, Trans::kNo, t, hs, t, T(1), AsOperand<O>(1, p, t, t), t, v, 3 * c, T(0),
           y + static_cast<long>(i) * t * c + h * hs, c);
    }
  });
}

// With P the softmax and dP = dY·Vᵀ, dS = CausalSoftmaxBackward(dP), and then
// dQ = dS·K·scale, dK = dSᵀ·Q·scale, dV = Pᵀ·dY. The thread that takes the first pair
// forms dP in `scratch`, the others in a t×t buffer of their own (kernel scratch, outside
// the memory ledger, as the matmuls' packing buffers are).
template <typename O, typename T, typename Q>
void Backward(T* dqkv, T* scratch, const T* dy, const Q* qkv, const T* att, int b, int t, int c,
              int nh) {
  int hs = c / nh;
  T scale = T(1) / std::sqrt(T(hs));
  ParallelFor(int64_t(b) * nh, 1, [&](int64_t first, int64_t last) {
    thread_local std::vector<T> own;
    T* ds = scratch;
    if (first > 0) {
      if (own.size() < size_t(t) * size_t(t)) own.resize(size_t(t) * size_t(t));
      ds = own.data();
    }
    const O* base = nullptr;
    const O* dyi = nullptr;
    for (int64_t pair = first; pair < last; ++pair) {
      const int i = static_cast<int>(pair / nh), h = static_cast<int>(pair % nh);
      if (base == nullptr || pair % nh == 0) {
        base = AsOperand<O>(0, qkv + static_cast<long>(i) * t * 3 * c, t, 3 * c);
        dyi = AsOperand<O>(1, dy + static_cast<long>(i) * t * c, t, c);
      }
      T* dbase = dqkv + static_cast<long>(i) * t * 3 * c;
      const O* q = base + h * hs;
      const O* k = base + c + h * hs;
      const O* v = base + 2 * c + h * hs;
      const T* p = att + pair * t * t;
      const O* dyh = dyi + h * hs;
      // dV = Pᵀ·dY
      Gemm(Trans::kYes, Trans::kNo, t, hs, t, T(1), AsOperand<O>(2, p, t, t), t, dyh, c, T(0),
           dbase + 2 * c + h * hs, 3 * c);
      // dP = dY·Vᵀ, then the softmax backward in place.
      Gemm(Trans::kNo, Trans::kYes, t, t, hs, T(1), dyh, c, v, 3 * c, T(0), ds, t);
      CausalSoftmaxBackward(ds, p, t);
      const O* ds_in = AsOperand<O>(3, ds, t, t);
      Gemm(Trans::kNo, Trans::kNo, t, hs, t, scale, ds_in, t, k, 3 * c, T(0), dbase + h * hs,
           3 * c);
      Gemm(Trans::kYes, Trans::kNo, t, hs, t, scale, ds_in, t, q, 3 * c, T(0), dbase + c + h * hs,
           3 * c);
    }
  });
}

}  // namespace

template <typename T, typename Q>
void AttentionForward(T* y, T* att, const Q* qkv, int b, int t, int c, int nh,
                      MatmulInputs inputs) {
  if constexpr (std::is_same_v<T, float>) {
    if (inputs == MatmulInputs::kBF16) return Forward<BFloat16>(y, att, qkv, b, t, c, nh);
  }
  if constexpr (std::is_same_v<T, Q>) {
    Forward<T>(y, att, qkv, b, t, c, nh);
  } else {
    CHECK(false) << "a bf16 qkv needs bf16 matmul inputs";
  }
}

template <typename T, typename Q>
void AttentionBackward(T* dqkv, T* scratch, const T* dy, const Q* qkv, const T* att, int b, int t,
                       int c, int nh, MatmulInputs inputs) {
  if constexpr (std::is_same_v<T, float>) {
    if (inputs == MatmulInputs::kBF16) {
      return Backward<BFloat16>(dqkv, scratch, dy, qkv, att, b, t, c, nh);
    }
  }
  if constexpr (std::is_same_v<T, Q>) {
    Backward<T>(dqkv, scratch, dy, qkv, att, b, t, c, nh);
  } else {
    CHECK(false) << "a bf16 qkv needs bf16 matmul inputs";
  }
}

template void AttentionForward(float*, float*, const float*, int, int, int, int, MatmulInputs);
template void AttentionForward(float*, float*, const BFloat16*, int, int, int, int, MatmulInputs);
template void AttentionForward(double*, double*, const double*, int, int, int, int, MatmulInputs);
template void AttentionBackward(float*, float*, const float*, const float*, const float*, int, int,
                                int, int, MatmulInputs);
template void AttentionBackward(float*, float*, const float*, const BFloat16*, const float*, int,
                                int, int, int, MatmulInputs);
template void AttentionBackward(double*, double*, const double*, const double*, const double*, int,
                                int, int, int, MatmulInputs);

}  // namespace tally::cpu
