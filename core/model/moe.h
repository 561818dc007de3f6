// The mixture-of-experts MLP (Switch Transformer, Fedus et al. 2021; GShard, Lepikhin et
// al. 2020): E experts of the dense MLP's shape behind a learned router, each token sent
// to k of them.
//
// For a micro-batch of n tokens x (n, C) (the block's LN2 output), every number below
// in this order:
//
//   router     logits = x · W_rᵀ (n, E), no bias; p = softmax over the E experts, on the
//              host in fp32 with the exponentials summed in double (p_e = exp(l_e - max) /
//              Σ exp(l - max)).
//   top-k      each token's k most probable experts, the most probable first (ties: the
//              lower index first), weighted by their renormalised probabilities
//              w_j = p_{c_j} / Σ_{l<k} p_{c_l} (so with k = 1 every weight is 1 and the router
//              learns from the auxiliary loss alone).
//   capacity   with capacity_factor c > 0, expert e takes at most ⌈c·k·n/E⌉ tokens (past
//              n·k: no limit); the
//              choices are offered in priority order — every token's first choice in
//              token order, then every second choice, ... (GShard's order) — and an expert
//              that is full drops the rest: a dropped choice's output is zero (the residual
//              carries the token) but its weight keeps its share of the normalisation.
//              Every layout runs the same micro-batches, so every layout drops the same.
//   experts    expert e runs its kept tokens, in priority order, through c_fc, GELU and
//              c_proj: y = GELU(x_e·W1ᵀ + b1)·W2ᵀ + b2.
//   combine    out[i] = Σ w_j · y(i, c_j) over token i's kept choices, added in expert order.
//   aux loss   coef · E · Σ_e f_e · P_e with f_e = (choices of e before capacity) / (n·k) and
//              P_e = Σ_i p_ie / n (Switch's load balancing; Megatron's form for top-k), added
//              to the objective with the weight of the micro-batch's tokens in the global
//              batch: its gradient is d aux / d p_ie = coef·E·f_e / n · (dloss·n). Under
//              context parallelism (a sequence split over N ranks) n is the whole
//              micro-batch's tokens: each rank sums its choices and Σ_i p_ie over the split
//              (an all-reduce of 2E doubles a layer, as Megatron reduces its
//              tokens-per-expert over the tp × cp group), so every rank has the serial
//              run's aux loss, and each token's gradient is the serial one.
//
// Under expert parallelism (expert_split.h) a rank holds E/N of the experts: the kept rows
// go to their experts' ranks and the outputs come back (and the gradients the same ways in
// backward); a rank runs each of its experts over the rows from every rank, source by
// source in rank order, each source's in its priority order.
//
//   RETURN_IF_ERROR(MoeForward(k, config, layer, n, w, ln2, experts, acts, scratch, out));
//   ... MoeBackward(k, config, layer, n, w, g, ln2, experts, acts, scratch, dloss, dout, dln2);
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "core/model/config.h"
#include "core/model/expert_split.h"
#include "core/model/layer_split.h"
#include "core/model/sequence_split.h"
#include "core/model/parameters.h"
#include "core/runtime/kernels/kernels.h"

namespace tally::model {

// One micro-batch's routing through one layer's experts, on the host.
struct MoeRouting {
  int n = 0, k = 0, experts = 0;
  std::vector<float> probs;        // (n, E): the router's softmax
  std::vector<int32_t> choice;     // (n, k): experts, the most probable first
  std::vector<float> weight;       // (n, k): their renormalised probabilities
  std::vector<uint8_t> kept;       // (n, k): within capacity
  std::vector<int64_t> routed;     // (E): choices of each expert, before capacity
  // The kept choices by expert, in priority order: those of expert e are slots
  // [offset[e], offset[e + 1]), slot s holding token slot_token[s]'s choice slot_choice[s].
  std::vector<int64_t> offset;     // (E + 1)
  std::vector<int32_t> slot_token, slot_choice;
  double aux_loss = 0;             // coef · E · Σ f_e · P_e
  // What the load-balancing loss reads: each expert's choices (routed) and Σ_i p_ie over
  // `balance_tokens` tokens: these n, or under context parallelism the whole micro-batch's
  // (summed over the sequence split), so that f_e and P_e are the serial run's.
  std::vector<double> balance_routed, balance_probs;
  double balance_tokens = 0;
  // Under expert parallelism over N ranks: the rows sent to each rank and received from
  // it, and what each rank sent each of this rank's experts (N·E/N, source by source).
  std::vector<int64_t> send_rows, recv_rows, recv_counts;

