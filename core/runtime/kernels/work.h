// The work a rank's kernels count into its timeline (core/runtime/timeline.h), for a replay on
// a modelled GPU (core/train/cluster.h): every device's kernels count the same work for the
// same call, whatever they run, and the planner (lab/plan/compute.cc) counts the same
// for the same model.
//
// Matmuls, by each call's shape (an m×k by k×n product, `batch` of them in one call):
//   FLOPs  2·m·n·k·batch
//   bytes  2·batch·(m·k + k·n + m·n)   (bf16 operands and result)
//   linear     one call forward (n×C by C×OC); two backward (dx and dW: the same FLOPs
//              and bytes)
//   attention  Q·Kᵀ and the probabilities times V, each one call of b·nh products of
//              T×(C/nh) by (C/nh)×T (or T×T by T×(C/nh)) forward; four backward
// Memory-bound passes, by the elements read and written, kActivationBytes each (a GPU run
// keeps its activations in bf16), the optimizer's kOptimizerBytes a parameter:
//   LayerNorm   2·n·C forward (x in, y out); 4·n·C backward (dy and x in, dx in and out)
//   GELU        2·n forward; 3·n backward
//   residual    3·n (y += x)
//   softmax     attention's b·nh·T² probabilities: 2 forward (scores in, probabilities
//               out), 3 backward (probabilities and their gradient in, the scores' out)
//   cross-entropy  the logits (n × vocab): 1 (the max), 2 (exp and sum), 2 (normalise,
//               loss) forward, 2 backward
//   AdamW       kOptimizerBytes a parameter: fp32 master weight, gradient, m and v in
//               (16 bytes), weight, m and v out (12)
// Other passes (bias additions, casts, copies, embedding lookups, the gradient norm) are
// not counted: they are a small part of a step at any size worth modelling.
#pragma once

#include <cstdint>

#include "core/runtime/timeline.h"

namespace tally {

constexpr double kActivationBytes = 2;
constexpr double kOptimizerBytes = 28;

inline void CountMatmuls(double m, double n, double k, double batch, int64_t calls) {
  ComputeWork w;
  w.AddMatmuls(2.0 * m * n * k * batch, 2.0 * batch * (m * k + k * n + m * n), calls);
  CountWork(w);
}
inline void CountPass(double elements, double bytes_each = kActivationBytes) {
  ComputeWork w;
  w.memory_bytes = elements * bytes_each;
  CountWork(w);
}

inline void CountLinearForward(int n, int c, int oc) { CountMatmuls(n, oc, c, 1, 1); }
inline void CountLinearBackward(int n, int c, int oc) { CountMatmuls(n, oc, c, 1, 2); }
inline void CountAttentionForward(int b, int t, int c, int nh) {
  CountMatmuls(t, t, double(c) / nh, double(b) * nh, 2);
  CountPass(2.0 * b * nh * double(t) * t);
}
inline void CountAttentionBackward(int b, int t, int c, int nh) {
  CountMatmuls(t, t, double(c) / nh, double(b) * nh, 4);
  CountPass(3.0 * b * nh * double(t) * t);
}
inline void CountLayerNormForward(int n, int c) { CountPass(2.0 * n * c); }
inline void CountLayerNormBackward(int n, int c) { CountPass(4.0 * n * c); }
inline void CountGeluForward(int64_t n) { CountPass(2.0 * double(n)); }
inline void CountGeluBackward(int64_t n) { CountPass(3.0 * double(n)); }
inline void CountResidual(int64_t n) { CountPass(3.0 * double(n)); }
// The cross-entropy's passes over n rows of `vocab` logits: `passes` of 1, 2, 2 (forward)
// and 2 (backward).
inline void CountLogitsPass(int n, int vocab, int passes) {
  CountPass(double(passes) * n * double(vocab));
}
inline void CountAdamW(int64_t n) { CountPass(double(n), kOptimizerBytes); }

}  // namespace tally
