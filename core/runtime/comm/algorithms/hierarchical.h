// The hierarchical algorithms: rings inside each node and rings across nodes (NCCL's and
// Horovod's hierarchical all-reduce), so that most bytes stay on the fast links.
//
// A group of p = K·G ranks on K nodes of G ranks each. A rank's local ring is the ranks
// of its node; its cross ring is the ranks with its local index l on every node, in node
// order. With M bytes:
//
//   AllReduce      reduce-scatter the buffer around the local ring (G pieces: rank l
//                  keeps piece l summed over its node), all-reduce that piece around the
//                  cross ring, all-gather the pieces around the local ring.
//                  Per rank: 2(G-1)/G·M inside the node, 2(K-1)/K·M/G across nodes (the
//                  flat ring sends 2(p-1)/p·M, all of it across nodes on a rank whose right
//                  neighbour is on the next node).
//   ReduceScatter  around the local ring, piece j being the chunks (partition.h) of the
//                  ranks with local index j; then around the cross ring, each rank keeping
//                  its own chunk. (G-1)/G·M inside, (K-1)/K·M/G across.
//   AllGather      the reverse: around the cross ring, then the local ring.
//
// A sum adds each element's values around the local ring, then the nodes' partial sums
// around the cross ring: the flat ring's terms in another order, so float results agree
// with it to within rounding, and every rank of a group gets the same bits. Everything
// else (other primitives, a group on one node, every rank its own node, nodes holding
// unequal numbers of the group's ranks) is the ring: the communicator runs and books it
// as such.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "core/runtime/comm/algorithms/partition.h"
#include "core/runtime/comm/ledger/wire.h"
#include "core/runtime/comm/types.h"

namespace tally::comm::hierarchical {

// Where a group's ranks sit: members[k][l] is the group rank with local index l on node k
// (nodes in order of their first rank, a node's ranks in group order).
struct Layout {
  std::vector<std::vector<int>> members;
  std::vector<int> node_index, local_index;  // by group rank
  int nodes() const { return int(members.size()); }
  int per_node() const { return int(members.front().size()); }
};

// The layout of a group whose rank i is on node nodes[i]; nullopt where the hierarchy
// degenerates to the ring (one node, one rank a node, or unequal nodes).
std::optional<Layout> LayoutOf(std::span<const int> nodes);

// Element ranges of the buffer: what one position of a ring owns.
using Ranges = std::vector<Chunk>;

// One pass around a ring: a reduce-scatter (pieces[i] ends summed on ring position i) or
// an all-gather (every position ends with every piece).
struct Pass {
  bool reduce;
  std::vector<int> ring;  // group ranks in ring order
  int me;                 // this rank's position
  std::vector<Ranges> pieces;  // by ring position
};

// The passes of `primitive` (all-reduce, reduce-scatter, all-gather) for group rank `rank`
// over a buffer of `count` elements (the all-reduce's data, the reduce-scatter's input,
// the all-gather's output), in order. The all-reduce's average is taken between its
// second and third pass, on the piece the rank owns then.
std::vector<Pass> Passes(Primitive primitive, const Layout& layout, int rank, int64_t count);

// The bytes `rank` sends to each group rank in one call (exact_traffic.h).
std::vector<int64_t> SentTo(Primitive primitive, const Layout& layout, int rank, int64_t count,
                            size_t element_size);

absl::Status AllReduce(Wire& wire, const Layout& layout, void* data, int64_t count);
absl::Status ReduceScatter(Wire& wire, const Layout& layout, const void* input, void* output,
                           int64_t count);
absl::Status AllGather(Wire& wire, const Layout& layout, const void* input, void* output,
                       int64_t count);

}  // namespace tally::comm::hierarchical
