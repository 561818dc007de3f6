#include "core/runtime/comm/nodes.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace tally::comm {

const char* Name(Link link) { return link == Link::kIntra ? "intra" : "inter"; }

absl::StatusOr<LinkModel> ParseLinkModel(const std::string& flag, const std::string& text) {
  const std::vector<std::string> parts = absl::StrSplit(text, ',');
  LinkModel link;
  if ((parts.size() != 2 && parts.size() != 3) || !absl::SimpleAtod(parts[0], &link.gbps) ||
      !absl::SimpleAtod(parts[1], &link.latency_us) ||
      (parts.size() == 3 && !absl::SimpleAtod(parts[2], &link.efficiency)) || !link.Physical()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "[flags] --", flag, " must be BANDWIDTH,LATENCY[,EFFICIENCY]: GB/s one way (in [",
        LinkModel::kMinGbps, ", ", LinkModel::kMaxGbps, "]), microseconds per message (in [0, ",
        LinkModel::kMaxLatencyUs, "]) and the achieved share (in [", LinkModel::kMinEfficiency,
        ", 1], default 1), e.g. 600,1 or 300,1,0.8; got '", text, "'"));
  }
  return link;
}

std::string Describe(const LinkModel& link) {
  const std::string share =
      link.efficiency == 1 ? "" : absl::StrCat(" × ", link.efficiency);
  return absl::StrCat(link.gbps, " GB/s", share, " + ", link.latency_us, " us a message");
}

Nodes Nodes::One(int world) { return Nodes(std::vector<int>(std::max(world, 0), 0)); }

absl::StatusOr<Nodes> Nodes::Blocks(int world, int gpus_per_node) {
  if (gpus_per_node < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("[nodes] --gpus_per_node must be at least 1, got ", gpus_per_node));
  }
  std::vector<int> node_of(std::max(world, 0));
  for (int r = 0; r < world; ++r) node_of[r] = r / gpus_per_node;
  return Nodes(std::move(node_of));
}

Nodes::Nodes(std::vector<int> node_of) {
  // Renumbered in order of first appearance, so that equal maps compare equal.
  std::map<int, int> index;
  std::map<int, int> size;
  node_of_.reserve(node_of.size());
  for (int n : node_of) {
    auto [it, added] = index.emplace(n, int(index.size()));
    node_of_.push_back(it->second);
    largest_ = std::max(largest_, ++size[it->second]);
  }
  count_ = int(index.size());
}

std::vector<int> Nodes::Of(std::span<const int> members) const {
  std::vector<int> nodes;
  nodes.reserve(members.size());
  for (int r : members) nodes.push_back(node(r));
  return nodes;
}

std::string Nodes::Describe() const {
  std::vector<std::vector<int>> ranks(count_);
  for (int r = 0; r < world(); ++r) ranks[node_of_[r]].push_back(r);
  std::vector<std::string> parts;
  for (int n = 0; n < count_; ++n) {
    parts.push_back(absl::StrCat("node ", n, ": ranks ", absl::StrJoin(ranks[n], " ")));
  }
  return absl::StrJoin(parts, " | ");
}

}  // namespace tally::comm
