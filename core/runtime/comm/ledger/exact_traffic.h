// The exact bytes one rank sends and receives in one collective call, in closed form.
//
// This is the formula the ledger is checked against: for every primitive, algorithm,
// group size, rank, root and count (including counts the group size does not divide),
// the ledger's measured bytes must equal ExactTraffic to the byte. With p ranks, M bytes
// and p dividing the count it reduces to the familiar forms, e.g. ring all-reduce
// 2(p-1)/p·M per rank; the seed article's 2M is the large-p limit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "core/runtime/comm/nodes.h"
#include "core/runtime/comm/types.h"

namespace tally::comm {

struct RankTraffic {
  int64_t sent = 0;
  int64_t recv = 0;
  bool operator==(const RankTraffic&) const = default;
};

// `count` is the full buffer as the Communicator call names it: the data of Broadcast,
// Reduce and AllReduce, the input of ReduceScatter and AllToAll (per rank), the output of
// AllGather, the root's buffer of Scatter and Gather. `root` is ignored where there is
// none. kSendRecv is the ring exchange of nccl-tests' sendrecv (every rank sends `count`
// to its right neighbour and receives as much from its left one); a barrier moves nothing.
// kNative counts as kRing (the model the ledger books for a transport's own collectives).
// kAllToAllV, whose blocks each pair sizes, is counted with the checks' skewed counts of
// a nominal `count` (partition.h's SkewedCount; AllToAllVTraffic takes any counts).
// kHierarchical depends on where the group's ranks are: `nodes` holds the node of every
// group rank (Nodes::Of(members)); without it, or where the hierarchy degenerates
// (hierarchical.h), it is the ring, as the communicator runs it.
RankTraffic ExactTraffic(Primitive primitive, Algorithm algorithm, int group_size, int rank,
                         int root, int64_t count, size_t element_size,
                         std::span<const int> nodes = {});

// ExactTraffic's sent bytes peer by peer: element j is what `rank` sends to group rank j
// in one call. A ring sends only to its right neighbour (rank + 1; Reduce and Gather,
// which run the chain the other way, to its left one, rank - 1); the naive star's root or
// hub (rank 0) sends to every other rank and the others to it; an all-to-all sends each
// rank its chunk; the hierarchical rings send to their two right neighbours, the local
// ring's and the cross ring's.
std::vector<int64_t> ExactSentTo(Primitive primitive, Algorithm algorithm, int group_size,
                                 int rank, int root, int64_t count, size_t element_size,
                                 std::span<const int> nodes = {});
// The same, summed by the link each peer is on: `nodes` holds the node of every group rank
// (Nodes::Of(members)).
LinkBytes ExactSentByLink(Primitive primitive, Algorithm algorithm, std::span<const int> nodes,
                          int rank, int root, int64_t count, size_t element_size);

// An all-to-all-v's bytes (ring and naive alike): each block to another rank once,
// Σ_{j≠rank} send_counts[j] elements sent and Σ_{j≠rank} recv_counts[j] received.
RankTraffic AllToAllVTraffic(std::span<const int64_t> send_counts,
                             std::span<const int64_t> recv_counts, int rank,
                             size_t element_size);

// The algorithm a communicator runs when asked for `algorithm`: kHierarchical only for
// all-reduce, reduce-scatter and all-gather on a group spread evenly over several nodes
// of several ranks (hierarchical.h), the ring otherwise; kRecursiveDoubling only for
// all-reduce, the ring otherwise; and an all-reduce of `bytes` that would run the ring
// runs recursive doubling when bytes <= small_allreduce_bytes (CommOptions); the others as
// asked.
Algorithm EffectiveAlgorithm(Primitive primitive, Algorithm algorithm, std::span<const int> nodes,
                             int64_t bytes = -1, int64_t small_allreduce_bytes = 0);

// nccl-tests' bus bandwidth: busbw = algbw (payload bytes / time) × this factor, the share
// of the payload that crosses each link for an optimal algorithm on `ranks` ranks:
// 2(n-1)/n for all-reduce, (n-1)/n for all-gather, reduce-scatter, all-to-all, gather and
// scatter, 1 for broadcast, reduce and point-to-point.
double BusFactor(Primitive primitive, int ranks);

}  // namespace tally::comm
