// Naive algorithms: the root-based star (the seed article's "class monitor collects and
// hands back") and the direct exchange.
//
// p = group size, r = this rank, n = elements of the full buffer, M = its bytes, chunk j =
// ChunkOf(n, p, j), c_j = its bytes. The star puts all traffic on one rank, which the peer
// matrix shows as a hot row and column:
//
//   Broadcast      root sends M to each rank: (p-1)·M
//   Reduce         each rank sends M to the root, which receives (p-1)·M
//   AllReduce      Reduce to rank 0, then Broadcast from it: rank 0 (p-1)·M each way
//   Scatter/Gather root sends / receives every other rank's chunk
//   AllGather      Gather to rank 0, then Broadcast
//   ReduceScatter  Reduce to rank 0, then Scatter
//   AllToAll       every pair at once (direct): M - c_r
//   AllToAllV      every pair at once, each its own count: Σ_{j≠r} send_counts[j]
//   Barrier        everyone reports to rank 0, rank 0 releases everyone
#pragma once

#include <cstdint>
#include <span>

#include "absl/status/status.h"
#include "core/runtime/comm/ledger/wire.h"

namespace tally::comm::naive {

absl::Status Broadcast(Wire& wire, void* data, int64_t count, int root);
absl::Status Reduce(Wire& wire, const void* input, void* output, int64_t count, int root);
absl::Status AllReduce(Wire& wire, void* data, int64_t count);
absl::Status ReduceScatter(Wire& wire, const void* input, void* output, int64_t count);
absl::Status AllGather(Wire& wire, const void* input, void* output, int64_t count);
absl::Status Scatter(Wire& wire, const void* input, void* output, int64_t count, int root);
absl::Status Gather(Wire& wire, const void* input, void* output, int64_t count, int root);
absl::Status AllToAll(Wire& wire, const void* input, void* output, int64_t count);
// As ring::AllToAllV, every pair posted at once.
absl::Status AllToAllV(Wire& wire, const void* input, std::span<const int64_t> send_counts,
                       void* output, std::span<const int64_t> recv_counts);
absl::Status Barrier(Wire& wire);

}  // namespace tally::comm::naive
