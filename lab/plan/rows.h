// What the planner's rows share (plan.h): bytes by link class, a strategy's traffic over
// the GPUs looked at, the groups looked at, a message's α-β time, and PlanRows, the plan
// being made. plan.cc makes the replicas' rows (data parallelism, ZeRO) and runs them all,
// zero_rows.cc ZeRO's variants across nodes, and split_rows.cc the rows of the strategies
// that split the model (tensor, expert and pipeline parallelism), each a join over the
// strategy's calls of a step where the strategy declares them
// (core/runtime/comm/ledger/expected_calls.h).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/model/parameters.h"
#include "core/parallel/topology.h"
#include "lab/plan/plan.h"
#include "core/runtime/comm/nodes.h"

namespace tally::plan {

// Bytes by link class, in double (a step's bytes at real scale).
struct Split {
  double intra = 0, inter = 0;
  double total() const { return intra + inter; }
  Split& Add(const comm::LinkBytes& b, double times = 1) {
    intra += times * double(b.intra);
    inter += times * double(b.inter);
    return *this;
  }
};

// One strategy's bytes over the GPUs looked at: the busiest GPU's (and its inter-node
// part), every GPU's, and the slowest group's α-β time.
struct Traffic {
  Split most, sum;
  double time = 0;
  int gpus = 0;
  // The busiest GPU: the most bytes, and of equals the most across nodes.
  void Add(const Split& gpu) {
    if (gpu.total() > most.total() || (gpu.total() == most.total() && gpu.inter > most.inter)) {
      most = gpu;
    }
    sum.intra += gpu.intra;
    sum.inter += gpu.inter;
    ++gpus;
  }
  // What a row shows: every GPU's bytes scaled from the GPUs looked at to all `world`.
  void Fill(PlanRow& row, int64_t world) const {
    const double scale = gpus > 0 ? double(world) / gpus : 0;
    row.exact_bytes_per_gpu = most.total();
    row.inter_bytes_per_gpu = most.inter;
    row.total_bytes = sum.total() * scale;
    row.inter_total_bytes = sum.inter * scale;
    row.time_s = time;
    row.links = sum.inter > 0 ? (sum.intra > 0 ? "intra+inter" : "inter") : "intra";
  }
};

// The GPUs whose groups the plan looks at.
constexpr int kLookedAt = 4096;

// The groups of one kind among the first kLookedAt GPUs, each once, members in group order.
inline std::vector<std::vector<int>> GroupsOf(const parallel::Topology& grid,
                                              std::vector<int> (parallel::Topology::*group)(int)
                                                  const) {
  std::vector<std::vector<int>> groups;
  std::vector<bool> seen(size_t(std::min(grid.world(), kLookedAt)), false);
  for (int r = 0; r < int(seen.size()); ++r) {
    if (seen[size_t(r)]) continue;
    std::vector<int> members = (grid.*group)(r);
    for (int m : members) {
      if (m < int(seen.size())) seen[size_t(m)] = true;
    }
    groups.push_back(std::move(members));
  }
  return groups;
}

// The α-β time of one message of `bytes` over `link`.
inline double MessageSeconds(const comm::LinkModel& link, double bytes) {
  return link.latency_us * 1e-6 + bytes / (link.gbps * link.efficiency * 1e9);
}

// The plan being made: its inputs, what every row reads, and the rows so far.
struct PlanRows {
  explicit PlanRows(const PlanInput& input)
      : in(input),
        grid(in.dp, in.tp, in.pp, in.order, in.ep, in.cp),
        e(in.bytes_per_value),
        m(std::max(1, in.micro_batches)),
        world(in.world()) {}
  const PlanInput& in;
  const parallel::Topology grid;
  const int e, m;  // bytes a value; micro-batches a step
  const int64_t world;
  std::vector<PlanRow> rows;

  // A GPU's b·s·h of a step: its dp rank's b sequences, s/cp positions of each.
  double bsh() const { return double(in.batch) * (in.seq_len / in.cp) * in.model.hidden; }
  int layers_per_stage() const { return (in.model.layers + in.pp - 1) / in.pp; }
  // The layers pipeline stage `stage` holds (its v model chunks' under the interleaved
  // schedule), in order.
  std::vector<int> StageLayerList(int stage) const;
  // The node of every member of a group: blocks of gpus_per_node world ranks.
  std::vector<int> NodesOf(const std::vector<int>& members) const {
    std::vector<int> out;
    for (int r : members) out.push_back(in.gpus_per_node > 0 ? r / in.gpus_per_node : 0);
    return out;
  }
  void Add(const std::string& strategy, double seed, const Traffic& t, const std::string& formula) {
    PlanRow r;
    r.strategy = strategy;
    // tp's and cp's calls are in each micro-batch's.
    r.in_micro_batches = strategy.rfind("tp (", 0) == 0 || strategy.rfind("cp (", 0) == 0;
    r.seed_bytes_per_gpu = seed;
    r.formula = formula;
    t.Fill(r, world);
    rows.push_back(r);
  }
};

// The values one GPU holds: its tensor-parallel part of its stage (the largest), and of
// them its share of the experts (E/ep of each layer's).
struct Part {
  int64_t values = 0, experts = 0;
  int64_t dense() const { return values - experts; }
};

// What the replicas' rows read (plan.cc): the part a GPU holds, the dp group's share of it
// (the dense values under expert parallelism), and for tally's GPT the layout ZeRO cuts
// into units.
struct Replicas {
  Part parts;
  int64_t part = 0;
  model::ParameterLayout layout;
};
Replicas ReplicasOf(const PlanInput& in);

// zero_rows.cc's rows: ZeRO's variants that cut the bytes across nodes (HSDP, no reshard,
// ZeRO++'s hpZ, qwZ and qgZ), each where its flag is on.
void NodeShardRows(PlanRows& plan);

// split_rows.cc's rows, each where its strategy is on.
void TensorParallelRows(PlanRows& plan);
void ExpertParallelRows(PlanRows& plan);
void PipelineRows(PlanRows& plan);
void ContextParallelRows(PlanRows& plan);
// The cp calls' shape of cp rank `rank` holding `layers` (split_rows.cc; lab/plan/compute.cc
// counts the same ranks' attention blocks).
parallel::ContextParallelShape ContextParallelShapeOf(const PlanInput& in, int rank,
                                                      std::vector<int> layers);

}  // namespace tally::plan
