// Nodes: which machine each world rank is on, and so which link a message between two
// ranks takes.
//
// Ranks on one node talk over its fast links (NVLink, 600 GB/s in the seed's example),
// ranks on different nodes over the network (an InfiniBand NIC per GPU): the link class
// of a message, `intra` or `inter`. The ledger books every message with its peer, so the
// split of any row follows from the nodes alone (SentByLink).
//
//   const Nodes nodes = Nodes::Blocks(/*world=*/8, /*gpus_per_node=*/4);
//   nodes.node(5);                 // 1
//   nodes.LinkBetween(3, 4);       // Link::kInter
//
// The threads backend runs every rank on this machine: one node, unless --gpus_per_node=G
// says that ranks r and r' share a node iff ⌊r/G⌋ = ⌊r'/G⌋ (so one machine can act as
// several). Under mpirun the nodes are the real ones, which the flag overrides.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tally::comm {

enum class Link : uint8_t { kIntra, kInter };
const char* Name(Link link);  // "intra", "inter"

// Bytes by the link class they travelled over.
struct LinkBytes {
  int64_t intra = 0, inter = 0;
  int64_t total() const { return intra + inter; }
  LinkBytes& operator+=(const LinkBytes& o) {
    intra += o.intra;
    inter += o.inter;
    return *this;
  }
  bool operator==(const LinkBytes&) const = default;
};

// The α-β model of a link: a message of b bytes takes latency + b / (bandwidth ·
// efficiency). The bandwidth is one direction's (a sender's to its receiver), and the
// efficiency the share of it that transfers achieve (1: all of it).
struct LinkModel {
  // The physical ranges a link may take (outside them a time would print as inf or 0):
  // 1 MB/s to 1 PB/s, at most 10 s a message, an achieved share of at least 0.1%.
  static constexpr double kMinGbps = 1e-3, kMaxGbps = 1e6, kMaxLatencyUs = 1e7, kMinEfficiency = 1e-3;
  // Whether every field is in its range.
  bool Physical() const {
    return gbps >= kMinGbps && gbps <= kMaxGbps && latency_us >= 0 && latency_us <= kMaxLatencyUs &&
           efficiency >= kMinEfficiency && efficiency <= 1;
  }

  double gbps = 0;        // bandwidth one way, GB/s (1e9 bytes a second)
  double latency_us = 0;  // per message, microseconds
  double efficiency = 1;  // in [kMinEfficiency, 1]
  double Seconds(int64_t bytes, int64_t messages) const {
    return double(messages) * latency_us * 1e-6 + double(bytes) / (gbps * efficiency * 1e9);
  }
};
// "BW,LATENCY[,EFFICIENCY]": GB/s one way, microseconds, and the achieved share (default
// 1), e.g. "600,1" or "300,1,0.8". `flag` names it in the message.
absl::StatusOr<LinkModel> ParseLinkModel(const std::string& flag, const std::string& text);
// "600 GB/s + 1 us a message", or "300 GB/s × 0.8 + 1 us a message".
std::string Describe(const LinkModel& link);

// A modelled cluster: the link inside a node and the link across nodes. The defaults are
// the seed's: NVLink at 600 GB/s inside a node, and one 200 Gb/s InfiniBand NIC per GPU
// (25 GB/s) across nodes; per message 1 µs inside a node (a GPU-to-GPU copy's launch and
// completion over NVLink) and 2 µs across (a small MPI message over InfiniBand HDR takes
// 1-2 µs end to end).
struct Cluster {
  LinkModel intra{600, 1};
  LinkModel inter{25, 2};
  const LinkModel& Of(Link link) const { return link == Link::kIntra ? intra : inter; }
};

// Seconds by the link class they were spent on.
struct LinkSeconds {
  double intra = 0, inter = 0;
  double total() const { return intra + inter; }
};

class Nodes {
 public:
  // Every rank of a world of `world` on one node.
  static Nodes One(int world);
  // gpus_per_node consecutive world ranks a node (the last node may hold fewer).
  static absl::StatusOr<Nodes> Blocks(int world, int gpus_per_node);
  // node_of[r]: the node of world rank r, numbered 0, 1, ... in order of first appearance.
  explicit Nodes(std::vector<int> node_of);

  int world() const { return int(node_of_.size()); }
  int count() const { return count_; }  // nodes
  int node(int rank) const { return node_of_[rank]; }
  // The largest number of ranks on a node (G when every node is full).
  int gpus_per_node() const { return largest_; }
  Link LinkBetween(int a, int b) const { return node(a) == node(b) ? Link::kIntra : Link::kInter; }
  // `bytes` sent from a to b, under its link class.
  LinkBytes Split(int a, int b, int64_t bytes) const {
    return LinkBetween(a, b) == Link::kIntra ? LinkBytes{bytes, 0} : LinkBytes{0, bytes};
  }
  // The nodes of a group's members (world ranks, in group order): what a collective's
  // algorithm and formula need to know of the placement; node_of() is the world's.
  std::vector<int> Of(std::span<const int> members) const;
  const std::vector<int>& node_of() const { return node_of_; }

  // "node 0: ranks 0 1 | node 1: ranks 2 3" (--print_topology).
  std::string Describe() const;

 private:
  std::vector<int> node_of_;
  int count_ = 0, largest_ = 0;
};

}  // namespace tally::comm
