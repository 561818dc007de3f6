// Tensor parallelism as Megatron-LM splits a transformer (Shoeybi et al., 2019): the
// layers, and the two operators that connect them, over the tp ranks of a group.
//
//   f: identity in forward; in backward, the sum of the input's gradient over the group.
//   g: the sum over the group in forward; identity in backward.
//
// A column-parallel linear (weight split by output rows) after f, then a row-parallel
// linear (weight split by input columns) before g, compute one whole linear pair with one
// all-reduce in each direction and no communication between them:
//
//   MLP:        x ─ f ─ c_fc (column) ─ GELU on the slice ─ c_proj (row) ─ g ─ + bias ─
//   attention:  x ─ f ─ c_attn (column, whole heads) ─ attention per head ─ c_proj (row) ─ g ─
//
// so a layer costs 4 all-reduces of its (b·s, h) activations per step, 2 forward and
// 2 backward: 8(N-1)/N·b·s·h·4 bytes per rank with the ring. The token embedding is split
// by vocabulary rows (an all-reduce of the looked-up rows forward), and the tied LM head's
// cross-entropy is computed from the vocabulary slices with three all-reduces of one
// float per row (max, sum of exponentials, target logit): the full logits never exist.
//
// Shapes: n rows (b·s tokens); activations row-major. With one rank (tp.size() == 1)
// every function is its serial module, operation for operation.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "runtime/comm/communicator.h"

namespace tally::parallel {

// A rank's tensor-parallel group, or none (one rank).
class TensorParallel {
 public:
  TensorParallel() = default;
  explicit TensorParallel(comm::Communicator* group) : group_(group) {}

  int size() const { return group_ != nullptr ? group_->size() : 1; }
  int rank() const { return group_ != nullptr ? group_->rank() : 0; }
  comm::Communicator* group() const { return group_; }

  // data[0, n) reduced over the group in place (f's backward, g's forward), booked in the
  // ledger under `scope`. One rank: nothing.
  absl::Status AllReduce(float* data, int64_t n, const std::string& scope,
                         comm::ReduceOp op = comm::ReduceOp::kSum) const;

 private:
  comm::Communicator* group_ = nullptr;
};

// y (n, out_local) = x (n, in) · W_rᵀ + b_r: rank r holds rows [r·out_local, ...) of W
// (out, in) and of b (b may be null). No communication: x arrives through f.
void ColumnParallelLinearForward(float* y, const float* x, const float* w, const float* b,
                                 int n, int in, int out_local);
// dx = Σ over ranks of dy_r · W_r (f's backward: an all-reduce under `scope`);
// dW_r += dy_rᵀ · x; db_r += Σ_rows dy_r (db may be null).
absl::Status ColumnParallelLinearBackward(const TensorParallel& tp, float* dx, float* dw,
                                          float* db, const float* dy, const float* x,
                                          const float* w, int n, int in, int out_local,
                                          const std::string& scope);

// y (n, out) = g(Σ over ranks of x_r · W_rᵀ) + b: rank r holds columns [r·in_local, ...)
// of W (out, in) and x_r (n, in_local), the matching slice of the input; b (replicated,
// may be null) is added once, after the all-reduce.
absl::Status RowParallelLinearForward(const TensorParallel& tp, float* y, const float* x,
                                      const float* w, const float* b, int n, int in_local,
                                      int out, const std::string& scope);
// dx_r = dy · W_r; dW_r += dyᵀ · x_r; db += Σ_rows dy. No communication: dy is the same
// on every rank (g's backward is the identity).
void RowParallelLinearBackward(float* dx, float* dw, float* db, const float* dy, const float* x,
                               const float* w, int n, int in_local, int out);

// x[i] (n = b·t rows, c) = wte[tokens[i]] + wpe[i % t]: rank r holds vocabulary rows
// [r·vocab_local, ...) of wte; each rank looks up its own tokens (zero rows for the
// others), the all-reduce completes every row, and wpe (replicated) is added after it.
absl::Status VocabParallelEmbeddingForward(const TensorParallel& tp, float* x,
                                           const int32_t* tokens, const float* wte_local,
                                           const float* wpe, int b, int t, int c,
                                           int vocab_local, const std::string& scope);
// dwte_r += dx of the rank's own tokens; dwpe += dx. No communication.
void VocabParallelEmbeddingBackward(const TensorParallel& tp, float* dwte_local, float* dwpe,
                                    const float* dx, const int32_t* tokens, int b, int t, int c,
                                    int vocab_local);

// The softmax cross-entropy over the whole vocabulary (its first `vocab` entries; the
// padding after them takes no part) from each rank's logits (n, vocab_local): losses (n)
// on every rank, and this rank's slice of the softmax in probs (n, vocab_local).
// `scratch` holds 3·n floats.
absl::Status VocabParallelCrossEntropyForward(const TensorParallel& tp, float* losses,
                                              float* probs, float* scratch, const float* logits,
                                              const int32_t* targets, int n, int vocab_local,
                                              int vocab, const std::string& scope);
// dlogits_r = (probs_r - onehot_r(targets)) · dloss (dlogits may be probs itself).
void VocabParallelCrossEntropyBackward(const TensorParallel& tp, float* dlogits,
                                       const float* probs, const int32_t* targets, float dloss,
                                       int n, int vocab_local);

}  // namespace tally::parallel
