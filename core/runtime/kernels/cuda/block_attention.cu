// Block attention on the GPU: the CPU block kernels (core/runtime/kernels/cpu/block_attention.h)
// on device pointers, fp32, the same math, layouts and merge. One thread per row of a
// (sequence, head): forward and dQ a query each, dK and dV a key each, so that every sum
// runs in one thread in a fixed order (no atomics: the same bits on every run). A row's
// scores are made again where a pass needs them rather than kept, as flash attention does:
//
//   forward  pass 1: m = max_j S_ij, l = Σ_j exp(S_ij − m) over the keys query i sees;
//            merge: lse' and the factors keep = exp(lse − lse'), add = exp(lse_b − lse')/l;
//            pass 2: O_i = O_i·keep + Σ_j add·exp(S_ij − m)·V_j
//   dQ       dQ_i += Σ_j P_ij (dO_i·V_j − D_i) K_j /√hs,   P_ij = exp(S_ij − lse_i)
//   dK, dV   dV_j += Σ_i P_ij dO_i,  dK_j += Σ_i P_ij (dO_i·V_j − D_i) Q_i /√hs
//            over the queries i that see key j
//
// The exponentials are expf (the CPU's FastExp in float agrees to a few ulps): the tests
// compare with atol + rtol·|cpu|.
#include "core/runtime/kernels/cuda/kernels.h"
#include "core/runtime/kernels/cuda/launch.cuh"

