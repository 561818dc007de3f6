// One pre-LayerNorm transformer block, with explicit forward and backward.
//
// B = batch, T = sequence, C = channels, NH = heads, N = B·T rows.
//
//   x ─┬─ LN1 ─ c_attn ─ attention ─ c_proj ─(+)─┬─ LN2 ─ c_fc ─ GELU ─ c_proj ─(+)─ out
//      └──────────────────────────────────────────┘└─────────────────────────────────┘
//
// Forward reads x (N, C) and writes every activation the backward needs into `acts`.
// Backward takes d(out) in `dresidual` and leaves d(x) there (the residual stream's
// gradient flows straight through both additions), adding to the block's weight
// gradients in `grads`.
//
// The linears run through a LayerSplit (layer_split.h). Split over tp ranks (Megatron's
// tensor parallelism, core/parallel/tensor_parallel.h) each rank holds NH/tp whole heads of
// c_attn and 4C/tp columns of c_fc: the attention branch and the MLP branch are each a
// column-parallel linear and a row-parallel one, so the widths marked "/tp" below are
// this rank's slice (tp = split.size(); 1 when serial). The residual stream (x, residual2, out) and
// the LayerNorms' statistics have R rows: N, or N/tp under sequence parallelism, where
// ln1 and ln2 keep the whole N rows the linears read (gathered by f).
//
// With a SequenceSplit over cp ranks (sequence_split.h: context parallelism) T is this
// rank's T/cp positions of each sequence, attention runs through the split, and `att`
// holds what it keeps for backward (SequenceSplit::Kept) instead of the probabilities;
// qkv and the attention output stay fp32.
#pragma once

#include "absl/status/status.h"
#include "core/model/config.h"
#include "core/model/parameters.h"
#include "core/model/layer_split.h"
#include "core/model/moe.h"
#include "core/model/sequence_split.h"
#include "core/runtime/kernels/kernels.h"

namespace tally::model {

// The block's saved activations, each (N, ·) for one micro-batch. Those a matmul reads
// (TypedPtr) are of the kernels' activation_operand_type(): bf16 under mixed precision,
// rounded once as they are made (what the matmul would round them to), fp32 otherwise;
// the rest are fp32.
struct BlockActivations {
  TypedPtr ln1;      // (N, C)
  float* ln1_mean;   // (R)
  float* ln1_rstd;   // (R)
  TypedPtr qkv;      // (N, 3C/tp)
  float* att;        // (B, NH/tp, T, T) softmax probabilities; null: not kept (below)
  TypedPtr atty;     // (N, C/tp) attention output, before c_proj
  float* residual2;  // (R, C) x + attention branch
  TypedPtr ln2;      // (N, C)
  float* ln2_mean;   // (R)
  float* ln2_rstd;   // (R)
  float* fch;        // (N, 4C/tp) c_fc output
  TypedPtr fch_gelu;  // (N, 4C/tp)
  float* out;        // (R, C) residual2 + MLP branch: the next block's input
  // With experts the MLP branch is moe.h's: its routing and buffers (fch and fch_gelu
  // unused).
  MoeActivations moe;
};

// Scratch reused from layer to layer.
struct BlockScratch {
  float* d4c = nullptr;   // (N, 4C/tp); with experts (N·k, 4C)
  float* dqkv = nullptr;  // (N, 3C/tp); in forward, qkv in fp32 before it is kept in bf16
  float* dc = nullptr;    // (N, C); in forward, the attention output in fp32 likewise
  float* dtt = nullptr;   // (T, T)
  // Selective recompute (Korthikanti et al. 2022): the one (B, NH/tp, T, T) room every
  // layer's attention probabilities share when BlockActivations::att is null. Forward
  // writes them here; backward computes them here again from the kept qkv (the same
  // kernel on the same operands: the same values) just before it needs them. Null
  // otherwise.
  float* att = nullptr;
  // Sequence parallelism only (null otherwise): a LayerNorm's output on this rank's rows
  // (N/tp, C; of the matmuls' operand type), a whole (N, C) activation or gradient, and
  // the collectives' (N, C).
  float* rows = nullptr;
  float* whole = nullptr;
  float* comm = nullptr;
  MoeScratch moe;  // with experts
};

// Layer `layer`'s all-reduces are booked under scopes layer{layer}.attn and .mlp. The
// block computes with `k` (core/runtime/kernels/kernels.h); every pointer is on k's device.
// `experts`: where a mixture of experts' experts are (moe.h; null: all on this rank);
// `sequence`: how each sequence is split (null: whole here), its attention's calls booked
// under layer{layer}.context.
absl::Status BlockForward(Kernels& k, const GPTConfig& config, const LayerSplit& split,
                          int layer, int b, const BlockTensors& w, const float* x,
                          const BlockActivations& acts, const BlockScratch& scratch,
                          const ExpertSplit* experts = nullptr,
                          const SequenceSplit* sequence = nullptr);

// `dloss` weights each token's loss (and an MoE layer's auxiliary loss, moe.h).
absl::Status BlockBackward(Kernels& k, const GPTConfig& config, const LayerSplit& split,
                           int layer, int b, const BlockTensors& w, const BlockTensors& g,
                           const float* x, const BlockActivations& acts,
                           const BlockScratch& scratch, float dloss, float* dresidual,
                           const ExpertSplit* experts = nullptr,
                           const SequenceSplit* sequence = nullptr);

}  // namespace tally::model
