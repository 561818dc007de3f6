#include "parallel/topology.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "runtime/status_macros.h"

namespace tally::parallel {

std::vector<int> Topology::DpGroup(int rank) const {
  GridCoordinates c = Of(rank);
  std::vector<int> ranks;
  for (c.dp = 0; c.dp < dp_; ++c.dp) ranks.push_back(RankAt(c));
  return ranks;
}

std::vector<int> Topology::TpGroup(int rank) const {
  GridCoordinates c = Of(rank);
  std::vector<int> ranks;
  for (c.tp = 0; c.tp < tp_; ++c.tp) ranks.push_back(RankAt(c));
  return ranks;
}

std::vector<int> Topology::PpGroup(int rank) const {
  GridCoordinates c = Of(rank);
  std::vector<int> ranks;
  for (c.pp = 0; c.pp < pp_; ++c.pp) ranks.push_back(RankAt(c));
  return ranks;
}

std::string Topology::Describe() const {
  std::string out = absl::StrFormat(
      "topology: world %d = dp %d x pp %d x tp %d (tp varies fastest, then dp, then pp)\n",
      world(), dp_, pp_, tp_);
  auto members = [](const std::vector<int>& ranks) {
    return absl::StrCat("[", absl::StrJoin(ranks, " "), "]");
  };
  for (int r = 0; r < world(); ++r) {
    const GridCoordinates c = Of(r);
    out += absl::StrFormat("rank %d: dp %d pp %d tp %d | dp group %s | tp group %s | pp group %s\n",
                           r, c.dp, c.pp, c.tp, members(DpGroup(r)), members(TpGroup(r)),
                           members(PpGroup(r)));
  }
  return out;
}

absl::StatusOr<Topology::Groups> Topology::Split(comm::Communicator& world, bool dp_group) const {
  // A group's color is its index among the groups of its kind; the world rank orders
  // the members.
  const int rank = world.rank();
  const GridCoordinates c = Of(rank);
  Groups groups;
  if (dp_group) {
    ASSIGN_OR_RETURN(groups.dp, world.Split(c.pp * tp_ + c.tp, rank, "dp"));
  }
  if (tp_ > 1) {
    ASSIGN_OR_RETURN(groups.tp, world.Split(c.pp * dp_ + c.dp, rank, "tp"));
  }
  if (pp_ > 1) {
    const int replica = c.dp * tp_ + c.tp;
    ASSIGN_OR_RETURN(groups.pp, world.Split(replica, rank, "pp"));
    const bool tied = c.pp == 0 || c.pp == pp_ - 1;
    ASSIGN_OR_RETURN(groups.embedding, world.Split(tied ? replica : -1, rank, "embedding"));
  }
  return groups;
}

}  // namespace tally::parallel
