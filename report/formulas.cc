// The report's traffic formulas (report.h): the exact bytes of each row and the seed
// article's, from the options alone. The memory formulas are report/memory.cc.
#include "report/formulas.h"

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "model/activations.h"
#include "model/parameters.h"
#include "parallel/data_parallel.h"
#include "parallel/pipeline_schedule.h"
#include "parallel/tensor_parallel.h"
#include "parallel/zero/sharding.h"
#include "report/report.h"
#include "runtime/comm/ledger/exact_traffic.h"
#include "runtime/comm/ledger/names.h"

namespace tally::train {

namespace {

int64_t BucketBytes(const TrainOptions& o) { return int64_t(o.parallel.bucket_mb * (1 << 20)); }

// The units ZeRO cuts world rank `rank`'s part into (parallel/zero/sharding.h): under expert parallelism
// the experts' runs apart.
std::vector<parallel::ZeroUnit> RankZeroUnits(const TrainOptions& o,
                                              const model::ParameterLayout& layout) {
  return parallel::ZeroUnits(layout, o.parallel.zero, o.parallel.ep > 1);
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
  const model::ParameterLayout layout = o.RankLayout(rank);
  std::vector<model::TensorRange> ranges = model::TensorRanges(layout);
  if (o.parallel.zero >= 1) {
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

// Bytes a pipeline boundary carries each way in a step (parallel/pipeline_schedule.h).
// Under --pp_scatter_gather: a micro-batch's boundary tensor (b·s·h values) and tp rank
// `tp_rank`'s chunk of it (partition.h's rule: the first n % tp chunks one more).
struct Scattered {
  int64_t whole = 0, count = 0;
};
Scattered ScatteredBoundary(const TrainOptions& o, int tp_rank) {
  const int64_t whole = int64_t(o.training.micro_batch_size) * o.model.seq_len * o.model.n_embd;
  return {whole, comm::ChunkOf(whole, o.parallel.tp, tp_rank).count};
}

int64_t BoundaryBytesPerStep(const TrainOptions& o) {
  return parallel::BoundaryBytesPerStep(
      o.training.global_batch_size / o.parallel.dp, o.model.seq_len, o.model.n_embd,
      o.parallel.sequence_parallel ? o.parallel.tp : 1, BytesOf(o).activations);
}

// ZeRO's calls per step and unit of the row's primitive in the row's phase (0: not ZeRO's).
int ZeroCalls(const TrainOptions& o, const comm::LedgerKey& key) {
  return parallel::ZeroCallsPerStep(o.parallel.zero, o.accumulation_steps(), key.primitive,
                                    key.phase, o.parallel.StageRecompute());
}

// The tensor-parallel calls of the row (parallel/tensor_parallel.h) in a step of these
// options, on world rank `rank` (whose ZeRO shard decides the per-token replicas' sum).
std::optional<parallel::TensorParallelCalls> TensorParallelPattern(const TrainOptions& o,
                                                                   const comm::LedgerKey& key,
                                                                   int rank) {
  // The experts' split linears run as many rows as the routing sent them: no closed form.
  if (key.label.ends_with(".experts")) return std::nullopt;
  parallel::TensorParallelStep step;
  step.sequence_parallel = o.parallel.sequence_parallel;
  step.micro_batches = o.accumulation_steps();
  step.rows = int64_t(o.training.micro_batch_size) * o.model.seq_len;
  step.n_embd = o.model.n_embd;
  step.recompute = o.parallel.StageRecompute();
  step.recompute_layers = o.parallel.LayerRecompute();
  step.activation_bytes = size_t(BytesOf(o).activations);
  step.grad_bytes = size_t(BytesOf(o).grads);
  if (key.label == comm::scope::kSequenceParallel) {
    step.per_token_elements = PerTokenElements(o, rank);
  }
  return parallel::TensorParallelCallsPerStep(step, key.label, key.primitive, key.phase);
}

}  // namespace

ValueBytes BytesOf(const TrainOptions& o) {
  const model::Precision p = o.Precision();
  return {int64_t(SizeOf(p.params)), int64_t(SizeOf(p.grads)), int64_t(SizeOf(p.grad_comm)),
          int64_t(SizeOf(p.activations))};
}

parallel::Sharding RankSharding(const TrainOptions& o, const model::ParameterLayout& layout,
                                int rank) {
  const int dp_rank = o.topology().Of(rank).dp;
  return parallel::Sharding(RankZeroUnits(o, layout), {o.parallel.dp, dp_rank},
                            {o.parallel.dp / o.parallel.ep, dp_rank / o.parallel.ep});
}

namespace {

// One rank's row: what each group's formula below reads.
struct Row {
  const ReportInputs& in;
  const comm::LedgerKey& key;
  int rank;
  const TrainOptions& o = in.options;
  const parallel::GridCoordinates at = o.topology().Of(rank);
};

// One value all-reduced over a group each step (the loss, a norm's sum of squares).
int64_t ScalarSent(const Row& row, int group_size, int group_rank, size_t element) {
  return row.in.steps * comm::ExactTraffic(comm::Primitive::kAllReduce, row.key.algorithm,
                                           group_size, group_rank, -1, 1, element)
                            .sent;
}

// The pipeline's boundaries (whole, or a tp rank's chunk under scatter/gather), and the
// loss and the norm summed over the stages.
int64_t PipelineSent(const Row& row) {
  const TrainOptions& o = row.o;
  const comm::LedgerKey& key = row.key;
  if (parallel::IsPipelineBoundary(key)) {
    if (!o.parallel.ScatterGather()) return row.in.steps * BoundaryBytesPerStep(o);
    // A tp rank's chunk of each micro-batch's boundary tensor.
    return row.in.steps * o.accumulation_steps() * ScatteredBoundary(o, row.at.tp).count *
           BytesOf(o).activations;
  }
  if (key.primitive != comm::Primitive::kAllReduce) return -1;
  if (key.label == comm::scope::kLoss && key.phase == comm::Phase::kOther) {
    return ScalarSent(row, o.parallel.pp, row.at.pp, 4);
  }
  if (key.label == comm::scope::kGradNorm && key.phase == comm::Phase::kOptimizer) {
    return ScalarSent(row, o.parallel.pp, row.at.pp, 8);
  }
  return -1;
}

// wte's gradient between the first stage (rank 0 of the group) and the last; under
// ZeRO-2/3 the dp rank's chunk of it.
int64_t TiedEmbeddingSent(const Row& row) {
  const TrainOptions& o = row.o;
  int64_t wte = model::ParameterLayout::ForGPT(o.model, o.parallel.tp, row.at.tp).specs()[0].numel;
  if (o.parallel.zero >= 2) wte = comm::ChunkOf(wte, o.parallel.dp, row.at.dp).count;
  return row.in.steps * comm::ExactTraffic(comm::Primitive::kAllReduce, row.key.algorithm, 2,
                                           row.at.pp == 0 ? 0 : 1, -1, wte, BytesOf(o).grads)
                            .sent;
}

// The tensor-parallel layers' calls (parallel/tensor_parallel.h), and under
// scatter/gather the receiving stage's gather of each boundary tensor from its chunks.
int64_t TensorParallelSent(const Row& row) {
  const TrainOptions& o = row.o;
  const comm::LedgerKey& key = row.key;
  const int tp_rank = row.at.tp;
  if (o.parallel.ScatterGather() && key.primitive == comm::Primitive::kAllGather &&
      parallel::ParseBoundaryScope(key.label).has_value()) {
    return row.in.steps * o.accumulation_steps() *
           comm::ExactTraffic(comm::Primitive::kAllGather, key.algorithm, o.parallel.tp, tp_rank,
                              -1, ScatteredBoundary(o, tp_rank).whole, BytesOf(o).activations)
               .sent;
  }
  std::optional<parallel::TensorParallelCalls> p = TensorParallelPattern(o, key, row.rank);
  if (!p) return -1;
  return row.in.steps * p->calls *
         comm::ExactTraffic(key.primitive, key.algorithm, o.parallel.tp, tp_rank, -1, p->count,
                            p->element)
             .sent;
}

// The ep group's fixed-size calls: a layer's routing counts (scope layer{l}.counts), E
// int64 a micro-batch's forward, each rank its experts' E/N, again in backward when the
// forward is recomputed (a stage's or a layer's); and the experts' squares of the norm.
int64_t ExpertSent(const Row& row) {
  const TrainOptions& o = row.o;
  const comm::LedgerKey& key = row.key;
  const int ep_rank = row.at.dp % o.parallel.ep;
  if (key.primitive == comm::Primitive::kAllToAll) {
    const bool recomputed = key.phase == comm::Phase::kBackward && o.parallel.recompute;
    if (key.phase != comm::Phase::kForward && !recomputed) return -1;
    return row.in.steps * o.accumulation_steps() *
           comm::ExactTraffic(comm::Primitive::kAllToAll, key.algorithm, o.parallel.ep, ep_rank, -1,
                              o.model.n_experts, 8)
               .sent;
  }
  if (key.label == comm::scope::kGradNorm && key.primitive == comm::Primitive::kAllReduce) {
    return ScalarSent(row, o.parallel.ep, ep_rank, 8);
  }
  return -1;
}

bool IsZeroRow(const comm::LedgerKey& key) {
  return key.primitive == comm::Primitive::kReduceScatter ||
         key.primitive == comm::Primitive::kAllGather;
}

// ZeRO's reduce-scatters (the gradients) and all-gathers (the parameters) of the units
// the row's group cuts: the dp group's, or under ep the edp group's (the experts').
int64_t ZeroSent(const Row& row, bool experts, int ranks, int group_rank) {
  const TrainOptions& o = row.o;
  const comm::LedgerKey& key = row.key;
  if (ZeroCalls(o, key) == 0) return -1;
  const std::vector<comm::Chunk> units =
      parallel::ChunksOf(RankZeroUnits(o, o.RankLayout(row.rank)), experts);
  const int64_t element =
      key.primitive == comm::Primitive::kReduceScatter ? BytesOf(o).grad_comm : BytesOf(o).params;
  return row.in.steps * parallel::ZeroBytesPerStep(
                            units, o.parallel.zero, ranks, group_rank, o.accumulation_steps(),
                            key.algorithm, key.primitive, key.phase, o.parallel.StageRecompute(),
                            element, GroupNodes(row.in, row.rank, experts));
}

// Data parallelism's gradient buckets over `ranks` ranks (parallel/data_parallel.h) of
// `buffer`: a count of values, or the ranges of them the group reduces.
template <typename Buffer>
int64_t BucketsSent(const Row& row, const Buffer& buffer, int ranks, int group_rank, bool experts) {
  return row.in.steps * parallel::GradientSyncBytesPerStep(
                            buffer, ranks, group_rank, BucketBytes(row.o), row.key.algorithm,
                            row.o.Precision().grad_comm, GroupNodes(row.in, row.rank, experts));
}

// The experts' data-parallel group: ZeRO's calls on the experts, or their buckets.
int64_t ExpertDataSent(const Row& row) {
  const TrainOptions& o = row.o;
  const int ranks = o.parallel.dp / o.parallel.ep, edp_rank = row.at.dp / o.parallel.ep;
  if (IsZeroRow(row.key)) return ZeroSent(row, true, ranks, edp_rank);
  if (row.key.primitive == comm::Primitive::kAllReduce && row.key.phase == comm::Phase::kBackward) {
    return BucketsSent(row, parallel::ExpertRanges(o.RankLayout(row.rank), true), ranks, edp_rank,
                       true);
  }
  return -1;
}

// The dp group: ZeRO's calls, or the gradient buckets of this rank's part of the model
// (under ep its non-expert ranges), and the loss and the norm over the replicas.
int64_t DataParallelSent(const Row& row) {
  const TrainOptions& o = row.o;
  const comm::LedgerKey& key = row.key;
  const int dp = o.parallel.dp, dp_rank = row.at.dp;
  if (IsZeroRow(key)) return ZeroSent(row, false, dp, dp_rank);
  if (key.primitive != comm::Primitive::kAllReduce) return -1;
  const model::ParameterLayout layout = o.RankLayout(row.rank);
  if (key.phase == comm::Phase::kBackward && o.parallel.ep > 1) {
    return BucketsSent(row, parallel::ExpertRanges(layout, false), dp, dp_rank, false);
  }
  if (key.phase == comm::Phase::kBackward) {
    return BucketsSent(row, layout.total(), dp, dp_rank, false);
  }
  auto one = [&](size_t element) {
    return row.in.steps * comm::ExactTraffic(key.primitive, key.algorithm, dp, dp_rank, -1, 1,
                                             element, GroupNodes(row.in, row.rank, false))
                              .sent;
  };
  if (key.label == comm::scope::kLoss) return one(4);      // one float
  if (key.label == comm::scope::kGradNorm) return one(8);  // ZeRO: one double
  return -1;
}

}  // namespace

int64_t ExactSent(const ReportInputs& in, const comm::LedgerKey& key, int rank) {
  const Row row{in, key, rank};
  if (key.group == comm::group::kPp) return PipelineSent(row);
  if (key.group == comm::group::kEmbedding && key.label == comm::scope::kTiedEmbedding &&
      key.primitive == comm::Primitive::kAllReduce) {
    return TiedEmbeddingSent(row);
  }
  if (key.group == comm::group::kTp) return TensorParallelSent(row);
  if (key.primitive == comm::Primitive::kAllToAllV) {  // what the call's counts said
    const auto& expected = in.traffic[size_t(rank)].expected();
    const auto it = expected.find(key);
    return it != expected.end() ? it->second : -1;
  }
  if (key.group == comm::group::kEp) return ExpertSent(row);
  if (key.group == comm::group::kEdp) return ExpertDataSent(row);
  if (key.group == comm::group::kDp) return DataParallelSent(row);
  return -1;
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
  if (o.parallel.ep > 1) {
    const int64_t c = o.model.n_embd;
    const int64_t experts = int64_t(o.model.n_layer) * o.model.n_experts * (8 * c * c + 5 * c);
    phi = key.group == comm::group::kEdp ? experts / o.parallel.ep : phi - experts;
  }
  const int64_t part_bytes = in.steps * phi * element / (o.parallel.tp * o.parallel.pp);
  if (key.group == comm::group::kEp && key.primitive == comm::Primitive::kAllToAllV &&
      (key.phase == comm::Phase::kForward || key.phase == comm::Phase::kBackward)) {
    // The seed's balanced estimate: each all-to-all sends (N−1)/N of the micro-batch's
    // b·s·k·h values (the rows leave as the activations' type, everything else fp32).
    const bool rows_out = key.phase == comm::Phase::kForward && key.label.ends_with("dispatch");
    const int64_t value = rows_out ? BytesOf(o).activations : 4;
    const int64_t values =
        int64_t(o.training.micro_batch_size) * o.model.seq_len * o.model.moe_top_k * o.model.n_embd;
    return in.steps * o.accumulation_steps() * (o.parallel.ep - 1) * values / o.parallel.ep * value;
  }
  if (key.group == comm::group::kTp) {
    std::optional<parallel::TensorParallelCalls> p = TensorParallelPattern(o, key, 0);
    if (!p || key.label == comm::scope::kCrossEntropy || key.label == comm::scope::kGradNorm ||
        key.label == comm::scope::kSequenceParallel) {
      return -1;
    }
    // An all-reduce of M bytes is 2M; an all-gather or reduce-scatter, its half, M.
    const int64_t passes = key.primitive == comm::Primitive::kAllReduce ? 2 : 1;
    return in.steps * p->calls * passes * p->count * int64_t(p->element);
  }
  if (parallel::IsPipelineBoundary(key)) return in.steps * BoundaryBytesPerStep(o);  // the seed's bsh each way
  if (key.group != comm::group::kDp && key.group != comm::group::kEdp) return -1;
  if (key.primitive == comm::Primitive::kAllReduce && key.phase == comm::Phase::kBackward) {
    return 2 * part_bytes;
  }
  // The seed's passes (it knows no recompute).
  int calls =
      parallel::ZeroCallsPerStep(o.parallel.zero, o.accumulation_steps(), key.primitive, key.phase);
  return calls > 0 ? calls * part_bytes : -1;
}

}  // namespace tally::train
