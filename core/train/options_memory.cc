// What a run costs the machine it runs on, before it starts: the memory of a run's ranks
// (EstimatedBytes) and a dry run's own bookkeeping (DryRunHostBytes).
#include <algorithm>

#include "core/train/options.h"

namespace tally::train {

double TrainOptions::EstimatedBytes(int ranks_here, int64_t data_bytes) const {
  // t: the positions of each sequence on a rank (T/cp under context parallelism).
  const double c = model.n_embd, t = double(model.seq_len) / parallel.cp, v = model.vocab_size,
               l = model.n_layer;
  const double phi = double(model.NumParams());
  const model::Precision p = Precision();
  const double params = double(SizeOf(p.params)), grads = double(SizeOf(p.grads));
  const double state =
      (training.optimizer == OptimizerKind::kAdamW ? 8 : 4) + (p.master_weights() ? 4 : 0);
  // Summed over the world: dp·cp replicas of the model states, less what ZeRO shards.
  const double replicas = double(parallel.dp) * parallel.cp;
  const double states = params * phi * (parallel.zero >= 3 ? 1 : replicas) +
                        grads * phi * (parallel.zero >= 2 ? 1 : replicas) +
                        state * phi * (parallel.zero >= 1 ? 1 : replicas);
  // One micro-batch's saved activations on a rank (core/model/gpt_activations.cc): per layer,
  // in fp32, the residuals (N, C), the MLP's c_fc output (N, 4C) split over tp and the attention
  // probabilities (B, NH/tp, T, T); in the matmuls' operand type (bf16 under mixed
  // precision) the LayerNorm outputs (N, C), qkv and the attention output (N, 4C in all)
  // and the GELU output (N, 4C), those split over tp.
  const double operand = precision.dtype == DType::kBF16 ? 2 : 4;
  const double n = double(training.micro_batch_size) * t;
  // With experts the MLP's rows are k times as many, and each has its input and output.
  const double mlp_rows = model.moe() ? n * model.moe_top_k : n;
  // Selective recompute keeps no layer's probabilities, layer recompute only each layer's
  // output (one layer's room besides): still a lower bound.
  // (Context parallelism keeps less: its log-sum-exp and what its variant adds.)
  const double probabilities =
      parallel.recompute_attention || parallel.cp > 1
          ? 0
          : double(training.micro_batch_size) * (model.n_head / double(parallel.tp)) * t * t;
  const double per_layer =
      parallel.LayerRecompute()
          ? 4 * n * c
          : 4 * (2 * n * c + 4 * mlp_rows * c / parallel.tp + probabilities) +
                operand * (2 * n * c + 4 * n * c / parallel.tp + 4 * mlp_rows * c / parallel.tp) +
                (model.moe() ? (4 + operand) * mlp_rows * c : 0);
  const double activations = per_layer * l / parallel.pp + 4 * n * v / parallel.tp;
  const double per_rank = states / world() + activations + 5.0 * double(data_bytes);
  return per_rank * ranks_here;
}

// Calibrated on this host's dry runs (GPT of 1-100,000 layers, 1-1,024 thread ranks,
// 1-100,000 micro-batches; peak resident set): about 240 MB for the process, 3.5 KB a
// pair of ranks (the threads transport's per-peer state), 14 KB a layer a rank (its
// meta tensors and ledgers), 3 KB a collective call a rank (events, messages, the
// replay's record) and 12 bytes a token of a rank's micro-batch. Each is rounded up.
double TrainOptions::DryRunHostBytes() const {
  const double ranks = double(world()), layers = double(model.n_layer) / parallel.pp;
  const double steps_run = std::max<double>(1, double(training.steps));
  const double micro_batches = double(accumulation_steps()) * steps_run;
  // Collective calls a rank makes in a micro-batch, per layer of its stage: tp's
  // all-reduces (or all-gathers and reduce-scatters under sequence parallelism), ZeRO-3's
  // gathers and reduce-scatter, the experts' all-to-alls; and a pipeline's sends and
  // receives; then once a step, the gradient sync's buckets and ZeRO's units.
  const double per_layer = (parallel.tp > 1 ? (parallel.sequence_parallel ? 8 : 4) : 0) +
                           (parallel.zero == 3 ? 3 : 0) + (model.moe() && parallel.ep > 1 ? 4 : 0);
  const double calls = micro_batches * (layers * per_layer + (parallel.pp > 1 ? 4 : 0)) +
                       steps_run * (2 * layers + 16);
  const double tokens = double(training.micro_batch_size) * model.seq_len;
  return 240e6 + 3.5e3 * ranks * ranks + ranks * (14e3 * layers + 3e3 * calls + 12 * tokens);
}

}  // namespace tally::train
