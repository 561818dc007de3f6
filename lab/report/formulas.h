// What the report's traffic formulas (lab/report/formulas.cc) and memory formulas
// (lab/report/memory.cc) share.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/model/parameters.h"
#include "core/parallel/zero/sharding.h"
#include "core/train/options.h"

namespace tally::report {

// Bytes a value of each kind of buffer takes (core/model/precision.h).
struct ValueBytes {
  int64_t params, grads, grad_comm, activations;
};
ValueBytes BytesOf(const train::TrainOptions& o);

// World rank `rank`'s HSDP groups (core/parallel/topology.h's ShardByNode); without
// --zero_shard=node its whole dp group, and a replicate group of itself.
parallel::Topology::NodeShards NodeShardsOf(const train::TrainOptions& o, int rank);

// World rank `rank`'s place among a group's `members` (world ranks, in group order).
inline int PlaceOf(const std::vector<int>& members, int rank) {
  return int(std::find(members.begin(), members.end(), rank) - members.begin());
}

// World rank `rank`'s dp group cut by its nodes (ShardByNode): with --zero_hpz the ranks on
// its node hold the secondary copy; with --zero_quantized_gradients (and --gpus_per_node)
// qgZ's two hops run over the ranks on its node and then those at its place on every node.
parallel::Topology::NodeShards NodeCutOf(const train::TrainOptions& o, int rank);

// World rank `rank`'s ZeRO shard of `layout`: the dense units cut over its dp group, the
// experts' over its edp group (whose rank is the dp rank / ep; topology.h).
parallel::Sharding RankSharding(const train::TrainOptions& o, const model::ParameterLayout& layout,
                                int rank);

}  // namespace tally::report