namespace tally::cuda {
namespace {

// Where row r of sequence i of a (B, rows, ·) view is.
struct View {
  const float* data;
  int64_t batch;
  int ld;
  __device__ const float* Row(int i, int r) const { return data + i * batch + int64_t(r) * ld; }
};
struct MutableView {
  float* data;
  int64_t batch;
  int ld;
  __device__ float* Row(int i, int r) const { return data + i * batch + int64_t(r) * ld; }
};

struct Block {
  int q_start, tq, k_start, tk;
  // The keys query r sees: a prefix of the block.
  __device__ int Visible(int r) const {
    const int n = q_start + r - k_start + 1;
    return n < 0 ? 0 : (n > tk ? tk : n);
  }
};

__device__ float Dot(const float* a, const float* b, int n) {
  float sum = 0;
  for (int d = 0; d < n; ++d) sum += a[d] * b[d];
  return sum;
}

__global__ void StartKernel(float* o, int64_t o_batch, int o_ld, float* lse, int b, int tq, int c,
                            int nh) {
  TALLY_GRID_STRIDE(x, int64_t(b) * tq * c) {
    const int i = int(x / (int64_t(tq) * c)), r = int(x / c % tq), d = int(x % c);
    o[i * o_batch + int64_t(r) * o_ld + d] = 0;
  }
  TALLY_GRID_STRIDE(x, int64_t(b) * nh * tq) lse[x] = -INFINITY;
}

// One thread a (sequence, head, query).
__global__ void ForwardKernel(MutableView o, float* lse, View q, View k, View v, int b, int nh,
                              int hs, Block at) {
  TALLY_GRID_STRIDE(x, int64_t(b) * nh * at.tq) {
    const int r = int(x % at.tq), h = int(x / at.tq % nh), i = int(x / at.tq / nh);
    const int n = at.Visible(r);
    if (n == 0) continue;
    const float scale = 1.0f / sqrtf(float(hs));
    const float* qr = q.Row(i, r) + h * hs;
    float m = -INFINITY;
    for (int j = 0; j < n; ++j) m = fmaxf(m, Dot(qr, k.Row(i, j) + h * hs, hs) * scale);
    float l = 0;
    for (int j = 0; j < n; ++j) l += expf(Dot(qr, k.Row(i, j) + h * hs, hs) * scale - m);
    const float lse_b = m + logf(l);
    float* out = o.Row(i, r) + h * hs;
    float& lse_r = lse[(int64_t(i) * nh + h) * at.tq + r];
    float keep = 0, add = 1.0f / l;
    if (lse_r != -INFINITY) {
      const float top = fmaxf(lse_r, lse_b);
      const float merged = top + logf(expf(lse_r - top) + expf(lse_b - top));
      keep = expf(lse_r - merged);
      add = expf(lse_b - merged) / l;
      lse_r = merged;
    } else {
      lse_r = lse_b;
    }
    for (int d = 0; d < hs; ++d) out[d] *= keep;
    for (int j = 0; j < n; ++j) {
      const float p = expf(Dot(qr, k.Row(i, j) + h * hs, hs) * scale - m) * add;
      const float* vj = v.Row(i, j) + h * hs;
      for (int d = 0; d < hs; ++d) out[d] += p * vj[d];
    }
  }
}

__global__ void DeltaKernel(float* delta, View dout, View o, int b, int tq, int nh, int hs) {
  TALLY_GRID_STRIDE(x, int64_t(b) * nh * tq) {
    const int r = int(x % tq), h = int(x / tq % nh), i = int(x / tq / nh);
    delta[x] = Dot(dout.Row(i, r) + h * hs, o.Row(i, r) + h * hs, hs);
  }
}

// dQ: one thread a (sequence, head, query).
__global__ void QueryGradKernel(MutableView dq, View q, View k, View v, View dout,
                                const float* lse, const float* delta, int b, int nh, int hs,
                                Block at) {
  TALLY_GRID_STRIDE(x, int64_t(b) * nh * at.tq) {
    const int r = int(x % at.tq), h = int(x / at.tq % nh), i = int(x / at.tq / nh);
    const float scale = 1.0f / sqrtf(float(hs));
    const float* qr = q.Row(i, r) + h * hs;
    const float* dy = dout.Row(i, r) + h * hs;
    float* out = dq.Row(i, r) + h * hs;
    const int64_t row = (int64_t(i) * nh + h) * at.tq + r;
    const int n = at.Visible(r);
    for (int j = 0; j < n; ++j) {
      const float p = expf(Dot(qr, k.Row(i, j) + h * hs, hs) * scale - lse[row]);
      const float ds = p * (Dot(dy, v.Row(i, j) + h * hs, hs) - delta[row]) * scale;
      const float* kj = k.Row(i, j) + h * hs;
      for (int d = 0; d < hs; ++d) out[d] += ds * kj[d];
    }
  }
}

// dK, dV: one thread a (sequence, head, key), over the queries that see it.
__global__ void KeyGradKernel(MutableView dk, MutableView dv, View q, View k, View v, View dout,
                              const float* lse, const float* delta, int b, int nh, int hs,
                              Block at) {
  TALLY_GRID_STRIDE(x, int64_t(b) * nh * at.tk) {
    const int j = int(x % at.tk), h = int(x / at.tk % nh), i = int(x / at.tk / nh);
    const float scale = 1.0f / sqrtf(float(hs));
    const float* kj = k.Row(i, j) + h * hs;
    const float* vj = v.Row(i, j) + h * hs;
    float* dkj = dk.Row(i, j) + h * hs;
    float* dvj = dv.Row(i, j) + h * hs;
    for (int r = 0; r < at.tq; ++r) {
      if (at.Visible(r) <= j) continue;
      const int64_t row = (int64_t(i) * nh + h) * at.tq + r;
      const float* qr = q.Row(i, r) + h * hs;
      const float* dy = dout.Row(i, r) + h * hs;
      const float p = expf(Dot(qr, kj, hs) * scale - lse[row]);
      const float ds = p * (Dot(dy, vj, hs) - delta[row]) * scale;
      for (int d = 0; d < hs; ++d) {
        dvj[d] += p * dy[d];
        dkj[d] += ds * qr[d];
      }
    }
  }
}

View Const(cpu::Rows<const float> x) { return {x.data, x.batch, x.ld}; }
MutableView Mutable(cpu::Rows<float> x) { return {x.data, x.batch, x.ld}; }
Block BlockOf(cpu::BlockPositions at) { return {at.q_start, at.tq, at.k_start, at.tk}; }

}  // namespace

absl::Status BlockAttentionStart(cpu::Rows<float> o, float* lse, int b, int tq, int c, int nh) {
  TALLY_LAUNCH(StartKernel, Blocks(int64_t(b) * tq * c), o.data, o.batch, o.ld, lse, b, tq, c, nh);
  return absl::OkStatus();
}

absl::Status BlockAttentionForward(cpu::Rows<float> o, float* lse, cpu::Rows<const float> q,
                                   cpu::Rows<const float> k, cpu::Rows<const float> v, int b,
                                   int c, int nh, cpu::BlockPositions at) {
  if (at.Masked()) return absl::OkStatus();
  TALLY_LAUNCH(ForwardKernel, Blocks(int64_t(b) * nh * at.tq), Mutable(o), lse, Const(q),
               Const(k), Const(v), b, nh, c / nh, BlockOf(at));
  return absl::OkStatus();
}

absl::Status AttentionDelta(float* delta, cpu::Rows<const float> dout, cpu::Rows<const float> o,
                            int b, int tq, int c, int nh) {
  TALLY_LAUNCH(DeltaKernel, Blocks(int64_t(b) * nh * tq), delta, Const(dout), Const(o), b, tq, nh,
               c / nh);
  return absl::OkStatus();
}

absl::Status BlockAttentionBackward(cpu::Rows<float> dq, cpu::Rows<float> dk, cpu::Rows<float> dv,
                                    cpu::Rows<const float> q, cpu::Rows<const float> k,
                                    cpu::Rows<const float> v, cpu::Rows<const float> dout,
                                    const float* lse, const float* delta, int b, int c, int nh,
                                    cpu::BlockPositions at) {
  if (at.Masked()) return absl::OkStatus();
  const int hs = c / nh;
  TALLY_LAUNCH(QueryGradKernel, Blocks(int64_t(b) * nh * at.tq), Mutable(dq), Const(q), Const(k),
               Const(v), Const(dout), lse, delta, b, nh, hs, BlockOf(at));
  TALLY_LAUNCH(KeyGradKernel, Blocks(int64_t(b) * nh * at.tk), Mutable(dk), Mutable(dv), Const(q),
               Const(k), Const(v), Const(dout), lse, delta, b, nh, hs, BlockOf(at));
  return absl::OkStatus();
}

}  // namespace tally::cuda
