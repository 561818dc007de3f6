#include "core/parallel/topology.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/runtime/comm/ledger/names.h"
#include "core/runtime/status_macros.h"

namespace tally::parallel {

namespace {

const char* AxisName(Axis axis) {
  return axis == Axis::kTp ? "tp" : axis == Axis::kDp ? "dp" : "pp";
}

}  // namespace

absl::StatusOr<Order> ParseOrder(const std::string& name) {
  const std::vector<std::string> parts = absl::StrSplit(name, '-');
  Order order{};
  bool seen[3] = {false, false, false};
  bool ok = parts.size() == 3;
  for (size_t i = 0; ok && i < 3; ++i) {
    if (parts[i] == "tp") order[i] = Axis::kTp;
    else if (parts[i] == "dp") order[i] = Axis::kDp;
    else if (parts[i] == "pp") order[i] = Axis::kPp;
    else ok = false;
    if (ok) {
      ok = !seen[int(order[i])];
      seen[int(order[i])] = true;
    }
  }
  if (!ok) {
    return absl::InvalidArgumentError(absl::StrCat(
        "[flags] --order must name tp, dp and pp once each, fastest-varying first (e.g. "
        "tp-dp-pp), got '", name, "'"));
  }
  return order;
}

std::string Name(const Order& order) {
  return absl::StrCat(AxisName(order[0]), "-", AxisName(order[1]), "-", AxisName(order[2]));
}

const char* Name(ZeroShard shard) { return shard == ZeroShard::kNode ? "node" : "dp"; }

absl::StatusOr<ZeroShard> ParseZeroShard(std::string_view name) {
  for (ZeroShard s : {ZeroShard::kDp, ZeroShard::kNode}) {
    if (name == Name(s)) return s;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("[flags] --zero_shard must be dp or node, got '", std::string(name), "'"));
}

GridCoordinates Topology::Of(int rank) const {
  GridCoordinates c;
  for (Axis axis : order_) {
    const int at = rank % Size(axis);
    rank /= Size(axis);
    if (axis == Axis::kTp) c.tp = at;
    if (axis == Axis::kPp) c.pp = at;
    if (axis == Axis::kDp) {
      c.cp = at % cp_;
      c.dp = at / cp_;
    }
  }
  return c;
}

int Topology::RankAt(GridCoordinates c) const {
  int rank = 0;
  for (int i = 2; i >= 0; --i) {
    const Axis axis = order_[i];
    const int at = axis == Axis::kTp ? c.tp : axis == Axis::kPp ? c.pp : c.cp + cp_ * c.dp;
    rank = rank * Size(axis) + at;
  }
  return rank;
}

std::vector<int> Topology::DpGroup(int rank) const {
  GridCoordinates c = Of(rank);
  std::vector<int> ranks;
  for (c.dp = 0; c.dp < dp_; ++c.dp) {
    for (c.cp = 0; c.cp < cp_; ++c.cp) ranks.push_back(RankAt(c));
  }
  return ranks;
}

std::vector<int> Topology::CpGroup(int rank) const {
  GridCoordinates c = Of(rank);
  std::vector<int> ranks;
  for (c.cp = 0; c.cp < cp_; ++c.cp) ranks.push_back(RankAt(c));
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

std::vector<int> Topology::EpGroup(int rank) const {
  std::vector<int> members;
  for (int r : DpGroup(rank)) {
    if (EdpGroupRank(Of(r)) == EdpGroupRank(Of(rank))) members.push_back(r);
  }
  return members;
}

std::vector<int> Topology::EdpGroup(int rank) const {
  std::vector<int> members;
  for (int r : DpGroup(rank)) {
    if (ExpertRank(Of(r)) == ExpertRank(Of(rank))) members.push_back(r);
  }
  return members;
}

absl::StatusOr<Topology::NodeShards> Topology::ShardByNode(int rank, const comm::Nodes& nodes,
                                                           const char* flag) const {
  const std::vector<int> dp = DpGroup(rank);
  // The dp group's ranks node by node, in world order (so are the nodes).
  std::vector<std::vector<int>> by_node;
  for (int r : dp) {
    if (by_node.empty() || nodes.node(r) != nodes.node(by_node.back().front())) {
      by_node.emplace_back();
    }
    by_node.back().push_back(r);
  }
  NodeShards groups;
  for (const std::vector<int>& on_node : by_node) {
    if (on_node.size() != by_node.front().size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "[flags] ", flag, " cuts the dp group by its nodes, and dp group [",
          absl::StrJoin(dp, " "), "] has ", by_node.front().size(), " on node ",
          nodes.node(by_node.front().front()), " but ", on_node.size(), " on node ",
          nodes.node(on_node.front()), " (--gpus_per_node, --order)"));
    }
    if (nodes.node(on_node.front()) == nodes.node(rank)) groups.shard = on_node;
  }
  const size_t place = size_t(std::find(groups.shard.begin(), groups.shard.end(), rank) -
                              groups.shard.begin());
  for (const std::vector<int>& on_node : by_node) groups.replicate.push_back(on_node[place]);
  return groups;
}

