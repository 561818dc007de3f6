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
#include <vector>

#include "absl/status/status.h"
#include "optim/optimizer.h"
#include "runtime/comm/communicator.h"
#include "runtime/kernels/kernels.h"

namespace tally::parallel {

// A rank's tensor-parallel group, or none (one rank), and whether it runs Megatron's
// sequence parallelism.
//
// Sequence parallelism (Korthikanti et al., 2022): between the parallel linears, where
// every rank used to hold the same whole activations, each rank holds its part of the
// sequence instead: positions [r·t/N, (r+1)·t/N) of every sequence, stored (b, t/N, c),
// and runs the LayerNorms, the residual additions and the embedding's position term on
// them. f becomes an all-gather along the sequence (backward: reduce-scatter) and g a
// reduce-scatter (backward: all-gather): the same bytes as the two all-reduces, since an
// all-reduce is a reduce-scatter and an all-gather, with less activation memory. The
// LayerNorm gains and biases and the position table then see only their rank's tokens:
// their gradients are summed over the group once per step (ReduceSequenceParallelGrads).
class TensorParallel {
 public:
  TensorParallel() = default;
  // `device`: where the layers' activations are (the model's device), which the
  // group's collectives are told.
  explicit TensorParallel(comm::Communicator* group, bool sequence_parallel = false,
                          Device device = Device::CPU())
      : group_(group), sequence_parallel_(sequence_parallel && group != nullptr), device_(device) {}

  int size() const { return group_ != nullptr ? group_->size() : 1; }
  int rank() const { return group_ != nullptr ? group_->rank() : 0; }
  comm::Communicator* group() const { return group_; }
  bool sequence_parallel() const { return sequence_parallel_; }
  // Rows of the activations between the parallel linears for n = b·t tokens: this rank's
  // n/N under sequence parallelism, all n otherwise.
  int Rows(int n) const { return sequence_parallel_ ? n / size() : n; }
  Device device() const { return device_; }
  // to[0, count) = from[0, count), on the activations' device.
  absl::Status CopyFloats(float* to, const float* from, int64_t count) const;

  // data[0, n) reduced over the group in place, booked in the ledger under `scope`. One
  // rank: nothing.
  absl::Status AllReduce(float* data, int64_t n, const std::string& scope,
                         comm::ReduceOp op = comm::ReduceOp::kSum) const;
  // Sequence parallelism's collectives over (b, t, c) activations: every rank's
  // (b, t/N, c) part into the whole (b, t, c); the whole's sum over the group, each rank
  // keeping its part. `scratch` holds b·t·c floats.
  absl::Status SequenceAllGather(const float* part, float* whole, float* scratch, int b, int t,
                                 int c, const std::string& scope) const;
  absl::Status SequenceReduceScatter(const float* whole, float* part, float* scratch, int b, int t,
                                     int c, const std::string& scope) const;

