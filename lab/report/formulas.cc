// The report's traffic formulas (report.h): the exact bytes of each row and the seed
// article's, from the options alone. The memory formulas are lab/report/memory.cc.
#include "lab/report/formulas.h"

#include <algorithm>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include "extensions/hsdp/hsdp.h"
#include "extensions/zero_pp/zero_pp.h"
#include "core/model/activations.h"
#include "core/model/parameters.h"
#include "core/parallel/data_parallel.h"
#include "core/parallel/onebit_adam.h"
#include "core/parallel/pipeline_schedule.h"
#include "core/parallel/powersgd.h"
#include "core/parallel/tensor_parallel.h"
#include "core/parallel/zero/sharding.h"
#include "lab/report/report.h"
#include "core/runtime/comm/ledger/exact_traffic.h"
#include "core/runtime/comm/ledger/names.h"

namespace tally::report {

namespace {

// The nodes of the ranks of world rank `rank`'s dp group, or (`experts`) of its edp group:
// the hierarchical algorithm's bytes depend on them.
std::vector<int> GroupNodes(const ReportInputs& in, int rank, bool experts) {
  const train::TrainOptions& o = in.options;
  const parallel::Topology grid = o.topology();
  const std::vector<int> group = experts ? grid.EdpGroup(rank) : grid.DpGroup(rank);
  return in.nodes != nullptr ? in.nodes->Of(group) : std::vector<int>(group.size(), 0);
}

// Of the run's steps, those the compression's warm-up (PowerSGD's, 1-bit Adam's) sums
// plainly (its steps are counted from the optimizer's, so a resumed run's first is
// first_step - 1).
int64_t WarmUpSteps(const ReportInputs& in) {
  return std::clamp<int64_t>(in.options.parallel.CompressionWarmup() - (in.first_step - 1), 0,
                             in.steps);
}

// World rank `rank` as a member of the group of world ranks `members`: the group's size,
// the rank's place and the node of each member.
parallel::StepEndShape::Group MemberOf(const ReportInputs& in, const std::vector<int>& members,
                                       int rank) {
  return {int(members.size()),
          PlaceOf(members, rank),
          in.nodes != nullptr ? in.nodes->Of(members) : std::vector<int>(members.size(), 0)};
}

// The per-token replicas' elements in the gradients the optimizer of world rank `rank`
// sees: its part of the model, or its ZeRO shard of that.
int64_t PerTokenElements(const train::TrainOptions& o, const model::ParameterLayout& layout,
                         int rank) {
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
  for (const model::TensorRange& r : ranges) count += r.spec->per_token ? r.end - r.begin : 0;
  return count;
}

// The layers of `layout`, in order.
std::vector<int> LayersOf(const model::ParameterLayout& layout) {
  std::vector<int> layers;
  for (const model::LayerRange& range : layout.model_chunks()) {
    for (int l = range.begin; l < range.end; ++l) layers.push_back(l);
  }
  return layers;
}

// The tensor-parallel layers' calls on a rank holding `layout`, tp rank `tp_rank`.
parallel::TensorParallelShape TensorParallelShapeOf(const train::TrainOptions& o,
                                                    const model::ParameterLayout& layout,
                                                    int tp_rank) {
  return {.ranks = o.parallel.tp,
          .rank = tp_rank,
          .layers = LayersOf(layout),
          .experts = o.model.moe(),
          .embedding = layout.first_stage(),
          .lm_head = layout.last_stage(),
          .sequence_parallel = o.parallel.sequence_parallel,
          .micro_batches = o.accumulation_steps(),
          .rows = int64_t(o.training.micro_batch_size) * o.model.seq_len / o.parallel.cp,
          .n_embd = o.model.n_embd,
          .recompute = o.parallel.StageRecompute(),
          .recompute_layers = o.parallel.LayerRecompute(),
          .activation_bytes = BytesOf(o).activations};
}

// The pipeline's boundaries and tied embedding on world rank `rank`: each boundary a
// micro-batch's b·s·h values (1/tp under sequence parallelism; under scatter/gather the
// tp rank's chunk, partition.h's rule: the first n % tp chunks one more).
parallel::PipelineShape PipelineShapeOf(const train::TrainOptions& o,
                                        const model::ParameterLayout& layout,
                                        parallel::GridCoordinates at) {
  const int64_t whole =
      int64_t(o.training.micro_batch_size) * o.model.seq_len / o.parallel.cp * o.model.n_embd;
  const bool scattered = o.parallel.ScatterGather();
  // ZeRO-2/3 sum the rank's chunk of wte, cut over the group that cuts the shards.
  const int rank = o.topology().RankAt(at);
  const std::vector<int> shard = NodeShardsOf(o, rank).shard;
  const int place = PlaceOf(shard, rank);
  return {.stages = o.parallel.pp,
          .stage = at.pp,
          .virtual_stages = int(layout.model_chunks().size()),
          .micro_batches = o.accumulation_steps(),
          .boundary = scattered ? comm::ChunkOf(whole, o.parallel.tp, at.tp).count
                                : whole / (o.parallel.sequence_parallel ? o.parallel.tp : 1),
          .element = BytesOf(o).activations,
          .tp = o.parallel.tp,
          .tp_rank = at.tp,
          .gathered = scattered ? whole : 0,
          .tied = parallel::TiedEmbeddingValues(o.model, o.parallel.tp, at.tp, o.parallel.zero,
                                                int(shard.size()), place),
          .grad_element = BytesOf(o).grads};
}

// The data-parallel group's gradient calls (`experts`: the edp group's, of the experts'
// tensors): ZeRO's reduce-scatters and all-gathers of the units, or the buckets'
// all-reduces.
comm::ExpectedCalls GradientCalls(const ReportInputs& in, const model::ParameterLayout& layout,
                                  int rank, bool experts) {
  const train::TrainOptions& o = in.options;
  const parallel::GridCoordinates at = o.topology().Of(rank);
  const int ep = o.parallel.ep;
  const parallel::Topology grid = o.topology();
  const char* group = experts ? comm::group::kEdp : comm::group::kDp;
  const int ranks = experts ? grid.EdpGroupSize() : grid.DpGroupSize();
  const int group_rank = experts ? grid.EdpGroupRank(at) : grid.DpGroupRank(at);
  if (o.parallel.zero >= 1) {
    const std::vector<comm::Chunk> units =
        parallel::UnitRanges(parallel::ZeroUnits(layout, o.parallel.zero, ep > 1), experts);
    parallel::ZeroShape shape{.group = group,
                              .ranks = ranks,
                              .rank = group_rank,
                              .nodes = GroupNodes(in, rank, experts),
                              .zero_stage = o.parallel.zero,
                              .micro_batches = o.accumulation_steps(),
                              .recompute = o.parallel.StageRecompute(),
                              .reshard = o.parallel.zero3_reshard_after_forward,
                              .grad_element = BytesOf(o).grad_comm,
                              .param_element = BytesOf(o).params};
    parallel::StepEndShape::Group replicas;
    if (o.parallel.ShardsByNode()) {  // HSDP (no experts): the node's shard, and its replicas
      const parallel::Topology::NodeShards groups = NodeShardsOf(o, rank);
      const parallel::StepEndShape::Group shard = MemberOf(in, groups.shard, rank);
      replicas = MemberOf(in, groups.replicate, rank);
      shape.group = comm::group::kDpShard;
      shape.ranks = shard.ranks;
      shape.rank = shard.rank;
      shape.nodes = shard.nodes;
    }
    extensions::ZeroPlusPlusShape variants;
    if (o.parallel.Hpz()) {  // the node's share of the dp group gathers backward's units
      const parallel::StepEndShape::Group node = MemberOf(in, NodeCutOf(o, rank).shard, rank);
      variants.hpz = {.ranks = node.ranks, .rank = node.rank, .nodes = node.nodes};
    }
    if (o.parallel.Qwz()) variants.quant_block = o.parallel.zero_quant_block;
    if (o.parallel.Qgz()) {  // in two hops when the dp group spans nodes (not HSDP's)
      variants.grad_quant_block = o.parallel.zero_quant_block;
      variants.grad_quant_bits = o.parallel.zero_quant_grad_bits;
      if (!o.parallel.ShardsByNode() && o.placement.gpus_per_node > 0) {
        const parallel::Topology::NodeShards cut = NodeCutOf(o, rank);
        if (cut.replicate.size() > 1) {
          for (auto [members, into] : {std::pair{&cut.shard, &variants.qgz_node},
                                       std::pair{&cut.replicate, &variants.qgz_across}}) {
            const parallel::StepEndShape::Group g = MemberOf(in, *members, rank);
            *into = {.ranks = g.ranks, .rank = g.rank, .nodes = g.nodes};
          }
        }
      }
    }
    comm::ExpectedCalls calls = extensions::ZeroPlusPlusCalls(units, shape, variants);
    extensions::AddReplicaSum(units, shape, replicas.ranks, replicas.rank, replicas.nodes, calls);
    return calls;
  }
  const std::vector<comm::Chunk> ranges = ep > 1 ? parallel::ExpertRanges(layout, experts)
                                                 : std::vector<comm::Chunk>{{0, layout.total()}};
  if (o.parallel.PowerSgd() || o.parallel.OneBitAdam()) {
    // The buckets over the warm-up's steps, the compressed calls after.
    const int64_t warm = WarmUpSteps(in);
    comm::ExpectedCalls calls = parallel::GradientSyncCalls(
        ranges, {.group = group,
                 .ranks = ranks,
                 .rank = group_rank,
                 .nodes = GroupNodes(in, rank, experts),
                 .bucket_bytes = int64_t(o.parallel.bucket_mb * (1 << 20)),
                 .element = BytesOf(o).grad_comm});
    for (comm::ExpectedCall& c : calls) c.of_steps = warm;
    comm::ExpectedCalls compressed =
        o.parallel.PowerSgd()
            ? parallel::PowerSgdCalls(parallel::SplitForPowerSgd(layout, o.parallel.powersgd_rank),
                                      group, ranks, group_rank, GroupNodes(in, rank, experts))
            : parallel::OneBitAdamCalls(parallel::OneBitParts(layout), group, ranks, group_rank,
                                        GroupNodes(in, rank, experts));
    for (comm::ExpectedCall& c : compressed) c.of_steps = in.steps - warm;
    comm::Append(calls, std::move(compressed));
    return calls;
  }
  return parallel::GradientSyncCalls(ranges,
                                     {.group = group,
                                      .ranks = ranks,
                                      .rank = group_rank,
                                      .nodes = GroupNodes(in, rank, experts),
                                      .bucket_bytes = int64_t(o.parallel.bucket_mb * (1 << 20)),
                                      .element = BytesOf(o).grad_comm});
}

// The step's end on world rank `rank`: the loss and the norm's sums, and the per-token
// replicas' under sequence parallelism.
parallel::StepEndShape StepEndShapeOf(const ReportInputs& in, const model::ParameterLayout& layout,
                                      int rank) {
  const train::TrainOptions& o = in.options;
  const parallel::Topology grid = o.topology();
  const parallel::GridCoordinates at = grid.Of(rank);
  parallel::StepEndShape shape{
      .dp = {grid.DpGroupSize(), grid.DpGroupRank(at), GroupNodes(in, rank, false)},
      .tp = {o.parallel.tp, at.tp, {}},
      .pp = {o.parallel.pp, at.pp, {}},
      .ep = {o.parallel.ep, grid.ExpertRank(at), {}},
      .shards = o.parallel.zero >= 1,
      .sequence_parallel = o.parallel.sequence_parallel,
      .per_token_elements = o.parallel.sequence_parallel ? PerTokenElements(o, layout, rank) : 0,
      .grad_bytes = BytesOf(o).grads};
  if (o.parallel.ShardsByNode()) shape.shard = MemberOf(in, NodeShardsOf(o, rank).shard, rank);
  return shape;
}

}  // namespace

ValueBytes BytesOf(const train::TrainOptions& o) {
  const model::Precision p = o.Precision();
  return {int64_t(SizeOf(p.params)), int64_t(SizeOf(p.grads)), int64_t(SizeOf(p.grad_comm)),
          int64_t(SizeOf(p.activations))};
}

parallel::Topology::NodeShards NodeShardsOf(const train::TrainOptions& o, int rank) {
  const parallel::Topology grid = o.topology();
  if (!o.parallel.ShardsByNode()) return {grid.DpGroup(rank), {rank}};
  return grid.ShardByNode(rank, *o.PlacedNodes()).value();  // validated with the options
}

parallel::Topology::NodeShards NodeCutOf(const train::TrainOptions& o, int rank) {
  return o.topology().ShardByNode(rank, *o.PlacedNodes()).value();  // validated
}

parallel::Sharding RankSharding(const train::TrainOptions& o, const model::ParameterLayout& layout,
                                int rank) {
  // ZeRO shards over the dp group (dp·cp ranks under context parallelism; under HSDP its
  // ranks on the node), the experts' units over the edp group.
  const parallel::Topology grid = o.topology();
  const parallel::GridCoordinates at = grid.Of(rank);
  const std::vector<int> shard = NodeShardsOf(o, rank).shard;
  const int place = PlaceOf(shard, rank);
  return parallel::Sharding(parallel::ZeroUnits(layout, o.parallel.zero, o.parallel.ep > 1),
                            {int(shard.size()), place},
                            {grid.EdpGroupSize(), grid.EdpGroupRank(at)});
}

comm::ExpectedCalls RankExpectedCalls(const ReportInputs& in, int rank) {
  const train::TrainOptions& o = in.options;
  const parallel::GridCoordinates at = o.topology().Of(rank);
  const model::ParameterLayout layout = o.RankLayout(rank);
  comm::ExpectedCalls calls;
  if (o.parallel.tp > 1) {
    comm::Append(calls, parallel::TensorParallelCalls(TensorParallelShapeOf(o, layout, at.tp)));
  }
  if (o.parallel.pp > 1) {
    comm::Append(calls, parallel::PipelineCalls(PipelineShapeOf(o, layout, at)));
  }
  comm::Append(calls, GradientCalls(in, layout, rank, /*experts=*/false));
  if (o.parallel.ep > 1) {
    comm::Append(calls, GradientCalls(in, layout, rank, /*experts=*/true));
    comm::Append(calls, parallel::RoutingCountCalls({.ranks = o.parallel.ep,
                                                     .rank = o.topology().ExpertRank(at),
                                                     .layers = LayersOf(layout),
                                                     .n_experts = o.model.n_experts,
                                                     .micro_batches = o.accumulation_steps(),
                                                     .recompute = o.parallel.recompute}));
  }
  if (o.parallel.cp > 1) {
    comm::Append(calls, parallel::ContextParallelCalls({.comm = o.parallel.cp_comm,
                                                        .ranks = o.parallel.cp,
                                                        .rank = at.cp,
                                                        .batch = o.training.micro_batch_size,
                                                        .seq_len = o.model.seq_len,
                                                        .channels = o.model.n_embd / o.parallel.tp,
                                                        .layers = LayersOf(layout),
                                                        .micro_batches = o.accumulation_steps(),
                                                        .element = BytesOf(o).activations,
                                                        .recompute = o.parallel.recompute,
                                                        .experts = o.model.n_experts}));
  }
  comm::Append(calls, parallel::StepEndCalls(StepEndShapeOf(in, layout, rank)));
  if (o.parallel.Compresses()) {  // the step's two error sums (core/train/trainer.h), fp64
    std::vector<int> everyone(size_t(o.world()));
    std::iota(everyone.begin(), everyone.end(), 0);
    const parallel::StepEndShape::Group world = MemberOf(in, everyone, rank);
    calls.push_back({.group = comm::group::kWorld,
                     .primitive = comm::Primitive::kAllReduce,
                     .phase = comm::Phase::kOther,
                     .scope = comm::scope::kCompressionError,
                     .count = 2,
                     .element = 8,
                     .ranks = world.ranks,
                     .rank = world.rank,
                     .nodes = world.nodes});
  }
  return calls;
}

int64_t ExactSent(const ReportInputs& in, std::span<const comm::ExpectedCall> calls,
                  const comm::LedgerKey& key, int rank) {
  if (key.primitive == comm::Primitive::kAllToAllV) {  // what the call's counts said
    const auto& expected = in.traffic[size_t(rank)].expected();
    const auto it = expected.find(key);
    return it != expected.end() ? it->second : -1;
  }
  return comm::ExpectedRunSent(calls, key, in.steps);
}

// The seed article's figure for the row, with the run's bytes a value (e: 4 in fp32, 2
// in bf16 as the seed counts): an all-reduce of M bytes moves 2M; so 2Φ·e/tp per step
// for the gradient all-reduce, and 2·b·s·h·e for each tensor-parallel all-reduce of the
// activations (8bsh·e/2 per layer and step; b·s·h·e for each all-gather and
// reduce-scatter of sequence parallelism); Φ·e/tp for each pass of ZeRO's
// reduce-scatter and all-gather over the buffer (2Φ together for ZeRO-1/2, 3Φ for ZeRO-3,
// with one micro-batch).
int64_t SeedSent(const ReportInputs& in, const comm::LedgerKey& key) {
  const train::TrainOptions& o = in.options;
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
  if (key.group == comm::group::kTp && key.label != comm::scope::kCrossEntropy) {
    // The tensor-parallel layers' calls of the row (any layer's, both ends'): an
    // all-reduce of M bytes is 2M; an all-gather or reduce-scatter, its half, M.
    parallel::TensorParallelShape whole = TensorParallelShapeOf(o, o.RankLayout(0), 0);
    whole.layers.resize(size_t(o.model.n_layer));
    std::iota(whole.layers.begin(), whole.layers.end(), 0);
    whole.embedding = whole.lm_head = true;
    const int64_t passes = key.primitive == comm::Primitive::kAllReduce ? 2 : 1;
    int64_t bytes = -1;
    for (const comm::ExpectedCall& c : parallel::TensorParallelCalls(whole)) {
      if (c.primitive != key.primitive || c.phase != key.phase || c.scope != key.label) continue;
      bytes = std::max<int64_t>(bytes, 0) + c.calls * passes * c.count * c.element;
    }
    return bytes >= 0 ? in.steps * bytes : -1;
  }
  if (parallel::IsPipelineBoundary(key)) {  // the seed's b·s·h each way
    const int64_t per_step = int64_t(o.training.global_batch_size / o.parallel.dp) *
                             o.model.seq_len / o.parallel.cp * o.model.n_embd *
                             BytesOf(o).activations /
                             (o.parallel.sequence_parallel ? o.parallel.tp : 1);
    return in.steps * per_step;
  }
  if (key.group != comm::group::kDp && key.group != comm::group::kEdp) return -1;
  if (key.primitive == comm::Primitive::kAllReduce && key.phase == comm::Phase::kBackward) {
    if (!o.parallel.PowerSgd() && !o.parallel.OneBitAdam()) return 2 * part_bytes;
    // The seed knows no compression: its 2Φ on the warm-up's steps only.
    if (!key.label.empty()) return -1;
    return in.steps > 0 ? 2 * part_bytes / in.steps * WarmUpSteps(in) : 0;
  }
  // The seed's passes (it knows no recompute, and no quantised gathers: qwZ's rows get none).
  if (!key.label.empty()) return -1;
  int calls =
      parallel::ZeroCallsPerStep(o.parallel.zero, o.accumulation_steps(), key.primitive, key.phase);
  return calls > 0 ? calls * part_bytes : -1;
}

}  // namespace tally::report