std::string Topology::Describe(const comm::Nodes* nodes) const {
  const std::string cp = cp_ > 1 ? absl::StrFormat(" x cp %d", cp_) : "";
  std::string out = absl::StrFormat("topology: world %d = dp %d%s x pp %d x tp %d (order %s: %s)\n",
                                    world(), dp_, cp, pp_, tp_, Name(order_),
                                    absl::StrCat(AxisName(order_[0]), " varies fastest, then ",
                                                 AxisName(order_[1]), ", then ",
                                                 AxisName(order_[2])));
  if (nodes != nullptr) {
    out += absl::StrFormat("nodes: %d (%s)\n", nodes->count(), nodes->Describe());
  }
  auto members = [](const std::vector<int>& ranks) {
    return absl::StrCat("[", absl::StrJoin(ranks, " "), "]");
  };
  for (int r = 0; r < world(); ++r) {
    const GridCoordinates c = Of(r);
    out += absl::StrFormat("rank %d: dp %d pp %d tp %d", r, c.dp, c.pp, c.tp);
    if (cp_ > 1) out += absl::StrFormat(" cp %d", c.cp);
    if (nodes != nullptr) out += absl::StrFormat(" node %d", nodes->node(r));
    out += absl::StrFormat(" | dp group %s | tp group %s | pp group %s", members(DpGroup(r)),
                           members(TpGroup(r)), members(PpGroup(r)));
    if (cp_ > 1) out += absl::StrFormat(" | cp group %s", members(CpGroup(r)));
    if (ep_ > 1) {
      out += absl::StrFormat(" | ep %d: ep group %s | edp group %s", ExpertRank(c),
                             members(EpGroup(r)), members(EdpGroup(r)));
    }
    out += "\n";
  }
  return out;
}

absl::StatusOr<Topology::Groups> Topology::Split(comm::Communicator& world, bool sharded,
                                                 const comm::Nodes* shard_nodes) const {
  // A group's color is its index among the groups of its kind; the world rank orders
  // the members.
  const int rank = world.rank();
  const GridCoordinates c = Of(rank);
  Groups groups;
  if (dp_ * cp_ > 1 || sharded) {
    ASSIGN_OR_RETURN(groups.dp, world.Split(c.pp * tp_ + c.tp, rank, comm::group::kDp));
  }
  // A replica's index over dp and cp (each cp rank holds its own pieces).
  const int dp_cp = c.dp * cp_ + c.cp;
  if (tp_ > 1) {
    ASSIGN_OR_RETURN(groups.tp, world.Split(c.pp * dp_ * cp_ + dp_cp, rank, comm::group::kTp));
  }
  if (cp_ > 1) {
    const int replica = (c.pp * dp_ + c.dp) * tp_ + c.tp;
    ASSIGN_OR_RETURN(groups.cp, world.Split(replica, rank, comm::group::kCp));
  }
  if (pp_ > 1) {
    const int replica = dp_cp * tp_ + c.tp;
    ASSIGN_OR_RETURN(groups.pp, world.Split(replica, rank, comm::group::kPp));
    const bool tied = c.pp == 0 || c.pp == pp_ - 1;
    ASSIGN_OR_RETURN(groups.embedding,
                     world.Split(tied ? replica : -1, rank, comm::group::kEmbedding));
  }
  if (ep_ > 1) {  // within the dp group (colored by it), by dp group rank
    const int replica = c.pp * tp_ + c.tp, blocks = EdpGroupSize();
    ASSIGN_OR_RETURN(groups.ep,
                     world.Split(replica * blocks + EdpGroupRank(c), rank, comm::group::kEp));
    ASSIGN_OR_RETURN(groups.edp,
                     world.Split(blocks > 1 || sharded ? replica * ep_ + ExpertRank(c) : -1, rank,
                                 comm::group::kEdp));
  }
  if (shard_nodes != nullptr) {  // each group colored by its first member
    ASSIGN_OR_RETURN(const NodeShards hsdp, ShardByNode(rank, *shard_nodes));
    ASSIGN_OR_RETURN(groups.dp_shard,
                     world.Split(hsdp.shard.front(), rank, comm::group::kDpShard));
    ASSIGN_OR_RETURN(groups.dp_replicate,
                     world.Split(hsdp.replicate.size() > 1 ? hsdp.replicate.front() : -1, rank,
                                 comm::group::kDpReplicate));
  }
  return groups;
}

}  // namespace tally::parallel
