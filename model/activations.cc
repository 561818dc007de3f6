#include "model/activations.h"

namespace tally::model {

MicroBatchActivations CountActivations(const ActivationShape& s, int64_t b, int64_t layers,
                                       bool last, bool whole) {
  const GPTConfig& g = s.config;
  const int64_t t = g.seq_len, c = g.n_embd, nh = g.n_head / s.tp;
  const int64_t cl = c / s.tp, hidden = 4 * c / s.tp;
  const int64_t n = b * t, r = s.Rows(n);
  MicroBatchActivations a;
  a.ids = 2 * n;
  if (!whole) {
    a.fp32 = r * c;
    return a;
  }
  // The MLP's: the dense one's hidden layer, or the rows the experts take (moe.h).
  const int64_t moe_rows = g.moe() ? n * g.moe_top_k : 0;
  const int64_t expert_rows = moe_rows * s.expert_ranks;
  const int64_t wire = s.expert_parallel ? 2 * expert_rows * c : 0;  // arriving, on the wire
  const int64_t mlp = g.moe() ? moe_rows * c + expert_rows * hidden + wire : n * hidden;
  const int64_t probabilities = s.recompute_attention ? 0 : b * nh * t * t;
  a.fp32 = r * c + layers * (2 * r * c + 4 * r + probabilities + mlp) + (last ? 2 * r : 0);
  a.operands = layers * (2 * n * c + n * cl + 3 * n * cl + mlp) + (last ? n * c : 0);
  a.head = last ? 2 * n * s.vocab_local + n : 0;
  return a;
}

int64_t CountScratch(const ActivationShape& s, int64_t b) {
  const GPTConfig& g = s.config;
  const int64_t t = g.seq_len, c = g.n_embd, n = b * t, r = s.Rows(n);
  const int64_t cl = c / s.tp, hidden = 4 * c / s.tp;
  const int64_t sequence = s.sequence_parallel ? r * c + n * c : 0;
  const int64_t moe_rows = g.moe() ? n * g.moe_top_k : 0;
  const int64_t expert_rows = moe_rows * s.expert_ranks;
  const int64_t d4c = g.moe() ? expert_rows * hidden : n * hidden;
  const int64_t moe = g.moe() ? n * g.n_experts + moe_rows * c +
                                    (s.expert_parallel ? 2 * expert_rows * c : 0)
                              : 0;
  const int64_t probabilities = s.recompute_attention ? b * (g.n_head / s.tp) * t * t : 0;
  return d4c + n * 3 * cl + n * c + s.attention_scratch + r * c + sequence + moe + probabilities;
}

}  // namespace tally::model
