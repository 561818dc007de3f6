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
#include "core/model/layer_split.h"
#include "core/model/parameters.h"
#include "core/parallel/sent_as.h"
#include "core/runtime/comm/communicator.h"
#include "core/runtime/comm/ledger/expected_calls.h"
#include "core/runtime/kernels/kernels.h"

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
// their gradients are summed over the group once per step (SumPerTokenGradients,
// step_end.h).
class TensorParallel final : public model::LayerSplit {
 public:
  TensorParallel() = default;
  // `device`: where the layers' activations are (the model's device), which the
  // group's collectives are told. `activations`: the type the activations and their
  // gradients travel as (bf16 under mixed precision; sent_as.h); the cross-entropy's
  // per-row statistics always travel as fp32.
  explicit TensorParallel(comm::Communicator* group, bool sequence_parallel = false,
                          Device device = Device::CPU(), DType activations = DType::kF32)
      : group_(group),
        sequence_parallel_(sequence_parallel && group != nullptr),
        device_(device),
        activations_(activations) {}

  int size() const override { return group_ != nullptr ? group_->size() : 1; }
  int rank() const override { return group_ != nullptr ? group_->rank() : 0; }
  comm::Communicator* group() const { return group_; }
  // Rows() (model::LayerSplit) is this rank's n/N under sequence parallelism, all n
  // otherwise.
  bool sequence_parallel() const override { return sequence_parallel_; }
  Device device() const { return device_; }
  // to[0, count) = from[0, count) (of one type), on the activations' device.
  absl::Status Copy(TypedPtr to, ConstTypedPtr from, int64_t count) const;

  // data[0, n) reduced over the group in place, travelling as `sent_as`, booked in the
  // ledger under `scope`. One rank: nothing.
  absl::Status AllReduce(float* data, int64_t n, const std::string& scope,
                         comm::ReduceOp op = comm::ReduceOp::kSum,
                         const SentAs& sent_as = SentAs()) const;
  // Sequence parallelism's collectives over (b, t, c) activations: every rank's
  // (b, t/N, c) part into the whole (b, t, c); the whole's sum over the group, each rank
  // keeping its part. `scratch` holds b·t·c floats. A gather's values may be bf16 (a
  // LayerNorm's output kept for a bf16 matmul): they travel as they are.
  absl::Status SequenceAllGather(ConstTypedPtr part, TypedPtr whole, float* scratch, int b, int t,
                                 int c, const std::string& scope) const;
  absl::Status SequenceReduceScatter(const float* whole, float* part, float* scratch, int b, int t,
                                     int c, const std::string& scope) const;

  // The layers (model::LayerSplit), split as the comment at the top of this file says.
  // Column-parallel: f, then y = x_whole · W_rᵀ + b_r; backward: dx_whole = dy_r · W_r and
  // f's backward, the sum over the group into dx (an all-reduce in place, or a
  // reduce-scatter). Row-parallel: y_whole = x_r · W_rᵀ, g (the sum over the group into
  // y: an all-reduce in place, or a reduce-scatter), then the bias once; backward: g's
  // backward (identity, or the all-gather of dy into dy_whole). The embedding: each rank
  // looks up its own tokens (zero rows for the others) and g completes every row, then
  // the positions are added; the cross-entropy: three all-reduces of one float per row.
  absl::Status ColumnLinearForward(Kernels& k, float* y, ConstTypedPtr x, TypedPtr x_whole,
                                   ConstTypedPtr w, const float* b, int batch, int t, int in,
                                   int out_local, float* scratch,
                                   const std::string& scope) const override;
  absl::Status ColumnLinearBackward(Kernels& k, float* dx, float* dx_whole, float* dw, float* db,
                                    const float* dy, ConstTypedPtr x_whole, ConstTypedPtr w,
                                    int batch, int t, int in, int out_local, float* scratch,
                                    const std::string& scope) const override;
  absl::Status RowLinearForward(Kernels& k, float* y, float* y_whole, ConstTypedPtr x,
                                ConstTypedPtr w, const float* b, int batch, int t, int in_local,
                                int out, float* scratch, const std::string& scope) const override;
  absl::Status RowLinearBackward(Kernels& k, float* dx, float* dw, float* db, const float* dy,
                                 float* dy_whole, ConstTypedPtr x, ConstTypedPtr w, int batch,
                                 int t, int in_local, int out, float* scratch,
                                 const std::string& scope) const override;
  absl::Status EmbeddingForward(Kernels& k, float* x, float* x_whole, const int32_t* tokens,
                                const float* wte_local, const float* wpe, int batch, int t, int c,
                                int vocab_local, float* scratch,
                                const std::string& scope) const override;
  absl::Status EmbeddingBackward(Kernels& k, float* dwte_local, float* dwpe, const float* dx,
                                 float* dx_whole, const int32_t* tokens, int batch, int t, int c,
                                 int vocab_local, float* scratch,
                                 const std::string& scope) const override;
  absl::Status CrossEntropyForward(Kernels& k, float* losses, float* probs, float* scratch,
                                   const float* logits, const int32_t* targets, int n,
                                   int vocab_local, int vocab,
                                   const std::string& scope) const override;
  absl::Status CrossEntropyBackward(Kernels& k, float* dlogits, const float* probs,
                                    const int32_t* targets, float dloss, int n,
                                    int vocab_local) const override;

 private:
  comm::Communicator* group_ = nullptr;
  bool sequence_parallel_ = false;
  Device device_ = Device::CPU();
  SentAs activations_;
};

// The bytes: every call the layers above make in a step, as the ledger books it
// (core/runtime/comm/ledger/expected_calls.h), on one rank of the tp group. A step of
// `micro_batches` micro-batches of `rows` = micro_batch_size·seq_len tokens, over
// (rows, n_embd) activations. Per micro-batch, forward: each layer's attention and MLP and
// the embedding each an all-reduce (sequence parallelism: a layer's all-gather and
// reduce-scatter each, the embedding's reduce-scatter, the LM head's all-gather), and
// cross-entropy's three all-reduces of one float per row; backward: each layer's two and
// the LM head (sequence parallelism: the other way round). With pipeline recompute the
// forward's calls again in backward; with layer recompute the layers' forward calls.
// Ledger scopes: layer{i}.attn, layer{i}.mlp, embedding, lm_head, cross_entropy. The
// gradient norm's and the per-token replicas' sums are step_end.h's.
struct TensorParallelShape {
  int ranks = 1, rank = 0;       // the tp group
  std::vector<int> layers = {};  // the layers this rank holds
  bool experts = false;          // the layers' MLPs are experts (their rows routed: no closed form)
  bool embedding = false;        // holds the token embedding (the first stage)
  bool lm_head = false;          // holds the LM head and its loss (the last stage)
  bool sequence_parallel = false;
  int64_t micro_batches = 1, rows = 0, n_embd = 0;
  bool recompute = false;         // a pipeline stage's forward recomputed in backward
  bool recompute_layers = false;  // each layer's forward recomputed before its backward
  int64_t activation_bytes = 4;   // per value sent (bf16: 2)
};
comm::ExpectedCalls TensorParallelCalls(const TensorParallelShape& shape);

}  // namespace tally::parallel
