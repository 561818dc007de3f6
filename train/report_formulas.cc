// The report's formulas (report.h): the exact bytes of each row, the seed article's, and
// the memory of each rank, from the options alone.
#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "model/activations.h"
#include "model/parameters.h"
#include "parallel/data_parallel.h"
#include "parallel/pipeline_schedule.h"
#include "parallel/tensor_parallel.h"
#include "parallel/zero.h"
#include "runtime/comm/ledger/exact_traffic.h"
#include "train/report.h"

namespace tally::train {

namespace {

int64_t BucketBytes(const TrainOptions& o) { return int64_t(o.bucket_mb * (1 << 20)); }

// The parameters world rank `rank` holds: its tensor-parallel part of its stage's layers.
model::ParameterLayout StageLayout(const TrainOptions& o, int rank) {
  return o.RankLayout(rank);
}

// The units ZeRO cuts world rank `rank`'s part into (zero.h): under expert parallelism
// the experts' runs apart.
std::vector<parallel::ZeroUnit> RankZeroUnits(const TrainOptions& o,
                                              const model::ParameterLayout& layout) {
  return parallel::ZeroUnits(layout, o.zero, o.ep > 1);
}

// World rank `rank`'s ZeRO shard of `layout`: the dense units cut over its dp group, the
// experts' over its edp group (whose rank is the dp rank / ep; topology.h).
parallel::Sharding RankSharding(const TrainOptions& o, const model::ParameterLayout& layout,
                                int rank) {
  const int dp_rank = o.topology().Of(rank).dp;
  return parallel::Sharding(RankZeroUnits(o, layout), {o.dp, dp_rank}, {o.dp / o.ep, dp_rank / o.ep});
}

// The nodes of the ranks of world rank `rank`'s dp group, or (`experts`) of its edp group:
// the hierarchical algorithm's bytes depend on them.
std::vector<int> GroupNodes(const ReportInputs& in, int rank, bool experts) {
  const TrainOptions& o = in.options;
  const parallel::Topology grid = o.topology();
  const std::vector<int> group = experts ? grid.EdpGroup(rank) : grid.DpGroup(rank);
  return in.nodes != nullptr ? in.nodes->Of(group) : std::vector<int>(group.size(), 0);
}

// The per-token replicas' elements in the gradients the optimizer of world rank `rank`
// sees: its part of the model, or its ZeRO shard of that.
int64_t PerTokenElements(const TrainOptions& o, int rank) {
  const model::ParameterLayout layout = StageLayout(o, rank);
  std::vector<model::TensorRange> ranges = model::TensorRanges(layout);
  if (o.zero >= 1) {
    const parallel::Sharding shard = RankSharding(o, layout, rank);
    std::vector<model::TensorRange> mine;
    for (const parallel::Sharding::Piece& p : shard.pieces()) {
      for (const model::TensorRange& r : model::RangesIn(ranges, p.own.offset, p.own.end())) {
        mine.push_back(r);
      }
    }
    ranges = mine;
  }
  int64_t count = 0;
  for (const model::TensorRange& r : ranges) count += layout.tp() > 1 && r.spec->per_token ? r.end - r.begin : 0;
  return count;
}

// Bytes a value of each kind of buffer takes (model/precision.h).
struct ValueBytes {
  int64_t params, grads, grad_comm, activations;
};
ValueBytes BytesOf(const TrainOptions& o) {
  const model::Precision p = o.Precision();
  return {int64_t(SizeOf(p.params)), int64_t(SizeOf(p.grads)), int64_t(SizeOf(p.grad_comm)),
          int64_t(SizeOf(p.activations))};
}

// Bytes a pipeline boundary carries each way in a step (parallel/pipeline_schedule.h).
// Under --pp_scatter_gather: a micro-batch's boundary tensor (b·s·h values) and tp rank
// `tp_rank`'s chunk of it (partition.h's rule: the first n % tp chunks one more).
struct Scattered {
  int64_t whole = 0, count = 0;
};
Scattered ScatteredBoundary(const TrainOptions& o, int tp_rank) {
  const int64_t whole = int64_t(o.micro_batch_size) * o.model.seq_len * o.model.n_embd;
  return {whole, comm::ChunkOf(whole, o.tp, tp_rank).count};
}

int64_t BoundaryBytesPerStep(const TrainOptions& o) {
  return parallel::BoundaryBytesPerStep(o.global_batch_size / o.dp, o.model.seq_len, o.model.n_embd,
                                        o.sequence_parallel ? o.tp : 1, BytesOf(o).activations);
}

// ZeRO's calls per step and unit of the row's primitive in the row's phase (0: not ZeRO's).
int ZeroCalls(const TrainOptions& o, const comm::LedgerKey& key) {
  return parallel::ZeroCallsPerStep(o.zero, o.accumulation_steps(), key.primitive, key.phase,
                                    o.StageRecompute());
}

// The tensor-parallel calls of the row (parallel/tensor_parallel.h) in a step of these
// options, on world rank `rank` (whose ZeRO shard decides the per-token replicas' sum).
std::optional<parallel::TensorParallelCalls> TensorParallelPattern(const TrainOptions& o,
                                                                   const comm::LedgerKey& key,
                                                                   int rank) {
  // The experts' split linears run as many rows as the routing sent them: no closed form.
  if (key.label.ends_with(".experts")) return std::nullopt;
  parallel::TensorParallelStep step;
  step.sequence_parallel = o.sequence_parallel;
  step.micro_batches = o.accumulation_steps();
  step.rows = int64_t(o.micro_batch_size) * o.model.seq_len;
  step.n_embd = o.model.n_embd;
  step.recompute = o.StageRecompute();
  step.recompute_layers = o.LayerRecompute();
  step.activation_bytes = size_t(BytesOf(o).activations);
  step.grad_bytes = size_t(BytesOf(o).grads);
  if (key.label == "sequence_parallel") step.per_token_elements = PerTokenElements(o, rank);
  return parallel::TensorParallelCallsPerStep(step, key.label, key.primitive, key.phase);
}

}  // namespace

int64_t ExactSent(const ReportInputs& in, const comm::LedgerKey& key, int rank) {
  const TrainOptions& o = in.options;
  const parallel::GridCoordinates at = o.topology().Of(rank);
  const int dp_rank = at.dp, tp_rank = at.tp, pp_rank = at.pp;
  auto scalar = [&](int group_size, int group_rank, size_t element) {  // one value a step
    return in.steps * comm::ExactTraffic(comm::Primitive::kAllReduce, key.algorithm, group_size,
                                         group_rank, -1, 1, element).sent;
  };
  if (key.group == "pp") {
    if (parallel::IsPipelineBoundary(key)) {
      if (!o.ScatterGather()) return in.steps * BoundaryBytesPerStep(o);
      // A tp rank's chunk of each micro-batch's boundary tensor.
      return in.steps * o.accumulation_steps() * ScatteredBoundary(o, tp_rank).count *
             BytesOf(o).activations;
    }
    if (key.primitive != comm::Primitive::kAllReduce) return -1;
    if (key.label == "loss" && key.phase == comm::Phase::kOther) return scalar(o.pp, pp_rank, 4);
    if (key.label == "grad_norm" && key.phase == comm::Phase::kOptimizer) return scalar(o.pp, pp_rank, 8);
    return -1;
  }
  if (key.group == "embedding" && key.label == "tied_embedding" &&
      key.primitive == comm::Primitive::kAllReduce) {
    // wte's gradient between the first stage (rank 0 of the group) and the last; under
    // ZeRO-2/3 the dp rank's chunk of it.
    int64_t wte = model::ParameterLayout::ForGPT(o.model, o.tp, tp_rank).specs()[0].numel;
    if (o.zero >= 2) wte = comm::ChunkOf(wte, o.dp, dp_rank).count;
    return in.steps * comm::ExactTraffic(comm::Primitive::kAllReduce, key.algorithm, 2,
                                         pp_rank == 0 ? 0 : 1, -1, wte, BytesOf(o).grads).sent;
  }
  if (key.group == "tp" && o.ScatterGather() && key.primitive == comm::Primitive::kAllGather &&
      parallel::ParseBoundaryScope(key.label).has_value()) {
    // The receiving stage gathers each micro-batch's boundary tensor from its chunks.
    return in.steps * o.accumulation_steps() *
           comm::ExactTraffic(comm::Primitive::kAllGather, key.algorithm, o.tp, tp_rank, -1,
                              ScatteredBoundary(o, tp_rank).whole, BytesOf(o).activations)
               .sent;
  }
  if (key.group == "tp") {
    std::optional<parallel::TensorParallelCalls> p = TensorParallelPattern(o, key, rank);
    if (!p) return -1;
    return in.steps * p->calls *
           comm::ExactTraffic(key.primitive, key.algorithm, o.tp, tp_rank, -1, p->count, p->element).sent;
  }
  if (key.primitive == comm::Primitive::kAllToAllV) {  // what the call's counts said
    const auto& expected = in.traffic[size_t(rank)].expected();
    const auto it = expected.find(key);
    return it != expected.end() ? it->second : -1;
  }
  if (key.group == "ep" && key.primitive == comm::Primitive::kAllToAll) {
    // A layer's routing counts (scope layer{l}.counts): E int64 a micro-batch's forward,
    // each rank its experts' E/N; a recomputed forward (a stage's or a layer's) counts
    // again (backward).
    const bool recomputed = key.phase == comm::Phase::kBackward && o.recompute;
    if (key.phase != comm::Phase::kForward && !recomputed) return -1;
    return in.steps * o.accumulation_steps() *
           comm::ExactTraffic(comm::Primitive::kAllToAll, key.algorithm, o.ep, dp_rank % o.ep, -1,
                              o.model.n_experts, 8).sent;
  }
  if (key.group == "ep" && key.label == "grad_norm" && key.primitive == comm::Primitive::kAllReduce) {
    return scalar(o.ep, dp_rank % o.ep, 8);  // the experts' squares
  }
  // ZeRO's reduce-scatters (the gradients) and all-gathers (the parameters) of the units
  // the row's group cuts: the dp group's, or under ep the edp group's (the experts').
  auto zero_bytes = [&](bool experts, int ranks, int group_rank) -> int64_t {
    if (ZeroCalls(o, key) == 0) return -1;
    const std::vector<comm::Chunk> units =
        parallel::ChunksOf(RankZeroUnits(o, StageLayout(o, rank)), experts);
    const int64_t element = key.primitive == comm::Primitive::kReduceScatter ? BytesOf(o).grad_comm
                                                                             : BytesOf(o).params;
    return in.steps * parallel::ZeroBytesPerStep(units, o.zero, ranks, group_rank,
                                                 o.accumulation_steps(), key.algorithm,
                                                 key.primitive, key.phase, o.StageRecompute(), element,
                                                 GroupNodes(in, rank, experts));
  };
  const bool zero_row = key.primitive == comm::Primitive::kReduceScatter ||
                        key.primitive == comm::Primitive::kAllGather;
  if (key.group == "edp" && zero_row) return zero_bytes(true, o.dp / o.ep, dp_rank / o.ep);
  if (key.group == "edp" && key.primitive == comm::Primitive::kAllReduce &&
      key.phase == comm::Phase::kBackward) {  // the experts' gradient buckets
    const std::vector<comm::Chunk> experts = parallel::ExpertRanges(StageLayout(o, rank), true);
    return in.steps * parallel::GradientSyncBytesPerStep(experts, o.dp / o.ep, dp_rank / o.ep,
                                                         BucketBytes(o), key.algorithm,
                                                         o.Precision().grad_comm,
                                                         GroupNodes(in, rank, true));
  }
  if (key.group != "dp") return -1;
  if (zero_row) return zero_bytes(false, o.dp, dp_rank);
  // This rank's part of the model: the buffer the dp group reduces.
  const model::ParameterLayout layout = StageLayout(o, rank);
  const std::vector<int> nodes = GroupNodes(in, rank, false);
  auto per_step = [&](comm::Primitive p, int64_t count, size_t element) {
    return in.steps *
           comm::ExactTraffic(p, key.algorithm, o.dp, dp_rank, -1, count, element, nodes).sent;
  };
  switch (key.primitive) {
    case comm::Primitive::kAllReduce:
      if (key.phase == comm::Phase::kBackward && o.ep > 1) {  // the non-expert buckets
        return in.steps * parallel::GradientSyncBytesPerStep(parallel::ExpertRanges(layout, false),
                                                             o.dp, dp_rank, BucketBytes(o),
                                                             key.algorithm, o.Precision().grad_comm,
                                                             nodes);
      }
      if (key.phase == comm::Phase::kBackward) {  // data parallelism's gradient buckets
        return in.steps * parallel::GradientSyncBytesPerStep(layout.total(), o.dp, dp_rank,
                                                             BucketBytes(o), key.algorithm,
                                                             o.Precision().grad_comm, nodes);
      }
      if (key.label == "loss") return per_step(key.primitive, 1, 4);       // one float
      if (key.label == "grad_norm") return per_step(key.primitive, 1, 8);  // ZeRO: one double
      return -1;
    default:
      return -1;
  }
}

// The seed article's figure for the row, with the run's bytes a value (e: 4 in fp32, 2
// in bf16 as the seed counts): an all-reduce of M bytes moves 2M; so 2Φ·e/tp per step
// for the gradient all-reduce, and 2·b·s·h·e for each tensor-parallel all-reduce of the
// activations (8bsh·e/2 per layer and step; b·s·h·e for each all-gather and
// reduce-scatter of sequence parallelism); Φ·e/tp for each pass of ZeRO's
// reduce-scatter and all-gather over the buffer (2Φ together for ZeRO-1/2, 3Φ for ZeRO-3,
// with one micro-batch).
int64_t SeedSent(const ReportInputs& in, const comm::LedgerKey& key) {
  const TrainOptions& o = in.options;
  const int64_t element = key.primitive == comm::Primitive::kAllGather ? BytesOf(o).params
                                                                       : BytesOf(o).grad_comm;
  // The Φ the row's group sums or shards: the model's, or under expert parallelism the dp
  // group's dense parameters and the edp group's experts of one ep rank (E/ep of each layer's).
  int64_t phi = o.model.NumParams();
  if (o.ep > 1) {
    const int64_t c = o.model.n_embd;
    const int64_t experts = int64_t(o.model.n_layer) * o.model.n_experts * (8 * c * c + 5 * c);
    phi = key.group == "edp" ? experts / o.ep : phi - experts;
  }
  const int64_t part_bytes = in.steps * phi * element / (o.tp * o.pp);
  if (key.group == "ep" && key.primitive == comm::Primitive::kAllToAllV &&
      (key.phase == comm::Phase::kForward || key.phase == comm::Phase::kBackward)) {
    // The seed's balanced estimate: each all-to-all sends (N−1)/N of the micro-batch's
    // b·s·k·h values (the rows leave as the activations' type, everything else fp32).
    const bool rows_out = key.phase == comm::Phase::kForward && key.label.ends_with("dispatch");
    const int64_t value = rows_out ? BytesOf(o).activations : 4;
    const int64_t values = int64_t(o.micro_batch_size) * o.model.seq_len * o.model.moe_top_k *
                           o.model.n_embd;
    return in.steps * o.accumulation_steps() * (o.ep - 1) * values / o.ep * value;
  }
  if (key.group == "tp") {
    std::optional<parallel::TensorParallelCalls> p = TensorParallelPattern(o, key, 0);
    if (!p || key.label == "cross_entropy" || key.label == "grad_norm" ||
        key.label == "sequence_parallel") {
      return -1;
    }
    // An all-reduce of M bytes is 2M; an all-gather or reduce-scatter, its half, M.
    const int64_t passes = key.primitive == comm::Primitive::kAllReduce ? 2 : 1;
    return in.steps * p->calls * passes * p->count * int64_t(p->element);
  }
  if (parallel::IsPipelineBoundary(key)) return in.steps * BoundaryBytesPerStep(o);  // the seed's bsh each way
  if (key.group != "dp" && key.group != "edp") return -1;
  if (key.primitive == comm::Primitive::kAllReduce && key.phase == comm::Phase::kBackward) {
    return 2 * part_bytes;
  }
  // The seed's passes (it knows no recompute).
  int calls = parallel::ZeroCallsPerStep(o.zero, o.accumulation_steps(), key.primitive, key.phase);
  return calls > 0 ? calls * part_bytes : -1;
}

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
    const model::LayerRange range = layout.chunks()[size_t(chunk)];
    const bool first = range.begin == 0, last = layout.last_stage() && chunk + 1 == int(layout.chunks().size());
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

}  // namespace

