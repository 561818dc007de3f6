// The activation memory of tally's GPT as closed forms of the shape: what
// gpt_activations.cc allocates (NewActivations, EnsureScratch), and what a planner predicts from the options alone
// (lab/report/report.h's PredictedMemory, tally_plan). One micro-batch of b sequences of T
// tokens, n = b·T rows, C channels, tp ranks of tensor parallelism (C/tp and 4C/tp the
// split widths, nh/tp the heads), R rows between the split layers (n/tp under sequence
// parallelism, else n), V_l the rank's vocabulary rows, on a chunk of L layers:
//
//   fp32      R·C (the chunk's input) + L·(2R·C + 4R + b·(nh/tp)·T² + n·4C/tp)
//             + [last] 2R                    (the residuals, LayerNorm statistics, the
//                                             attention probabilities, the MLP's hidden
//                                             layer before GELU, ln_f's statistics)
//   operands  L·(2n·C + n·C/tp + 3n·C/tp + n·4C/tp) + [last] n·C
//                                            (what the matmuls read: the LayerNorms'
//                                             outputs, attention's output, QKV, the GELU's
//                                             output; bf16 under bf16 matmul inputs)
//   ids       2n int32 (tokens and targets)
//   head      [last] 2n·V_l + n fp32 (logits, probabilities, per-token losses)
//
// With E experts (top k) each layer's MLP terms are instead n·k·C (the rows the experts
// take) + N·n·k·4C/tp (hidden) + n·k·C (outputs) in fp32 and n·k·C + N·n·k·4C/tp in
// operands, N the expert-parallel ranks, which add N·n·k·C twice to each (the rows that
// arrive and those on the wire) under expert parallelism. A micro-batch whose forward is
// recomputed keeps its ids and its input (R·C fp32) only. Under selective recompute
// (attention's probabilities made again in backward, block.h) no layer keeps its
// b·(nh/tp)·T²: the scratch holds one. Under layer recompute (full recompute without a
// pipeline: each layer's forward again, from its kept input, just before its backward) a
// layer keeps only its output (R·C fp32, the next layer's input) and the operands only
// ln_f's n·C: one layer's room (CountLayerRoom) holds the rest, for every layer in turn.
//
// The scratch, one per model and reused from layer to layer: 4C/tp·n (N·n·k·4C/tp with
// experts) + 3n·C/tp + n·C + the attention backward's (the kernels': T² on the CPU,
// (nh/tp)·T² on a GPU) + R·C, + R·C + n·C under sequence parallelism, + n·E + n·k·C
// (+ 2N·n·k·C) with experts, + b·(nh/tp)·T² under selective recompute; and 3n fp32 for
// the loss.
//
// Under context parallelism over cp ranks (sequence_split.h) T above is T/cp, the
// positions of each sequence on the rank; a layer keeps b·K (K = the split's Kept for one
// sequence) instead of b·(nh/tp)·T² probabilities, the scratch has no attention backward
// room and holds instead the position table's rows of the rank's positions, T·C.
#pragma once

#include <cstdint>

#include "core/model/config.h"

namespace tally::model {

// What a micro-batch's activations leave to backward to make again (gpt.h SetRecompute).
enum class Recompute {
  kNone,
  kAttention,  // selective: attention's probabilities (block.h)
  kLayers,     // full, layer by layer: all of a layer but its output
};

// What the sizes depend on besides the micro-batch.
struct ActivationShape {
  GPTConfig config;
  int tp = 1;
  bool sequence_parallel = false;
  int expert_ranks = 1;           // N: the ranks each layer's experts are split over
  bool expert_parallel = false;   // the experts run through an ExpertSplit (N ranks)
  int64_t vocab_local = 0;        // V_l: the rank's rows of the token embedding
  int64_t attention_scratch = 0;  // the kernels' AttentionBackward scratch, elements
  Recompute recompute = Recompute::kNone;
  int cp = 1;                  // ranks each sequence is split over
  int64_t attention_kept = 0;  // with cp > 1: K, what a layer keeps for attention a sequence

  int64_t Rows(int64_t n) const { return sequence_parallel ? n / tp : n; }
  int64_t Positions() const { return config.seq_len / cp; }  // T on this rank
};

// One micro-batch's activations on a chunk, in elements of each kind.
struct MicroBatchActivations {
  int64_t fp32 = 0, operands = 0, ids = 0, head = 0;
  // Bytes, the operands of `operand_bytes` each.
  int64_t Bytes(int64_t operand_bytes) const {
    return 4 * (fp32 + ids + head) + operand_bytes * operands;
  }
};

// `whole`: everything backward needs; otherwise (recompute) the ids and the input.
MicroBatchActivations CountActivations(const ActivationShape& s, int64_t b, int64_t layers,
                                       bool last, bool whole);
// The scratch's fp32 elements (without the loss's 3n).
int64_t CountScratch(const ActivationShape& s, int64_t b);
// Under layer recompute, the room of one layer's activations but its output (one per
// model, beside the scratch): 2n·C + n·C/tp + 3n·C/tp + n·4C/tp operands (the MLP's as
// above with experts) and R·C + 4R + b·(nh/tp)·T² + n·4C/tp fp32; none otherwise.
MicroBatchActivations CountLayerRoom(const ActivationShape& s, int64_t b);

}  // namespace tally::model
