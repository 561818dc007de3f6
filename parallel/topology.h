// The grid of a run: world = dp × tp × pp ranks, every rank's coordinates, and its
// groups. Everything that asks "which rank is which" asks this.
//
// Ranks are laid out tp fastest, then dp, then pp (Megatron's order):
//
//   rank = tp_index + tp·(dp_index + dp·pp_index)
//
// so a tensor-parallel group is neighbouring ranks (the fastest links of a node), a
// data-parallel group strides by tp, and the pipeline's stages are farthest apart. With
// dp 2 × tp 2 × pp 2: tp groups [0 1] [2 3] [4 5] [6 7], dp groups [0 2] [1 3] [4 6]
// [5 7], pp groups [0 4] [1 5] [2 6] [3 7].
//
//   dp group         the ranks with this rank's (pp, tp): the same part of the model
//   tp group         this rank's (pp, dp): one stage of one replica, split
//   pp group         this rank's (dp, tp): the stages of one replica's tp part, in order
//   embedding group  the first and the last stage of the pp group, which both hold the
//                    tied embedding (Megatron's embedding group)
//
//   const Topology grid(/*dp=*/2, /*tp=*/2, /*pp=*/2);
//   grid.Of(5)             // {dp 0, tp 1, pp 1}
//   grid.DpGroup(5)        // {5, 7}
//   ASSIGN_OR_RETURN(Topology::Groups groups, grid.Split(world, /*dp_group=*/true));
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/comm/communicator.h"

namespace tally::parallel {

struct GridCoordinates {
  int dp = 0, tp = 0, pp = 0;
};

class Topology {
 public:
  Topology(int dp, int tp, int pp) : dp_(dp), tp_(tp), pp_(pp) {}

  int dp() const { return dp_; }
  int tp() const { return tp_; }
  int pp() const { return pp_; }
  int world() const { return dp_ * tp_ * pp_; }

  GridCoordinates Of(int rank) const { return {rank / tp_ % dp_, rank % tp_, rank / (tp_ * dp_)}; }
  int RankAt(GridCoordinates c) const { return c.tp + tp_ * (c.dp + dp_ * c.pp); }

  // The world ranks of `rank`'s groups, in the order of their group ranks.
  std::vector<int> DpGroup(int rank) const;
  std::vector<int> TpGroup(int rank) const;
  std::vector<int> PpGroup(int rank) const;

  // Every rank's coordinates and the members of its groups (--print_topology).
  std::string Describe() const;

  // This rank's groups, split from `world` (every rank of the world must call it): the
  // dp group when `dp_group` (dp > 1, or ZeRO over one rank), the tp group when tp > 1,
  // the pp and embedding groups when pp > 1 (embedding: null on the middle stages);
  // null otherwise. The groups are named "dp", "tp", "pp" and "embedding" in the ledger.
  struct Groups {
    std::unique_ptr<comm::Communicator> dp, tp, pp, embedding;
  };
  absl::StatusOr<Groups> Split(comm::Communicator& world, bool dp_group) const;

 private:
  int dp_, tp_, pp_;
};

}  // namespace tally::parallel
