// ZeRO's variants that cut the bytes across nodes (core/parallel/zero/zero.h): HSDP, ZeRO-3
// without resharding, and ZeRO++'s hpZ, qwZ and qgZ, each a row of the plan (lab/plan/rows.h)
// priced by ZeroCalls, the calls tally_train makes.
#include <algorithm>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "extensions/hsdp/hsdp.h"
#include "extensions/zero_pp/zero_pp.h"
#include "core/parallel/zero/sharding.h"
#include "lab/plan/rows.h"
#include "lab/report/formulas.h"
#include "core/runtime/comm/ledger/exact_traffic.h"
#include "core/runtime/comm/ledger/names.h"
#include "core/runtime/comm/nodes.h"

namespace tally::plan {
namespace {

// The variants of a ZeRO step (core/parallel/zero/zero.h), each a group of world ranks.
struct ZeroVariant {
  bool reshard = true;
  std::vector<int> replicate = {};  // HSDP: the gradient shard's all-reduce across nodes
  std::vector<int> node = {};       // hpZ: the backward's gathers inside the node
  int64_t quant_block = 0;          // qwZ
  // qgZ: the reduce-scatter's all-to-alls, in two hops when `across` has several ranks.
  int64_t grad_quant_block = 0;
  int grad_quant_bits = 8;
  std::vector<int> qgz_node = {}, qgz_across = {};
};

// A step of ZeRO stage `stage` for world rank `gpu` of a tally GPT part (one unit
// otherwise), summed by link (core/parallel/zero/sharding.h's ZeroCalls): over the ranks of
// `shard`, with the variant's groups.
Split ZeroStep(const PlanRows& plan, const Replicas& r, int stage, const std::vector<int>& shard,
               int gpu, const ZeroVariant& v = {}) {
  auto place = [gpu](const std::vector<int>& g) { return report::PlaceOf(g, gpu); };
  const std::vector<comm::Chunk> whole = {{0, r.part}};
  const std::vector<comm::Chunk> units =
      plan.in.model.gpt ? parallel::UnitRanges(parallel::ZeroUnits(r.layout, stage), false) : whole;
  const std::vector<int> replicate = v.replicate.empty() ? std::vector<int>{gpu} : v.replicate;
  const bool two_hops = v.qgz_across.size() > 1;
  // The groups whose ranks' nodes price a call's links (dp_shard: hpZ's or qgZ's node).
  const std::vector<int> shard_nodes = plan.NodesOf(shard),
                         replica_nodes = plan.NodesOf(two_hops ? v.qgz_across : replicate),
                         node_nodes = plan.NodesOf(two_hops ? v.qgz_node : v.node);
  auto member = [&](const std::vector<int>& g) {
    return extensions::ZeroPlusPlusShape::Group{int(g.size()), place(g), plan.NodesOf(g)};
  };
  const parallel::ZeroShape shape{.ranks = int(shard.size()),
                                  .rank = place(shard),
                                  .zero_stage = stage,
                                  .micro_batches = plan.m,
                                  .recompute = plan.in.StageRecompute(),
                                  .reshard = v.reshard,
                                  .grad_element = plan.e,
                                  .param_element = plan.e};
  extensions::ZeroPlusPlusShape variants{
      .hpz = std::nullopt,
      .quant_block = v.quant_block,
      .grad_quant_block = v.grad_quant_block,
      .grad_quant_bits = v.grad_quant_bits,
      .qgz_node = two_hops ? member(v.qgz_node) : extensions::ZeroPlusPlusShape::Group{},
      .qgz_across = two_hops ? member(v.qgz_across) : extensions::ZeroPlusPlusShape::Group{}};
  if (!v.node.empty()) variants.hpz = {.ranks = int(v.node.size()), .rank = place(v.node)};
  comm::ExpectedCalls calls = extensions::ZeroPlusPlusCalls(units, shape, variants);
  extensions::AddReplicaSum(units, shape, int(replicate.size()), place(replicate), {}, calls);
  Split bytes;
  for (const comm::ExpectedCall& c : calls) {
    const std::vector<int>& where = c.group == comm::group::kDpReplicate ? replica_nodes
                                    : c.group == comm::group::kDpShard   ? node_nodes
                                                                         : shard_nodes;
    bytes.Add(comm::ExactSentByLink(c.primitive, plan.in.allreduce, where, c.rank, -1, c.count,
                                    size_t(c.element)),
              double(c.calls));
  }
  return bytes;
}

// The bytes of `values` quantised at `bits` a value with an fp32 scale each `block`.
double QuantizedBytes(int64_t values, int bits, int64_t block) {
  return double(values) * (bits / 8.0 + 4.0 / double(block));
}

// qgZ's reduce-scatter (extensions/zero_pp/qgz.h) of the part of `r` a micro-batch over dp
// group `group`: in `v`, its block and bits and, where `cut` (the group cut by nodes, or
// null) spans nodes, its two hops; returns the α-β time of its all-to-alls, each priced
// as one pass over its bytes.
double QgzReduce(const PlanRows& plan, const Replicas& r, const std::vector<int>& group,
                 const parallel::Topology::NodeShards* cut, ZeroVariant& v) {
  const PlanInput& in = plan.in;
  v.grad_quant_block = in.zero_quant_block;
  v.grad_quant_bits = in.zero_quant_grad_bits;
  const double quantized = QuantizedBytes(r.part, in.zero_quant_grad_bits, in.zero_quant_block);
  if (cut == nullptr || cut->replicate.size() <= 1) {
    return PassesTime(in.allreduce, plan.NodesOf(group), quantized, plan.m, in.cluster);
  }
  v.qgz_node = cut->shard;
  v.qgz_across = cut->replicate;
  return PassesTime(in.allreduce, plan.NodesOf(cut->shard), quantized, plan.m, in.cluster) +
         PassesTime(in.allreduce, plan.NodesOf(cut->replicate),
                    quantized / double(cut->shard.size()), plan.m, in.cluster);
}

// ZeRO-3 with qgZ: the reduce-scatter as int8 or int4 all-to-alls with a scale a block,
// in two hops (inside the node, then across) where a dp group spans the nodes of
// --gpus_per_node.
void QgzRow(PlanRows& plan, const Replicas& r) {
  const PlanInput& in = plan.in;
  const double part = double(r.part) * plan.e;
  const double gathers = in.StageRecompute() ? 3.0 : 2.0;
  const int m = plan.m;
  const bool by_node = in.gpus_per_node > 0 && in.world() <= kLookedAt;
  Traffic q;
  for (const std::vector<int>& group : GroupsOf(plan.grid, &parallel::Topology::DpGroup)) {
    for (int gpu : group) {
      absl::StatusOr<parallel::Topology::NodeShards> cut;
      if (by_node) {
        cut = plan.grid.ShardByNode(gpu, comm::Nodes::Blocks(int(in.world()), in.gpus_per_node).value());
        if (!cut.ok()) return;  // CheckQuantization refused it
      }
      ZeroVariant v;
      const double reduce = QgzReduce(plan, r, group, by_node ? &*cut : nullptr, v);
      q.Add(ZeroStep(plan, r, 3, group, gpu, v));
      q.time = std::max(q.time, PassesTime(in.allreduce, plan.NodesOf(group), part, gathers * m,
                                           in.cluster) + reduce);
    }
  }
  plan.Add("zero-3 + qgz", 3.0 * part, q,
           absl::StrCat("2Φ·e + Φ(", in.zero_quant_grad_bits == 4 ? "1/2" : "1", " + 4/",
                        in.zero_quant_block, ") per GPU: the reduce-scatter as int",
                        in.zero_quant_grad_bits, " all-to-alls, inside the node then across "
                        "(--zero_quantized_gradients)"));
}

}  // namespace

// What cuts the bytes across nodes (core/parallel/zero/zero.h), each asked for: ZeRO-3
// keeping a unit from its forward to its backward (--zero3_reshard_after_forward=false),
// and HSDP's stages (--zero_shard=node), each ZeRO over a node's share of the dp group with
// the gradient shard all-reduced across the nodes.
void NodeShardRows(PlanRows& plan) {
  const PlanInput& in = plan.in;
  const Replicas r = ReplicasOf(in);
  const double part = double(r.part) * plan.e;
  const double gathers = in.StageRecompute() ? 3.0 : 2.0;
  const int m = plan.m;
  if (!in.zero3_reshard_after_forward) {
    Traffic kept;
    for (const std::vector<int>& group : GroupsOf(plan.grid, &parallel::Topology::DpGroup)) {
      for (int gpu : group) kept.Add(ZeroStep(plan, r, 3, group, gpu, {.reshard = false}));
      kept.time = std::max(kept.time, PassesTime(in.allreduce, plan.NodesOf(group), part,
                                                 2.0 * m, in.cluster));
    }
    plan.Add("zero-3, no reshard", 3.0 * part, kept,
             "3Φ per GPU less a gather a micro-batch (--zero3_reshard_after_forward=false)");
  }
  if (in.zero_quantized_weights) {  // qwZ: each gather 1 byte a value and 4 a block
    const int64_t block = in.zero_quant_block;
    const double quantized = QuantizedBytes(r.part, 8, block);
    Traffic q;
    for (const std::vector<int>& group : GroupsOf(plan.grid, &parallel::Topology::DpGroup)) {
      for (int gpu : group) q.Add(ZeroStep(plan, r, 3, group, gpu, {.quant_block = block}));
      q.time = std::max(q.time, PassesTime(in.allreduce, plan.NodesOf(group), part, m, in.cluster) +
                                    PassesTime(in.allreduce, plan.NodesOf(group), quantized,
                                               gathers * m, in.cluster));
    }
    plan.Add("zero-3 + qwz", 3.0 * part, q,
             absl::StrCat("Φ·e + 2Φ(1 + 4/", block,
                          ") per GPU: the gathers as int8, a scale a block (--zero_quantized_weights)"));
  }
  if (in.zero_quantized_gradients) QgzRow(plan, r);
  if ((in.zero_shard != parallel::ZeroShard::kNode && !in.zero_hpz) || in.world() > kLookedAt) {
    return;
  }
  const comm::Nodes nodes = comm::Nodes::Blocks(int(in.world()), in.gpus_per_node).value();
  if (in.zero_hpz) {
    // With qwZ and qgZ on too, ZeRO++ whole: the forward's gathers quantised over the dp
    // group, the backward's inside the node, the reduce-scatter as qgZ's all-to-alls.
    const bool whole = in.zero_quantized_weights && in.zero_quantized_gradients;
    const double quantized = QuantizedBytes(r.part, 8, in.zero_quant_block);  // qwZ's gathers
    Traffic hpz, zeropp;
    for (const std::vector<int>& group : GroupsOf(plan.grid, &parallel::Topology::DpGroup)) {
      for (int gpu : group) {
        const absl::StatusOr<parallel::Topology::NodeShards> cut = plan.grid.ShardByNode(gpu, nodes);
        if (!cut.ok()) return;  // CheckZeroShard refused it
        hpz.Add(ZeroStep(plan, r, 3, group, gpu, {.node = cut->shard}));
        const double backward =
            PassesTime(in.allreduce, plan.NodesOf(cut->shard), part, (gathers - 1) * m, in.cluster);
        hpz.time = std::max(hpz.time, PassesTime(in.allreduce, plan.NodesOf(group), part,
                                                 2.0 * m, in.cluster) + backward);
        if (!whole) continue;
        ZeroVariant v{.node = cut->shard, .quant_block = in.zero_quant_block};
        const double reduce = QgzReduce(plan, r, group, &*cut, v);
        zeropp.Add(ZeroStep(plan, r, 3, group, gpu, v));
        zeropp.time = std::max(zeropp.time, PassesTime(in.allreduce, plan.NodesOf(group),
                                                       quantized, m, in.cluster) +
                                                backward + reduce);
      }
    }
    plan.Add("zero-3 + hpz", 3.0 * part, hpz,
             "3Φ per GPU, the backward's gathers inside the node (--zero_hpz)");
    if (whole) {
      plan.Add("zero++ (hpz + qwz + qgz)", 3.0 * part, zeropp,
               absl::StrCat("Φ(1 + 4/B) + Φ(", in.zero_quant_grad_bits == 4 ? "1/2" : "1",
                            " + 4/B) + Φ·e in the node per GPU, B = ", in.zero_quant_block,
                            ": ZeRO++ whole (--zero_hpz --zero_quantized_weights "
                            "--zero_quantized_gradients)"));
    }
  }
  if (in.zero_shard != parallel::ZeroShard::kNode) return;
  std::vector<Traffic> hsdp(3);
  for (const std::vector<int>& group : GroupsOf(plan.grid, &parallel::Topology::DpGroup)) {
    for (int gpu : group) {
      const absl::StatusOr<parallel::Topology::NodeShards> cut = plan.grid.ShardByNode(gpu, nodes);
      if (!cut.ok()) return;  // CheckZeroShard refused it
      for (int stage = 1; stage <= 3; ++stage) {
        Traffic& t = hsdp[size_t(stage - 1)];
        t.Add(ZeroStep(plan, r, stage, cut->shard, gpu, {.replicate = cut->replicate}));
        const double passes = stage == 1 ? 2 : stage == 2 ? m + 1 : (1 + gathers) * m;
        t.time = std::max(t.time, PassesTime(in.allreduce, plan.NodesOf(cut->shard), part,
                                             passes, in.cluster) +
                                      PassesTime(in.allreduce, plan.NodesOf(cut->replicate),
                                                 part / double(cut->shard.size()), 2, in.cluster));
      }
    }
  }
  const char* forms[] = {"2Φ per GPU in a node + 2(r-1)/r·Φ/s across (s GPUs a node, r nodes)",
                         "the same (the reduce-scatter per micro-batch)",
                         "3Φ per GPU in a node + 2(r-1)/r·Φ/s across"};
  for (int stage = 1; stage <= 3; ++stage) {
    plan.Add(absl::StrCat("hsdp zero-", stage), (stage == 3 ? 3.0 : 2.0) * part,
             hsdp[size_t(stage - 1)], forms[stage - 1]);
  }
}

}  // namespace tally::plan
