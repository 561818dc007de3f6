// The report's memory formulas (report.h): each rank's peak bytes by category, from the
// options alone, which the memory table sets beside the ledger's measured peaks.
#include <algorithm>
#include <vector>

#include "core/model/activations.h"
#include "core/model/parameters.h"
#include "core/parallel/context_parallel.h"
#include "core/parallel/onebit_adam.h"
#include "core/parallel/pipeline_schedule.h"
#include "core/parallel/powersgd.h"
#include "core/parallel/zero/sharding.h"
#include "lab/report/formulas.h"
#include "lab/report/report.h"

namespace tally::report {

namespace {

// The most fp32 gradient values a stage holds at once under ZeRO-2/3 with --overlap: each
// backward of a chunk opens and closes units in gpt.cc's order (the LM head's embeddings
// first on the last chunk, closed at once unless it is also the first; ln_f; the
// chunk's layers from the top; the embeddings last on the first chunk), and a closed unit
// stays held until the next closes (its reduce-scatter in flight), across the step's
// backwards (`chunks`: the chunk of each, in order).
int64_t GradientsHeldWithOverlap(const model::ParameterLayout& layout,
                                 const std::vector<int>& chunks) {
  const std::vector<model::ParamUnit>& units = layout.units();
  const int emb = model::ParameterLayout::kEmbeddings;
  int64_t open = 0, held = 0, most = 0;
  auto count = [&](int unit) { return units[size_t(unit)].count(); };
  auto open_unit = [&](int unit) {
    open += count(unit);
    most = std::max(most, open + held);
  };
  auto close_unit = [&](int unit) {
    held = count(unit);  // the one before it is finished and let go
    open -= count(unit);
    most = std::max(most, open + held);
  };
  for (int chunk : chunks) {
    const model::LayerRange range = layout.model_chunks()[size_t(chunk)];
    const bool first = range.begin == 0, last = layout.last_stage() && chunk + 1 == int(layout.model_chunks().size());
    if (last) {
      open_unit(emb);
      if (!first) close_unit(emb);
      open_unit(layout.final_norm_unit());
      close_unit(layout.final_norm_unit());
    }
    for (int l = range.end - 1; l >= range.begin; --l) {
      open_unit(layout.layer_unit(l));
      close_unit(layout.layer_unit(l));
    }
    if (first) {
      if (!last) open_unit(emb);
      close_unit(emb);
    }
  }
  return most;
}

// Mixed precision: the fp32 working copies of the units in use (core/model/weights.h), of the
// parameters, and of the gradients where those are bf16, most at once in any chunk's
// forward or backward (gpt.cc's order: the embeddings stay from the lookup through the
// head on a chunk with both, a layer or ln_f one at a time beside them). In elements.
int64_t WorkingCopyElements(const train::TrainOptions& o, const model::ParameterLayout& layout) {
  if (o.Precision().params == DType::kF32) return 0;
  const int64_t grads = o.Precision().grads != DType::kF32 ? 1 : 0;
  const std::vector<model::ParamUnit>& units = layout.units();
  const int64_t e = units[model::ParameterLayout::kEmbeddings].count();
  const int64_t f = layout.last_stage() ? units[size_t(layout.final_norm_unit())].count() : 0;
  int64_t working = 0;
  for (const model::LayerRange& chunk : layout.model_chunks()) {
    const bool first = chunk.begin == 0, last = chunk.end == o.model.n_layer;
    int64_t layer = last ? f : 0;
    for (int l = chunk.begin; l < chunk.end; ++l) {
      layer = std::max(layer, units[size_t(layout.layer_unit(l))].count());
    }
    const int64_t forward = first ? e + layer : last ? std::max(e, layer) : layer;
    const int64_t backward = (1 + grads) * (first && last ? e + layer
                                            : first || last ? std::max(e, layer)
                                                            : layer);
    working = std::max({working, forward, backward});
  }
  return working;
}

}  // namespace

int64_t PredictedActivations(const train::TrainOptions& o, int rank) {
  // bf16 gradients under ZeRO-2/3 with --overlap: a closed unit's fp32 working copy stays
  // until the next unit closes, beside the parameters' copies: no closed form here yet.
  if (o.parallel.overlap && o.parallel.zero >= 2 && o.Precision().grads != DType::kF32) return -1;
  const model::ParameterLayout layout = o.RankLayout(rank);
  const model::GPTConfig& g = o.model;
  model::ActivationShape shape;
  shape.config = g;
  shape.tp = o.parallel.tp;
  shape.sequence_parallel = o.parallel.sequence_parallel;
  shape.expert_ranks = o.parallel.ep;
  shape.expert_parallel = o.parallel.ep > 1;
  shape.vocab_local = layout.last_stage() ? layout.specs().front().shape[0] : 0;
  // The kernels' attention backward scratch: a head at a time on the CPU, all on a GPU.
  const int64_t tt = int64_t(g.seq_len) * g.seq_len;
  shape.attention_scratch =
      o.placement.device == DeviceType::kCUDA && !o.dry_run ? tt * (g.n_head / o.parallel.tp) : tt;
  shape.recompute = o.parallel.ModelRecompute();
  const int64_t b = o.training.micro_batch_size;
  int64_t context = 0;  // context parallelism's own activations (core/parallel/context_parallel.h)
  if (o.parallel.cp > 1) {
    const int64_t nh = g.n_head / o.parallel.tp, cl = g.n_embd / o.parallel.tp;
    shape.cp = o.parallel.cp;
    shape.attention_scratch = 0;
    shape.attention_kept =
        parallel::ContextAttentionKept(o.parallel.cp_comm, o.parallel.cp, 1, g.seq_len, cl, nh);
    context = parallel::ContextAttentionScratch(o.parallel.cp, b, g.seq_len, nh);
  }
  const int64_t n = b * shape.Positions();
  const int64_t operand = o.matmul_inputs() == MatmulInputs::kBF16 ? 2 : 4;
  int64_t bytes = 4 * (model::CountScratch(shape, b) + 3 * n + context) +
                  model::CountLayerRoom(shape, b).Bytes(operand);
  const std::vector<model::LayerRange>& chunks = layout.model_chunks();
  std::vector<parallel::PipelineStep> steps;
  if (o.parallel.pp > 1) {
    steps = parallel::StageSteps(o.parallel.schedule, o.parallel.pp, o.topology().Of(rank).pp,
                                 o.accumulation_steps(), int(chunks.size()));
  }
  bytes += 4 * WorkingCopyElements(o, layout);
  for (size_t c = 0; c < chunks.size(); ++c) {
    const int64_t layers = chunks[c].end - chunks[c].begin;
    const bool last = chunks[c].end == g.n_layer;
    const int64_t whole = model::CountActivations(shape, b, layers, last, true).Bytes(operand);
    const int64_t sets = o.parallel.pp > 1 ? parallel::InFlight(steps, int(c)) : 1;
    if (o.parallel.StageRecompute()) {
      const int64_t kept = model::CountActivations(shape, b, layers, last, false).Bytes(operand);
      bytes += whole + 4 * shape.Rows(n) * g.n_embd + (sets - 1) * kept;
    } else {
      bytes += sets * whole;
    }
  }
  return bytes;
}

// Long, and kept whole: the formula category by category (parameters, gradients, optimizer
// state), each with its ZeRO stage's and --overlap's terms read in order.
MemoryFormula PredictedMemory(const train::TrainOptions& o, int rank) {
  const model::ParameterLayout layout = o.RankLayout(rank);
  const int64_t phi = layout.total();
  const ValueBytes bytes = BytesOf(o);
  // The optimizer's fp32 state a parameter, with the master weights under mixed precision.
  const int64_t state_per_element = (o.training.optimizer == train::OptimizerKind::kAdamW ? 8 : 4) +
                                    (o.Precision().master_weights() ? 4 : 0);
  MemoryFormula f;
  f.activations = PredictedActivations(o, rank);
  if (o.parallel.zero == 0) {
    // PowerSGD keeps its error (m·n) and Q (n·r) of every matrix it compresses, in fp32.
    int64_t compression = 0;
    if (o.parallel.PowerSgd() && o.topology().DpGroupSize() > 1) {
      const parallel::PowerSgdSplit split = parallel::SplitForPowerSgd(layout, o.parallel.powersgd_rank);
      for (const parallel::PowerSgdMatrix& m : split.matrices) compression += m.rows * m.cols;
      compression = 4 * (compression + split.q_values);
    }
    // 1-bit Adam keeps its worker error (N values) and server error (N/p) a part, in fp32.
    if (o.parallel.OneBitAdam() && o.topology().DpGroupSize() > 1) {
      compression = parallel::OneBitErrorBytes(parallel::OneBitParts(layout),
                                               o.topology().DpGroupSize());
    }
    return {bytes.params * phi, bytes.grads * phi, state_per_element * phi + compression,
            f.activations};
  }
  const parallel::Sharding sharding = RankSharding(o, layout, rank);
  int64_t largest_chunk = 0;
  for (const parallel::Sharding::Piece& p : sharding.pieces()) {
    largest_chunk = std::max(largest_chunk, p.own.count);
  }
  // The units open at once (gpt.cc): the embeddings stay open on a first stage from the
  // lookup through its layers' forwards, and their gradients on a single stage from the LM
  // head through every backward; otherwise one unit at a time.
  int64_t largest_other = 0;
  for (size_t u = 1; u < layout.units().size(); ++u) {
    largest_other = std::max(largest_other, layout.units()[u].count());
  }
  const int64_t embeddings = layout.units()[model::ParameterLayout::kEmbeddings].count();
  auto open = [&](bool embeddings_held) {
    return embeddings_held ? embeddings + largest_other : std::max(embeddings, largest_other);
  };
  const bool first = layout.first_stage(), last = layout.last_stage();
  const int64_t shard = sharding.size();
  int64_t params_open = open(first);
  if (o.parallel.zero == 3 && o.parallel.overlap && o.parallel.pp == 1) {
    // The prefetch (core/parallel/zero/zero3.cc): a unit and the next one at once, besides the embeddings.
    int64_t pair = 0;
    for (size_t u = 1; u + 1 < layout.units().size(); ++u) {
      pair = std::max(pair, layout.units()[u].count() + layout.units()[u + 1].count());
    }
    params_open = embeddings + pair;
  }
  // Without resharding after forward every unit is gathered when forward ends.
  if (!o.parallel.zero3_reshard_after_forward) params_open = phi;
  // hpZ's secondary copy: the units cut over the dp ranks of the node.
  if (o.parallel.Hpz()) {
    const std::vector<int> node = NodeCutOf(o, rank).shard;
    params_open +=
        parallel::Sharding(parallel::ZeroUnits(layout, 3), int(node.size()), PlaceOf(node, rank)).size();
  }
  f.params = bytes.params * (o.parallel.zero == 3 ? shard + params_open : phi);
  // ZeRO-2/3: the shard, one reduced chunk (in the wire type), and the open units'
  // gradients where they are fp32 (bf16 ones are accumulated from fp32 working copies,
  // which count as activations; core/model/weights.h). With --overlap a closed unit's
  // gradients stay until the next unit closes, and its reduced chunks have room of their
  // own (core/parallel/zero/zero.h). qgZ's reduce-scatters are blocking, into an fp32 chunk.
  int64_t open_grads = bytes.grads == 4 ? 4 * open(first && last) : 0;
  int64_t in_flight_reduced = 0;
  const int64_t reduced_bytes = o.parallel.Qgz() ? 4 : bytes.grad_comm;
  if (o.parallel.overlap && o.parallel.zero >= 2 && !o.parallel.Qgz()) {
    if (bytes.grads == 4) {
      // The chunk of each backward, in the order the stage runs them.
      std::vector<int> backwards;
      const int pp_rank = o.topology().Of(rank).pp;
      for (const parallel::PipelineStep& s :
           parallel::StageSteps(o.parallel.schedule, o.parallel.pp, pp_rank, o.accumulation_steps(),
                                int(layout.model_chunks().size()))) {
        if (s.kind == parallel::PipelineStep::kBackward) backwards.push_back(s.model_chunk);
      }
      open_grads = 4 * GradientsHeldWithOverlap(layout, backwards);
    }
    for (const std::pair<size_t, size_t>& unit :
         parallel::PiecesOfUnits(layout, o.parallel.zero, o.parallel.ep > 1)) {
      int64_t own = 0;
      for (size_t i = unit.first; i < unit.second; ++i) own += sharding.pieces()[i].own.count;
      in_flight_reduced = std::max(in_flight_reduced, own);
    }
  }
  f.grads = o.parallel.zero == 1
                ? bytes.grads * phi
                : bytes.grads * shard + reduced_bytes * (largest_chunk + in_flight_reduced) +
                      open_grads;
  f.optimizer = state_per_element * shard;
  return f;
}

}  // namespace tally::report