int64_t PredictedActivations(const TrainOptions& o, int rank) {
  // bf16 gradients under ZeRO-2/3 with --overlap: a closed unit's fp32 working copy stays
  // until the next unit closes, beside the parameters' copies: no closed form here yet.
  if (o.overlap && o.zero >= 2 && o.Precision().grads != DType::kF32) return -1;
  const model::ParameterLayout layout = StageLayout(o, rank);
  const model::GPTConfig& g = o.model;
  model::ActivationShape shape;
  shape.config = g;
  shape.tp = o.tp;
  shape.sequence_parallel = o.sequence_parallel;
  shape.expert_ranks = o.ep;
  shape.expert_parallel = o.ep > 1;
  shape.vocab_local = layout.last_stage() ? layout.specs().front().shape[0] : 0;
  // The kernels' attention backward scratch: a head at a time on the CPU, all on a GPU.
  const int64_t tt = int64_t(g.seq_len) * g.seq_len;
  shape.attention_scratch = o.device == DeviceType::kCUDA && !o.dry_run ? tt * (g.n_head / o.tp) : tt;
  shape.recompute = o.ModelRecompute();
  const int64_t b = o.micro_batch_size, n = b * g.seq_len;
  const int64_t operand = o.matmul_inputs() == MatmulInputs::kBF16 ? 2 : 4;
  int64_t bytes = 4 * (model::CountScratch(shape, b) + 3 * n) +
                  model::CountLayerRoom(shape, b).Bytes(operand);
  const std::vector<model::LayerRange>& chunks = layout.chunks();
  std::vector<parallel::PipelineStep> steps;
  if (o.pp > 1) {
    steps = parallel::StageSteps(o.schedule, o.pp, o.topology().Of(rank).pp, o.accumulation_steps(),
                                 int(chunks.size()));
  }
  // Mixed precision: the fp32 working copies of the units in use (model/weights.h), of the
  // parameters, and of the gradients where those are bf16, most at once in any chunk's
  // forward or backward (gpt.cc's order: the embeddings stay from the lookup through the
  // head on a chunk with both, a layer or ln_f one at a time beside them).
  int64_t working = 0;
  if (o.Precision().params != DType::kF32) {
    const int64_t grads = o.Precision().grads != DType::kF32 ? 1 : 0;
    const std::vector<model::ParamUnit>& units = layout.units();
    const int64_t e = units[model::ParameterLayout::kEmbeddings].count();
    const int64_t f = layout.last_stage() ? units[size_t(layout.final_norm_unit())].count() : 0;
    for (const model::LayerRange& chunk : chunks) {
      const bool first = chunk.begin == 0, last = chunk.end == g.n_layer;
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
  }
  bytes += 4 * working;
  for (size_t c = 0; c < chunks.size(); ++c) {
    const int64_t layers = chunks[c].end - chunks[c].begin;
    const bool last = chunks[c].end == g.n_layer;
    const int64_t whole = model::CountActivations(shape, b, layers, last, true).Bytes(operand);
    const int64_t sets = o.pp > 1 ? parallel::InFlight(steps, int(c)) : 1;
    if (o.StageRecompute()) {
      const int64_t kept = model::CountActivations(shape, b, layers, last, false).Bytes(operand);
      bytes += whole + 4 * shape.Rows(n) * g.n_embd + (sets - 1) * kept;
    } else {
      bytes += sets * whole;
    }
  }
  return bytes;
}

MemoryFormula PredictedMemory(const TrainOptions& o, int rank) {
  const model::ParameterLayout layout = StageLayout(o, rank);
  const int64_t phi = layout.total();
  const ValueBytes bytes = BytesOf(o);
  // The optimizer's fp32 state a parameter, with the master weights under mixed precision.
  const int64_t state_per_element = (o.optimizer == OptimizerKind::kAdamW ? 8 : 4) +
                                    (o.Precision().master_weights() ? 4 : 0);
  MemoryFormula f;
  f.activations = PredictedActivations(o, rank);
  if (o.zero == 0) {
    return {bytes.params * phi, bytes.grads * phi, state_per_element * phi, f.activations};
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
  if (o.zero == 3 && o.overlap && o.pp == 1) {
    // The prefetch (zero.h): a unit and the next one at once, besides the embeddings.
    int64_t pair = 0;
    for (size_t u = 1; u + 1 < layout.units().size(); ++u) {
      pair = std::max(pair, layout.units()[u].count() + layout.units()[u + 1].count());
    }
    params_open = embeddings + pair;
  }
  f.params = bytes.params * (o.zero == 3 ? shard + params_open : phi);
  // ZeRO-2/3: the shard, one reduced chunk (in the wire type), and the open units'
  // gradients where they are fp32 (bf16 ones are accumulated from fp32 working copies,
  // which count as activations; model/weights.h). With --overlap a closed unit's
  // gradients stay until the next unit closes, and its reduced chunks have room of their
  // own (zero.h).
  int64_t open_grads = bytes.grads == 4 ? 4 * open(first && last) : 0;
  int64_t in_flight_reduced = 0;
  if (o.overlap && o.zero >= 2) {
    if (bytes.grads == 4) {
      // The chunk of each backward, in the order the stage runs them.
      std::vector<int> backwards;
      const int pp_rank = o.topology().Of(rank).pp;
      for (const parallel::PipelineStep& s :
           parallel::StageSteps(o.schedule, o.pp, pp_rank, o.accumulation_steps(),
                                int(layout.chunks().size()))) {
        if (s.kind == parallel::PipelineStep::kBackward) backwards.push_back(s.chunk);
      }
      open_grads = 4 * GradientsHeldWithOverlap(layout, backwards);
    }
    for (const std::pair<size_t, size_t>& unit : parallel::PiecesOfUnits(layout, o.zero, o.ep > 1)) {
      int64_t own = 0;
      for (size_t i = unit.first; i < unit.second; ++i) own += sharding.pieces()[i].own.count;
      in_flight_reduced = std::max(in_flight_reduced, own);
    }
  }
  f.grads = o.zero == 1 ? bytes.grads * phi
                        : bytes.grads * shard + bytes.grad_comm * (largest_chunk + in_flight_reduced) +
                              open_grads;
  f.optimizer = state_per_element * shard;
  return f;
}

}  // namespace tally::train
