// The grid of a run: world = dp × tp × pp ranks, every rank's coordinates, and its
// groups. Everything that asks "which rank is which" asks this.
//
// The order names the axes fastest-varying first. The default, tp-dp-pp, is Megatron's:
//
//   rank = tp_index + tp·(dp_index + dp·pp_index)
//
// so a tensor-parallel group is neighbouring ranks (the fastest links of a node), a
// data-parallel group strides by tp, and the pipeline's stages are farthest apart. With
// dp 2 × tp 2 × pp 2: tp groups [0 1] [2 3] [4 5] [6 7], dp groups [0 2] [1 3] [4 6]
// [5 7], pp groups [0 4] [1 5] [2 6] [3 7]. Any other permutation (--order=dp-tp-pp, ...)
// places the same groups elsewhere: with 2 ranks a node (core/runtime/comm/nodes.h) tp-dp-pp
// keeps each tp group inside a node and dp-tp-pp spreads it across two. Within a group
// the members are in the order of their coordinate, which is also their world order.
//
//   dp group         the ranks with this rank's (pp, tp): the same part of the model
//   tp group         this rank's (pp, dp): one stage of one replica, split
//   pp group         this rank's (dp, tp): the stages of one replica's tp part, in order
//   embedding group  the first and the last stage of the pp group, which both hold the
//                    tied embedding (Megatron's embedding group)
//
// Context parallelism (cp ranks, core/parallel/context_parallel.h) splits each replica's
// sequences: its ranks are the fastest part of the dp axis, so that with the default order
// the grid is Megatron's tp-cp-dp-pp,
//
//   rank = tp_index + tp·(cp_index + cp·(dp_index + dp·pp_index)),
//
//   cp group         this rank's (pp, dp, tp): the pieces of the same sequences
//   dp group         with cp > 1 the ranks with this rank's (pp, tp) over dp and cp (dp·cp
//                    of them, in world order): the weights' replicas whose gradients are
//                    summed (Megatron's data-parallel group with context parallelism)
//
//   const Topology grid(/*dp=*/2, /*tp=*/2, /*pp=*/2);
//   grid.Of(5)             // {dp 0, tp 1, pp 1}
//   grid.DpGroup(5)        // {5, 7}
//   ASSIGN_OR_RETURN(Topology::Groups groups, grid.Split(world, /*sharded=*/false));
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "core/runtime/comm/communicator.h"

namespace tally::parallel {

struct GridCoordinates {
  int dp = 0, tp = 0, pp = 0, cp = 0;
};

enum class Axis : uint8_t { kTp, kDp, kPp };
// The grid's axes, fastest-varying first.
using Order = std::array<Axis, 3>;
inline constexpr Order kMegatronOrder = {Axis::kTp, Axis::kDp, Axis::kPp};
// "tp-dp-pp" and the other permutations of tp, dp and pp.
absl::StatusOr<Order> ParseOrder(const std::string& name);
std::string Name(const Order& order);

// What ZeRO shards over (--zero_shard): the whole dp group, or the dp group's ranks on a
// node, replicated across the nodes (HSDP; Topology::ShardByNode).
enum class ZeroShard : uint8_t { kDp, kNode };
const char* Name(ZeroShard shard);  // "dp", "node"
absl::StatusOr<ZeroShard> ParseZeroShard(std::string_view name);

class Topology {
 public:
  // `ep`: expert parallelism carved out of the data-parallel ranks (it divides dp, or with
  // context parallelism dp·cp): the ranks q and q' of a dp group (DpGroupRank) share an
  // expert-parallel group when q/ep == q'/ep (their ep rank is q mod ep), and an
  // expert-data-parallel group (the ranks holding the same experts) when
  // q mod ep == q' mod ep, as Megatron-LM lays them out (its expert grid takes ep from the
  // dp × cp ranks).
  Topology(int dp, int tp, int pp, Order order = kMegatronOrder, int ep = 1, int cp = 1)
      : dp_(dp), tp_(tp), pp_(pp), ep_(ep), cp_(cp), order_(order) {}

