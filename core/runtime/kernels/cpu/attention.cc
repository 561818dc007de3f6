#include "core/runtime/kernels/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/runtime/kernels/cpu/cpu_clones.h"
#include "core/runtime/kernels/cpu/fast_math.h"
#include "core/runtime/kernels/cpu/parallel.h"
#include "core/runtime/kernels/cpu/store.h"

namespace tally::cpu {
namespace {

// Each row of S (t, t) in place: softmax over the columns up to the row's own position,
// zeros after it (the future is masked out). The double version serves the tests.
void CausalSoftmax(double* p, double*, int t) {
  for (int row = 0; row < t; ++row) {
    double* s = p + static_cast<long>(row) * t;
    double max = s[0];
    for (int col = 1; col <= row; ++col) max = std::max(max, s[col]);
    double sum = 0;
    for (int col = 0; col <= row; ++col) {
      s[col] = FastExp(s[col] - max);
      sum += s[col];
    }
    double inv = 1.0 / sum;
    for (int col = 0; col <= row; ++col) s[col] *= inv;
    for (int col = row + 1; col < t; ++col) s[col] = 0;
  }
}

// The float rows go in groups of kGroup consecutive rows. A row's sum (and, backward, its
// dot product) runs in column order, one value at a time, as the double version's: a chain
// of dependent additions, four cycles each. The group's chains run side by side, so that
// the processor overlaps them; each row's result is the same as alone.
constexpr int kGroup = 8;

// Rows `row`..`row` + rows - 1 (rows <= kGroup) of S (t, t), `s` pointing at the first:
// each row's columns up to its own position into their softmax, zeros after, and the rows
// again in `rounded` (bf16, when not null: P·V's operand, made as P is). A row's max is
// taken in 16 lanes (exact in any order); the sums of a whole group side by side.
TALLY_CPU_CLONES void SoftmaxGroup(float* s, int row, int rows, int t, BFloat16* rounded) {
  float sum[kGroup] = {};
  for (int i = 0; i < rows; ++i) {
    float* r = s + static_cast<long>(i) * t;
    const int n = row + i + 1;
    float lanes[16];
    for (int l = 0; l < 16; ++l) lanes[l] = r[0];
    int col = 0;
    for (; col + 16 <= n; col += 16) {
      for (int l = 0; l < 16; ++l) lanes[l] = std::max(lanes[l], r[col + l]);
    }
    float max = lanes[0];
    for (int l = 1; l < 16; ++l) max = std::max(max, lanes[l]);
    for (; col < n; ++col) max = std::max(max, r[col]);
    for (int j = 0; j < n; ++j) r[j] = FastExp(r[j] - max);
  }
  if (rows == kGroup) {
    for (int j = 0; j <= row; ++j) {  // the columns every row of the group has
      for (int i = 0; i < kGroup; ++i) sum[i] += s[static_cast<long>(i) * t + j];
    }
    for (int i = 1; i < kGroup; ++i) {
      for (int j = row + 1; j <= row + i; ++j) sum[i] += s[static_cast<long>(i) * t + j];
    }
  } else {
    for (int i = 0; i < rows; ++i) {
      for (int j = 0; j <= row + i; ++j) sum[i] += s[static_cast<long>(i) * t + j];
    }
  }
  for (int i = 0; i < rows; ++i) {
    float* r = s + static_cast<long>(i) * t;
    const int n = row + i + 1;
    const float inv = 1.0f / sum[i];
    for (int j = 0; j < n; ++j) r[j] *= inv;
    for (int j = n; j < t; ++j) r[j] = 0;
    if (rounded != nullptr) {
      BFloat16* to = rounded + static_cast<long>(i) * t;
      Round(to, r, n);
      std::fill(to + n, to + t, BFloat16{});
    }
  }
}

void CausalSoftmax(float* p, BFloat16* rounded, int t) {
  for (int row = 0; row < t; row += kGroup) {
    const long at = static_cast<long>(row) * t;
    SoftmaxGroup(p + at, row, std::min(kGroup, t - row), t,
                 rounded == nullptr ? nullptr : rounded + at);
  }
}
void CausalSoftmax(float* p, float*, int t) {
  CausalSoftmax(p, static_cast<BFloat16*>(nullptr), t);
}

// dP (t, t) into dS = P ⊙ (dP - rowsum(dP ⊙ P)), zeros past each row's position, written
// to `ds` (of the matmuls' operand type; it may be dp itself).
void CausalSoftmaxBackward(double* ds, double*, double* dp, const double* p, int t) {
  for (int row = 0; row < t; ++row) {
    const double* pr = p + static_cast<long>(row) * t;
    double* dr = dp + static_cast<long>(row) * t;
    double* out = ds + static_cast<long>(row) * t;
    double dot = 0;
    for (int col = 0; col <= row; ++col) dot += dr[col] * pr[col];
    for (int col = 0; col <= row; ++col) out[col] = pr[col] * (dr[col] - dot);
    for (int col = row + 1; col < t; ++col) out[col] = 0;
  }
}

// Rows `row`..`row` + rows - 1 (rows <= kGroup) of dP into dS, as above, `dp`, `p` and
// `ds` pointing at the first; the dot products side by side (kGroup at a time). A bf16 dS
// comes with the rows of P rounded too, into `p_rounded` (dV = Pᵀ·dY's operand: P is read
// here anyway).
template <typename O>
[[gnu::always_inline]] inline void SoftmaxBackwardGroup(O* ds, O* p_rounded, const float* dp,
                                                        const float* p, int row, int rows,
                                                        int t) {
  float dot[kGroup] = {};
  if (rows == kGroup) {
    for (int j = 0; j <= row; ++j) {  // the columns every row of the group has
      for (int i = 0; i < kGroup; ++i) {
        const long at = static_cast<long>(i) * t + j;
        dot[i] += dp[at] * p[at];
      }
    }
    for (int i = 1; i < kGroup; ++i) {
      for (int j = row + 1; j <= row + i; ++j) {
        const long at = static_cast<long>(i) * t + j;
        dot[i] += dp[at] * p[at];
      }
    }
  } else {
    for (int i = 0; i < rows; ++i) {
      for (int j = 0; j <= row + i; ++j) {
        const long at = static_cast<long>(i) * t + j;
        dot[i] += dp[at] * p[at];
      }
    }
  }
  for (int i = 0; i < rows; ++i) {
    const long at = static_cast<long>(i) * t;
    const float* dr = dp + at;
    const float* pr = p + at;
    const int n = row + i + 1;
    const float d = dot[i];
    StoreEach(ds + at, n, [&](long col) { return pr[col] * (dr[col] - d); });
    std::fill(ds + at + n, ds + at + t, O{});
    if constexpr (std::is_same_v<O, BFloat16>) {
      Round(p_rounded + at, pr, n);
      std::fill(p_rounded + at + n, p_rounded + at + t, O{});
    }
  }
}
TALLY_CPU_CLONES void SoftmaxBackwardGroup(float* ds, float*, const float* dp, const float* p,
                                           int row, int rows, int t) {
  SoftmaxBackwardGroup<float>(ds, nullptr, dp, p, row, rows, t);
}
TALLY_CPU_CLONES void SoftmaxBackwardGroup(BFloat16* ds, BFloat16* p_rounded, const float* dp,
                                           const float* p, int row, int rows, int t) {
  SoftmaxBackwardGroup<BFloat16>(ds, p_rounded, dp, p, row, rows, t);
}

template <typename O>
void CausalSoftmaxBackward(O* ds, O* p_rounded, float* dp, const float* p, int t) {
  for (int row = 0; row < t; row += kGroup) {
    const long at = static_cast<long>(row) * t;
    SoftmaxBackwardGroup(ds + at, p_rounded == nullptr ? nullptr : p_rounded + at, dp + at,
                         p + at, row, std::min(kGroup, t - row), t);
  }
}

// Where a t×t matrix made here is kept as a matmul operand of type O: the matrix itself,
// or the calling thread's bf16 scratch `slot`.
template <typename O, typename T>
O* OperandBuffer(int slot, T* x, int64_t n) {
  if constexpr (std::is_same_v<O, T>) {
    return x;
  } else {
    return BF16Scratch(slot, n);
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
      O* p_in = OperandBuffer<O>(1, p, t * t);
      // S = Q·Kᵀ·scale, every row of Q against every row of K; then P = softmax(S).
      Gemm(Trans::kNo, Trans::kYes, t, t, hs, scale, q, 3 * c, k, 3 * c, T(0), p, t);
      CausalSoftmax(p, p_in, t);
      // Y = P·V, written into head h's columns of y.
      Gemm(Trans::kNo, Trans::kNo, t, hs, t, T(1), p_in, t, v, 3 * c, T(0),
           y + static_cast<long>(i) * t * c + h * hs, c);
    }
  });
}

// With P the softmax and dP = dY·Vᵀ, dS = CausalSoftmaxBackward(dP), and then
// dV = Pᵀ·dY, dQ = dS·K·scale, dK = dSᵀ·Q·scale. The thread that takes the first pair
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
      // dP = dY·Vᵀ, then the softmax backward (in place, or into bf16 dS and P).
      Gemm(Trans::kNo, Trans::kYes, t, t, hs, T(1), dyh, c, v, 3 * c, T(0), ds, t);
      O* ds_in = OperandBuffer<O>(3, ds, t * t);
      const O* p_in = nullptr;
      if constexpr (std::is_same_v<O, T>) {
        CausalSoftmaxBackward(ds_in, static_cast<O*>(nullptr), ds, p, t);
        p_in = p;
      } else {
        O* p_rounded = BF16Scratch(2, int64_t(t) * t);
        CausalSoftmaxBackward(ds_in, p_rounded, ds, p, t);
        p_in = p_rounded;
      }
      // dV = Pᵀ·dY
      Gemm(Trans::kYes, Trans::kNo, t, hs, t, T(1), p_in, t, dyh, c, T(0), dbase + 2 * c + h * hs,
           3 * c);
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
