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
//   capacity   with capacity_factor c > 0, expert e takes at most ⌈c·k·n/E⌉ tokens; the
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
//              batch: its gradient is d aux / d p_ie = coef·E·f_e / n · (dloss·n).
//
//   ASSIGN_OR_RETURN(...) MoeForward(k, config, b, w, ln2, acts, scratch, out);
//   ... MoeBackward(k, config, b, w, g, acts, scratch, dloss, dout, dln2);
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "model/config.h"
#include "model/parameters.h"
#include "runtime/kernels/kernels.h"

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

  int64_t assignments() const { return int64_t(n) * k; }
  int64_t kept_count() const { return offset.empty() ? 0 : offset.back(); }
  int64_t tokens(int e) const { return offset[size_t(e) + 1] - offset[size_t(e)]; }
};

// Routes n tokens from the router's logits (n, E, host): softmax, top-k, capacity,
// groups, the auxiliary loss.
MoeRouting Route(const GPTConfig& config, const float* logits, int n);

// The MoE branch's device buffers for one block: the tokens' rows as the experts take
// them (n·k, C; the matmuls' operand type), the experts' hidden activations (n·k, 4C,
// before and after GELU), their outputs (n·k, C, fp32).
struct MoeActivations {
  MoeRouting* routing = nullptr;
  TypedPtr x;
  float* hidden = nullptr;
  TypedPtr hidden_gelu;
  float* y = nullptr;
};
// Scratch: the router's logits (n, E) and rows (n·k, C) for the experts' gradients;
// d_hidden (n·k, 4C).
struct MoeScratch {
  float* logits = nullptr;
  float* rows = nullptr;
  float* d_hidden = nullptr;
};

// out (n, C) = the combined expert outputs for x (n, C) = ln2, routing into a.routing.
absl::Status MoeForward(Kernels& k, const GPTConfig& config, int n, const BlockTensors& w,
                        ConstTypedPtr x, const MoeActivations& a, const MoeScratch& s,
                        float* out);
// From dout (n, C): the experts' and the router's gradients into g, and dx (n, C) =
// d(loss)/d(x) through both; `dloss` weights the auxiliary loss as each token's loss.
absl::Status MoeBackward(Kernels& k, const GPTConfig& config, int n, const BlockTensors& w,
                         const BlockTensors& g, ConstTypedPtr x, const MoeActivations& a,
                         const MoeScratch& s, float dloss, const float* dout, float* dx);

}  // namespace tally::model
