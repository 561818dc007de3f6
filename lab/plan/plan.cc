// The planner's rows (plan.h): per strategy the seed's bytes, the exact bytes of the
// busiest GPU and of all, what crosses nodes, and the α-β time. The replicas' rows are
// here, ZeRO's variants in zero_rows.cc, the rest in split_rows.cc (lab/plan/rows.h).
#include "lab/plan/plan.h"

#include <algorithm>
#include <span>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/model/parameters.h"
#include "core/parallel/data_parallel.h"
#include "core/parallel/pipeline_schedule.h"
#include "core/parallel/onebit_adam.h"
#include "core/parallel/powersgd.h"
#include "core/parallel/zero/sharding.h"
#include "lab/plan/rows.h"
#include "lab/report/formulas.h"
#include "lab/report/report.h"
#include "core/runtime/comm/algorithms/hierarchical.h"
#include "core/runtime/comm/ledger/exact_traffic.h"
#include "core/runtime/comm/ledger/names.h"
#include "core/runtime/comm/nodes.h"

namespace tally::plan {
namespace {

using comm::Algorithm;
using comm::Primitive;

Part PartParams(const PlanInput& in) {
  if (!in.model.gpt) {
    const double stage = double(in.tp) * in.pp;
    const double experts = in.model.layers * ExpertValues(in);
    return {int64_t((double(in.model.params) - experts + experts / in.ep) / stage),
            int64_t(experts / in.ep / stage)};
  }
  const train::TrainOptions o = PlanAsTrainOptions(in);
  const std::vector<parallel::LayerRange> stages =
      parallel::StageLayers(o.model.n_layer, o.parallel.pp, {}).value();
  Part most;
  for (int s : CandidateStages(in.pp)) {  // on tp rank 0, which holds the most
    const model::ParameterLayout layout =
        model::ParameterLayout::ForGPT(o.model, in.tp, 0, {stages[size_t(s)]}, in.ep, 0);
    if (layout.total() <= most.values) continue;
    most = {layout.total(), 0};
    for (const comm::Chunk& c : parallel::ExpertRanges(layout, true)) most.experts += c.count;
  }
  return most;
}

}  // namespace

double PassesTime(comm::Algorithm asked, std::span<const int> nodes, double bytes, double passes,
                  const comm::Cluster& c) {
  const int n = int(nodes.size());
  if (n <= 1) return 0;
  const Algorithm a = comm::EffectiveAlgorithm(Primitive::kAllReduce, asked, nodes);
  if (a == Algorithm::kHierarchical) {
    const comm::hierarchical::Layout layout = *comm::hierarchical::LayoutOf(nodes);
    const double g = layout.per_node(), k = layout.nodes();
    return passes * ((g - 1) * MessageSeconds(c.intra, bytes / g) +
                     (k - 1) * MessageSeconds(c.inter, bytes / (g * k)));
  }
  bool crosses = false;
  for (int i = 0; i < n; ++i) {
    crosses |= a == Algorithm::kNaive ? nodes[i] != nodes[0] : nodes[i] != nodes[(i + 1) % n];
  }
  const comm::LinkModel& link = crosses ? c.inter : c.intra;
  return passes * (n - 1) * MessageSeconds(link, a == Algorithm::kNaive ? bytes : bytes / n);
}

Replicas ReplicasOf(const PlanInput& in) {
  Replicas r;
  r.parts = PartParams(in);
  r.part = in.ep > 1 ? r.parts.dense() : r.parts.values;
  if (in.model.gpt) {
    r.layout = model::ParameterLayout::ForGPT(
        PlanAsTrainOptions(in).model, in.tp, 0,
        {parallel::StageLayers(in.model.layers, in.pp, {}).value()[0]}, in.ep, 0);
  }
  return r;
}

namespace {

// ZeRO stage `stage`'s calls of `p` in `phase` of one micro-batch for rank i of the group
// at `where`: one pass over the part (`experts`: the experts'), a tally GPT part unit by
// unit (core/parallel/zero/sharding.h's ZeroCalls).
Split ZeroPass(const PlanRows& plan, const Replicas& r, int stage, Primitive p, comm::Phase phase,
               std::span<const int> where, int i, bool experts) {
  const PlanInput& in = plan.in;
  const Algorithm a = in.allreduce;
  Split bytes;
  if (!in.model.gpt) {
    return bytes.Add(comm::ExactSentByLink(p, a, where, i, -1, experts ? r.parts.experts : r.part,
                                           size_t(plan.e)));
  }
  const std::vector<comm::Chunk> units =
      parallel::UnitRanges(parallel::ZeroUnits(r.layout, stage, in.ep > 1), experts);
  for (const comm::ExpectedCall& c : parallel::ZeroCalls(
           units, {.zero_stage = stage, .grad_element = plan.e, .param_element = plan.e})) {
    if (c.primitive != p || c.phase != phase) continue;
    bytes.Add(comm::ExactSentByLink(p, a, where, i, -1, c.count, size_t(c.element)),
              double(c.calls));
  }
  return bytes;
}

// The same for world rank `gpu`, rank i of its dp group at `where`: the dense part over
// the dp group, and under expert parallelism the experts' over its edp group.
Split ZeroPasses(const PlanRows& plan, const Replicas& r, int stage, Primitive p, comm::Phase phase,
                 std::span<const int> where, int i, int gpu) {
  Split bytes = ZeroPass(plan, r, stage, p, phase, where, i, false);
  if (plan.in.ep > 1) {
    const std::vector<int> edp = plan.grid.EdpGroup(gpu);
    const int j = report::PlaceOf(edp, gpu);
    const Split experts = ZeroPass(plan, r, stage, p, phase, plan.NodesOf(edp), j, true);
    bytes.intra += experts.intra;
    bytes.inter += experts.inter;
  }
  return bytes;
}

// The gradients' sum of `values` for rank i of the group at `where`
// (core/parallel/data_parallel.h's list, the planner's part one bucket: one all-reduce).
Split GradientSum(const PlanRows& plan, int64_t values, std::span<const int> where, int i) {
  const comm::Chunk whole{0, values};
  Split bytes;
  for (const comm::ExpectedCall& c :
       parallel::GradientSyncCalls(std::span<const comm::Chunk>(&whole, 1),
                                   {.bucket_bytes = values * plan.e, .element = plan.e})) {
    bytes.Add(comm::ExactSentByLink(c.primitive, plan.in.allreduce, where, i, -1, c.count,
                                    size_t(c.element)),
              double(c.calls));
  }
  return bytes;
}

// The replicas' rows: the dp all-reduce of the part, and ZeRO-1/2/3's passes over it.
void ReplicaRows(PlanRows& plan) {
  const PlanInput& in = plan.in;
  const int e = plan.e, m = plan.m;
  const Replicas r = ReplicasOf(in);
  const Algorithm a = in.allreduce;
  using comm::Phase;
  Traffic ar, zero1, zero2, zero3;
  // ZeRO-3's gathers of a unit per micro-batch: forward, backward, and a pipeline's
  // recomputed forward (core/parallel/zero/sharding.h's ZeroCallsPerStep).
  const double gathers = in.StageRecompute() ? 3.0 : 2.0;
  for (const std::vector<int>& group : GroupsOf(plan.grid, &parallel::Topology::DpGroup)) {
    const std::vector<int> where = plan.NodesOf(group);
    const double bytes = double(r.part) * e;
    for (int i = 0; i < int(group.size()); ++i) {
      auto passes = [&](int stage, Primitive p, Phase phase) {
        return ZeroPasses(plan, r, stage, p, phase, where, i, group[i]);
      };
      ar.Add(GradientSum(plan, r.part, where, i));
      Split z1 = passes(1, Primitive::kReduceScatter, Phase::kBackward);
      const Split g1 = passes(1, Primitive::kAllGather, Phase::kOptimizer);
      z1.intra += g1.intra;
      z1.inter += g1.inter;
      zero1.Add(z1);
      // Per unit: the reduce-scatter (each micro-batch) and one or two all-gather passes.
      const Split rs = passes(2, Primitive::kReduceScatter, Phase::kBackward);
      const Split ag = passes(3, Primitive::kAllGather, Phase::kForward);
      zero2.Add(Split{m * rs.intra + ag.intra, m * rs.inter + ag.inter});
      zero3.Add(
          Split{m * rs.intra + gathers * m * ag.intra, m * rs.inter + gathers * m * ag.inter});
    }
    ar.time = std::max(ar.time, PassesTime(a, where, bytes, 2, in.cluster));
    zero1.time = ar.time;
    zero2.time = std::max(zero2.time, PassesTime(a, where, bytes, m + 1, in.cluster));
    zero3.time = std::max(zero3.time, PassesTime(a, where, bytes, (1 + gathers) * m, in.cluster));
  }
  if (in.ep > 1) {  // then the experts' passes over the edp groups
    double slowest = 0;
    for (const std::vector<int>& group : GroupsOf(plan.grid, &parallel::Topology::EdpGroup)) {
      slowest = std::max(
          slowest, PassesTime(a, plan.NodesOf(group), double(r.parts.experts) * e, 1, in.cluster));
    }
    zero1.time += 2 * slowest;
    zero2.time += (m + 1) * slowest;
    zero3.time += (1 + gathers) * m * slowest;
  }
  plan.Add("dp all-reduce", 2.0 * r.part * e, ar,
           a == Algorithm::kNaive ? "2NΦ in all" : "2Φ per GPU (2NΦ in all for naive)");
  // Under ep: the dense Φ over dp and a rank's experts over edp.
  const double sharded = double(r.part) + (in.ep > 1 ? double(r.parts.experts) : 0.0);
  plan.Add("zero-1", 2.0 * sharded * e, zero1, "2Φ per GPU: reduce-scatter + all-gather");
  plan.Add("zero-2", 2.0 * sharded * e, zero2, "2Φ per GPU (the reduce-scatter per micro-batch)");
  plan.Add("zero-3", 3.0 * sharded * e, zero3, "3Φ per GPU: two all-gathers and a reduce-scatter");
}

// The compressed step after its warm-up over each dp group, in fp32: PowerSGD's
// (core/parallel/powersgd.h's PowerSgdCalls) or 1-bit Adam's (core/parallel/onebit_adam.h's
// OneBitAdamCalls). Its time prices each call as passes over its bytes: two for an
// all-reduce, one for an all-gather or an all-to-all.
void CompressionRow(PlanRows& plan) {
  const PlanInput& in = plan.in;
  const Replicas r = ReplicasOf(in);
  const bool powersgd = in.grad_compression == parallel::GradCompression::kPowerSgd;
  const parallel::PowerSgdSplit split =
      powersgd ? parallel::SplitForPowerSgd(r.layout, in.powersgd_rank) : parallel::PowerSgdSplit();
  // A model tally does not build (no layout): one part, the replica's values.
  const std::vector<parallel::OneBitPart> parts =
      in.model.gpt ? parallel::OneBitParts(r.layout)
                   : std::vector<parallel::OneBitPart>{parallel::OneBitWhole(r.part)};
  auto calls = [&](int n, int i) {
    return powersgd ? parallel::PowerSgdCalls(split, "dp", n, i)
                    : parallel::OneBitAdamCalls(parts, "dp", n, i);
  };
  Traffic t;
  for (const std::vector<int>& group : GroupsOf(plan.grid, &parallel::Topology::DpGroup)) {
    const std::vector<int> where = plan.NodesOf(group);
    const int n = int(group.size());
    double seconds = 0;
    for (int i = 0; i < n; ++i) {
      Split bytes;
      for (const comm::ExpectedCall& c : calls(n, i)) {
        bytes.Add(comm::ExactSentByLink(c.primitive, in.allreduce, where, i, -1, c.count,
                                        size_t(c.element)));
        const double passes = c.primitive == comm::Primitive::kAllReduce ? 2 : 1;
        if (i == 0) {
          seconds += PassesTime(in.allreduce, where, double(c.count * c.element), passes, in.cluster);
        }
      }
      t.Add(bytes);
    }
    t.time = std::max(t.time, seconds);
  }
  if (powersgd) {
    plan.Add(absl::StrCat("dp powersgd (r=", in.powersgd_rank, ")"), 2.0 * r.part * plan.e, t,
             "2(W + Σ(m+n)·r)·4 per GPU: whole tensors, P and Q, fp32");
  } else {
    plan.Add("dp 1-bit adam", 2.0 * r.part * plan.e, t,
             "2(dp−1)/dp·N/8 + 8(dp−1) per GPU: the momentum's signs to and from their chunk's "
             "rank, and the scales (N: Φ padded to a multiple of 8·dp; under tp or pp, a sum "
             "over Φ's parts: the replicated tensors and the tied embedding apart)");
  }
}

// The experts' gradients over the ranks holding the same experts.
void ExpertReplicaRow(PlanRows& plan) {
  const PlanInput& in = plan.in;
  const int e = plan.e;
  const Part parts = PartParams(in);
  Traffic edp;
  for (const std::vector<int>& group : GroupsOf(plan.grid, &parallel::Topology::EdpGroup)) {
    const std::vector<int> where = plan.NodesOf(group);
    for (int i = 0; i < int(group.size()); ++i) {
      edp.Add(GradientSum(plan, parts.experts, where, i));
    }
    edp.time = std::max(edp.time,
                        PassesTime(in.allreduce, where, double(parts.experts) * e, 2, in.cluster));
  }
  plan.Add("edp all-reduce (experts)", 2.0 * parts.experts * e, edp,
           "2Φ_experts/ep per GPU over the dp/ep ranks holding the same experts");
}

}  // namespace

int ShardGpus(const PlanInput& in) {
  const parallel::Topology grid(in.dp, in.tp, in.pp, in.order, in.ep, in.cp);
  if (in.gpus_per_node <= 0) return grid.DpGroupSize();
  const comm::Nodes nodes = comm::Nodes::Blocks(int(in.world()), in.gpus_per_node).value();
  const absl::StatusOr<parallel::Topology::NodeShards> cut = grid.ShardByNode(0, nodes);
  return cut.ok() ? int(cut->shard.size()) : grid.DpGroupSize();
}

// One row per strategy, its seed form, exact form and time side by side, so that the
// table reads as the article's list.
std::vector<PlanRow> Plan(const PlanInput& in) {
  PlanRows plan(in);
  if (in.dp * in.cp > 1) ReplicaRows(plan);
  if (in.dp * in.cp > 1) NodeShardRows(plan);
  if (in.dp * in.cp > 1 && in.grad_compression != parallel::GradCompression::kNone) {
    CompressionRow(plan);
  }
  if (in.ep > 1 && in.dp * in.cp > in.ep) ExpertReplicaRow(plan);
  TensorParallelRows(plan);
  ContextParallelRows(plan);
  ExpertParallelRows(plan);
  PipelineRows(plan);
  return plan.rows;
}

}  // namespace tally::plan