 private:
  comm::Communicator* group_ = nullptr;
  bool sequence_parallel_ = false;
  Device device_ = Device::CPU();
};

// Each layer computes with `k`, the rank's kernels (runtime/kernels/kernels.h), on
// pointers of k's device. The shapes of one call: b sequences of t tokens. `rows` is the
// activations' rows on this rank between the parallel layers (TensorParallel::Rows), n = b·t those
// inside. `scratch` (b·t·c floats, c the widest activation passed) is needed under sequence
// parallelism only; pass null otherwise.

// Column-parallel: W (out, in) split by output rows, rank r holding rows
// [r·out_local, ...) of W and of b (b may be null). Forward: x_whole = f(x), then
// y (n, out_local) = x_whole · W_rᵀ + b_r. Without sequence parallelism f is the identity
// and x_whole is x itself (pass null); with it, x (rows, in) is gathered into x_whole
// (n, in), which backward needs.
absl::Status ColumnParallelLinearForward(Kernels& k, const TensorParallel& tp, float* y,
                                         const float* x, float* x_whole, const float* w,
                                         const float* b, int batch, int t, int in, int out_local,
                                         float* scratch, const std::string& scope);
// dx_whole (n, in) = dy_r · W_r, the rank's part of the input's gradient, then f's
// backward: the sum over the group into dx (rows, in) — an all-reduce in place (dx is
// dx_whole) or a reduce-scatter. dW_r += dy_rᵀ · x_whole; db_r += Σ_rows dy_r (db may be
// null).
absl::Status ColumnParallelLinearBackward(Kernels& k, const TensorParallel& tp, float* dx,
                                          float* dx_whole, float* dw, float* db, const float* dy,
                                          const float* x_whole, const float* w, int batch, int t,
                                          int in, int out_local, float* scratch,
                                          const std::string& scope);

// Row-parallel: W (out, in) split by input columns, rank r holding columns
// [r·in_local, ...) and x_r (n, in_local), the matching slice of the input. Forward:
// y_whole (n, out) = x_r · W_rᵀ, then g: the sum over the group into y (rows, out) — an
// all-reduce in place (y is y_whole) or a reduce-scatter — and b (replicated, may be
// null) added once, after the sum.
absl::Status RowParallelLinearForward(Kernels& k, const TensorParallel& tp, float* y,
                                      float* y_whole, const float* x, const float* w,
                                      const float* b, int batch, int t, int in_local, int out,
                                      float* scratch, const std::string& scope);
// g's backward: dy (rows, out) gathered into dy_whole (n, out) under sequence
// parallelism (otherwise dy_whole is dy; pass null). Then dx_r = dy_whole · W_r,
// dW_r += dy_wholeᵀ · x_r, db += Σ_rows dy_whole.
absl::Status RowParallelLinearBackward(Kernels& k, const TensorParallel& tp, float* dx, float* dw,
                                       float* db, const float* dy, float* dy_whole, const float* x,
                                       const float* w, int batch, int t, int in_local, int out,
                                       float* scratch, const std::string& scope);

// x (rows, c) = wte[token] + wpe[position] over the rank's rows: rank r holds vocabulary
// rows [r·vocab_local, ...) of wte; each rank looks up its own tokens into x_whole (n, c)
// (zero rows for the others), the sum over the group completes every row (into x: an
// all-reduce in place, x_whole null, or a reduce-scatter), and wpe (replicated) is added
// after it.
absl::Status VocabParallelEmbeddingForward(Kernels& k, const TensorParallel& tp, float* x,
                                           float* x_whole, const int32_t* tokens,
                                           const float* wte_local, const float* wpe, int batch,
                                           int t, int c, int vocab_local, float* scratch,
                                           const std::string& scope);
// dwte_r += dx of the rank's own tokens (gathered into dx_whole first under sequence
// parallelism); dwpe += dx of the rank's rows.
absl::Status VocabParallelEmbeddingBackward(Kernels& k, const TensorParallel& tp, float* dwte_local,
                                            float* dwpe, const float* dx, float* dx_whole,
                                            const int32_t* tokens, int batch, int t, int c,
                                            int vocab_local, float* scratch,
                                            const std::string& scope);

// The softmax cross-entropy over the whole vocabulary (its first `vocab` entries; the
// padding after them takes no part) from each rank's logits (n, vocab_local): losses (n)
// on every rank, and this rank's slice of the softmax in probs (n, vocab_local).
// `scratch` holds 3·n floats.
absl::Status VocabParallelCrossEntropyForward(Kernels& k, const TensorParallel& tp, float* losses,
                                              float* probs, float* scratch, const float* logits,
                                              const int32_t* targets, int n, int vocab_local,
                                              int vocab, const std::string& scope);
// dlogits_r = (probs_r - onehot_r(targets)) · dloss (dlogits may be probs itself).
absl::Status VocabParallelCrossEntropyBackward(Kernels& k, const TensorParallel& tp, float* dlogits,
                                               const float* probs, const int32_t* targets,
                                               float dloss, int n, int vocab_local);

// Under sequence parallelism: sums the gradients of the per-token replicas (the
// segments marked per_token: LayerNorms, position table) over the group, in place, once
// per step (label sequence_parallel, phase backward). Otherwise nothing.
absl::Status SumPerTokenGradients(const TensorParallel& tp, float* grads,
                                  const std::vector<optim::Segment>& segments);

}  // namespace tally::parallel
