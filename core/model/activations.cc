#include "core/model/activations.h"

namespace tally::model {

namespace {

// One layer's fp32 and operand elements (out included), and its MLP's (the dense one's
// hidden layer, or the rows the experts take: moe.h).
struct Layer {
  int64_t fp32 = 0, operands = 0;
};
Layer OneLayer(const ActivationShape& s, int64_t b) {
  const GPTConfig& g = s.config;
  const int64_t t = s.Positions(), c = g.n_embd, nh = g.n_head / s.tp;
  const int64_t cl = c / s.tp, hidden = 4 * c / s.tp;
  const int64_t n = b * t, r = s.Rows(n);
  const int64_t moe_rows = g.moe() ? n * g.moe_top_k : 0;
  const int64_t expert_rows = moe_rows * s.expert_ranks;
  const int64_t wire = s.expert_parallel ? 2 * expert_rows * c : 0;  // arriving, on the wire
  const int64_t mlp = g.moe() ? moe_rows * c + expert_rows * hidden + wire : n * hidden;
  const int64_t probabilities = s.cp > 1                              ? b * s.attention_kept
                                : s.recompute == Recompute::kAttention ? 0
                                                                       : b * nh * t * t;
  return {2 * r * c + 4 * r + probabilities + mlp, 2 * n * c + n * cl + 3 * n * cl + mlp};
}

}  // namespace

MicroBatchActivations CountActivations(const ActivationShape& s, int64_t b, int64_t layers,
                                       bool last, bool whole) {
  const GPTConfig& g = s.config;
  const int64_t c = g.n_embd, n = b * s.Positions(), r = s.Rows(n);
  MicroBatchActivations a;
  a.ids = 2 * n;
  if (!whole) {
    a.fp32 = r * c;
    return a;
  }
  // Under layer recompute a layer keeps its output only; the room holds the rest.
  const Layer layer = s.recompute == Recompute::kLayers ? Layer{r * c, 0} : OneLayer(s, b);
  a.fp32 = r * c + layers * layer.fp32 + (last ? 2 * r : 0);
  a.operands = layers * layer.operands + (last ? n * c : 0);
  a.head = last ? 2 * n * s.vocab_local + n : 0;
  return a;
}

MicroBatchActivations CountLayerRoom(const ActivationShape& s, int64_t b) {
  if (s.recompute != Recompute::kLayers) return {};
  const Layer layer = OneLayer(s, b);
  MicroBatchActivations a;
  a.fp32 = layer.fp32 - s.Rows(b * s.Positions()) * s.config.n_embd;  // but its output
  a.operands = layer.operands;
  return a;
}

int64_t CountScratch(const ActivationShape& s, int64_t b) {
  const GPTConfig& g = s.config;
  const int64_t t = s.Positions(), c = g.n_embd, n = b * t, r = s.Rows(n);
  const int64_t cl = c / s.tp, hidden = 4 * c / s.tp;
  const int64_t sequence = s.sequence_parallel ? r * c + n * c : 0;
  const int64_t positions = s.cp > 1 ? t * c : 0;  // the position table's rows here
  const int64_t moe_rows = g.moe() ? n * g.moe_top_k : 0;
  const int64_t expert_rows = moe_rows * s.expert_ranks;
  const int64_t d4c = g.moe() ? expert_rows * hidden : n * hidden;
  const int64_t moe = g.moe() ? n * g.n_experts + moe_rows * c +
                                    (s.expert_parallel ? 2 * expert_rows * c : 0)
                              : 0;
  const int64_t probabilities =
      s.recompute == Recompute::kAttention ? b * (g.n_head / s.tp) * t * t : 0;
  return d4c + n * 3 * cl + n * c + s.attention_scratch + r * c + sequence + moe + probabilities +
         positions;
}

}  // namespace tally::model