  int64_t assignments() const { return int64_t(n) * k; }
  int64_t kept_count() const { return offset.empty() ? 0 : offset.back(); }
  int64_t tokens(int e) const { return offset[size_t(e) + 1] - offset[size_t(e)]; }
};

// Routes n tokens from the router's logits (n, E, host): softmax, top-k, capacity,
// groups, the auxiliary loss.
MoeRouting Route(const GPTConfig& config, const float* logits, int n);
// The auxiliary loss from r's balance statistics: coef·E·Σ_e routed_e/(N·k) · probs_e/N,
// N = balance_tokens.
void SetBalanceLoss(const GPTConfig& config, MoeRouting& r);

// The MoE branch's device buffers for one block: the kept choices' rows in priority order
// grouped by expert (n·k, C; the matmuls' operand type) and their outputs (n·k, C, fp32);
// the rows this rank's experts run, expert by expert (R rows: n·k, or under expert
// parallelism over N ranks at most N·n·k), their hidden activations (R, 4C, before and
// after GELU) and outputs (R, C); and under expert parallelism the rows as they arrive,
// source by source (`wire_x`, `wire_y`; R rows), else null.
struct MoeActivations {
  MoeRouting* routing = nullptr;
  TypedPtr x;
  float* y = nullptr;
  TypedPtr expert_x;
  float* hidden = nullptr;
  TypedPtr hidden_gelu;
  float* expert_y = nullptr;
  TypedPtr wire_x;
  float* wire_y = nullptr;
};
// Scratch: the router's logits (n, E), rows (n·k, C) for the outputs' gradients, d_hidden
// (R, 4C); under expert parallelism rows (R, C) the experts' gradients travel and are
// computed in.
struct MoeScratch {
  float* logits = nullptr;
  float* rows = nullptr;
  float* d_hidden = nullptr;
  float* expert_rows = nullptr;
  float* wire_rows = nullptr;
};

// out (n, C) = the combined expert outputs for x (n, C) = ln2 of layer `layer`, routing
// into a.routing; `experts`: where the experts are (null: all here); `sequence`: the
// sequence split the n rows are part of (null: none), over which the load-balancing
// loss's statistics are summed (capacity must then be unlimited). Each expert's c_fc
// and c_proj run through `split` (layer_split.h: column- and row-parallel under tensor
// parallelism, its calls under scope layer{l}.experts, without sequence parallelism),
// the router on every rank alike.
absl::Status MoeForward(Kernels& k, const GPTConfig& config, const LayerSplit& split, int layer,
                        int n, const BlockTensors& w, ConstTypedPtr x, const ExpertSplit* experts,
                        const SequenceSplit* sequence, const MoeActivations& a,
                        const MoeScratch& s, float* out);
// From dout (n, C): the experts' and the router's gradients into g, and dx (n, C) =
// d(loss)/d(x) through both; `dloss` weights the auxiliary loss as each token's loss.
absl::Status MoeBackward(Kernels& k, const GPTConfig& config, const LayerSplit& split,
                         int layer, int n, const BlockTensors& w, const BlockTensors& g,
                         ConstTypedPtr x,
                         const ExpertSplit* experts, const MoeActivations& a,
                         const MoeScratch& s, float dloss, const float* dout, float* dx);

}  // namespace tally::model