  int dp() const { return dp_; }
  int tp() const { return tp_; }
  int pp() const { return pp_; }
  int ep() const { return ep_; }
  int cp() const { return cp_; }
  int world() const { return dp_ * cp_ * tp_ * pp_; }
  // The dp group's size and a rank's place in it: dp·cp ranks with context parallelism,
  // dp_index·cp + cp_index.
  int DpGroupSize() const { return dp_ * cp_; }
  int DpGroupRank(GridCoordinates c) const { return c.dp * cp_ + c.cp; }
  // Expert parallelism's places: a rank's ep rank (which E/ep experts it holds), and its
  // edp group's size and its rank in it.
  int ExpertRank(GridCoordinates c) const { return DpGroupRank(c) % ep_; }
  int EdpGroupSize() const { return dp_ * cp_ / ep_; }
  int EdpGroupRank(GridCoordinates c) const { return DpGroupRank(c) / ep_; }
  const Order& order() const { return order_; }

  GridCoordinates Of(int rank) const;
  int RankAt(GridCoordinates c) const;

  // The world ranks of `rank`'s groups, in the order of their group ranks.
  std::vector<int> DpGroup(int rank) const;
  std::vector<int> TpGroup(int rank) const;
  std::vector<int> PpGroup(int rank) const;
  // With ep > 1: the ranks of `rank`'s expert-parallel group, and of its expert-data-parallel
  // group, in dp order.
  std::vector<int> EpGroup(int rank) const;
  std::vector<int> EdpGroup(int rank) const;
  // With cp > 1: the ranks of `rank`'s context-parallel group, in cp order.
  std::vector<int> CpGroup(int rank) const;

  // HSDP (--zero_shard=node; zero/zero.h): `rank`'s dp group cut by the nodes. The shard
  // group is its dp group's ranks on its node; the replicate group, the ranks at its place
  // among their node's, one a node. Both in world order. An error (naming `flag`, which
  // asked for the cut) when the nodes the dp group spans do not each hold as many of its
  // ranks. hpZ and qgZ's two hops cut the dp group alike.
  //   dp 8 on 2 nodes of 4: shard groups [0 1 2 3] [4 5 6 7], replicate [0 4] [1 5] ...
  struct NodeShards {
    std::vector<int> shard, replicate;
  };
  absl::StatusOr<NodeShards> ShardByNode(int rank, const comm::Nodes& nodes,
                                         const char* flag = "--zero_shard=node") const;

  // Every rank's coordinates and the members of its groups (--print_topology), and its
  // node when `nodes` is given.
  std::string Describe(const comm::Nodes* nodes = nullptr) const;

  // This rank's groups, split from `world` (every rank of the world must call it): the
  // dp group when dp > 1 or `sharded` (ZeRO, which shards even over one rank), the tp
  // group when tp > 1, the pp and embedding groups when pp > 1 (embedding: null on the
  // middle stages); null otherwise; with ep > 1 the "ep" and "edp" groups (edp: null when
  // dp == ep, each rank holding experts of its own, unless `sharded`); with cp > 1 the
  // "cp" group (and the dp group over dp·cp ranks); with `shard_nodes` (HSDP) the
  // "dp_shard" group and, when the dp group spans more than one node, "dp_repl"
  // (ShardByNode). The groups are named "dp", "tp", "pp", "embedding", "ep", "edp", "cp",
  // "dp_shard" and "dp_repl" in the ledger.
  struct Groups {
    std::unique_ptr<comm::Communicator> dp, tp, pp, embedding, ep, edp, cp;
    std::unique_ptr<comm::Communicator> dp_shard, dp_replicate;
  };
  absl::StatusOr<Groups> Split(comm::Communicator& world, bool sharded,
                               const comm::Nodes* shard_nodes = nullptr) const;

 private:
  // The dp axis holds cp·dp positions, cp_index + cp·dp_index.
  int Size(Axis axis) const {
    return axis == Axis::kTp ? tp_ : axis == Axis::kDp ? dp_ * cp_ : pp_;
  }

  int dp_, tp_, pp_, ep_, cp_;
  Order order_;
};

}  // namespace tally::parallel
