// Ring algorithms (and, for the rooted primitives, the chain: the ring cut open at the root).
//
// p = group size, r = this rank, n = elements of the full buffer, M = its bytes, chunk j =
// ChunkOf(n, p, j) (partition.h), c_j = its bytes. Bytes sent per rank (exact_traffic.h
// has them all):
//
//   ReduceScatter  M - c_r                        AllGather  M - c_{r+1}
//   AllReduce      ReduceScatter + AllGather: 2(p-1)/p·M when p divides n
//   Broadcast      pipelined chain from the root: M, except the last rank of the chain
//   Reduce         chain toward the root: M, except the root
//   Scatter/Gather chain: each rank relays the chunks of the ranks behind it
//   AllToAll       p-1 steps; at step s rank r sends chunk r+s to rank r+s
//   AllToAllV      the same steps with each pair's own count: Σ_{j≠r} send_counts[j]
//   Barrier        a token twice around the ring, zero bytes
//
// Every function is called on every rank of the wire's group with the same arguments
// (the Communicator checked them); `op` and `dtype` come from the wire's signature.
#pragma once

#include <cstdint>
#include <span>

#include "absl/status/status.h"
#include "core/runtime/comm/ledger/wire.h"

namespace tally::comm::ring {

absl::Status Broadcast(Wire& wire, void* data, int64_t count, int root);
absl::Status Reduce(Wire& wire, const void* input, void* output, int64_t count, int root);
absl::Status AllReduce(Wire& wire, void* data, int64_t count);
absl::Status ReduceScatter(Wire& wire, const void* input, void* output, int64_t count);
absl::Status AllGather(Wire& wire, const void* input, void* output, int64_t count);
absl::Status Scatter(Wire& wire, const void* input, void* output, int64_t count, int root);
absl::Status Gather(Wire& wire, const void* input, void* output, int64_t count, int root);
absl::Status AllToAll(Wire& wire, const void* input, void* output, int64_t count);
// input: send_counts[j] elements for rank j, packed in rank order; output: recv_counts[j]
// from rank j, packed likewise. A pair with nothing to move exchanges no message.
absl::Status AllToAllV(Wire& wire, const void* input, std::span<const int64_t> send_counts,
                       void* output, std::span<const int64_t> recv_counts);
absl::Status Barrier(Wire& wire);

}  // namespace tally::comm::ring
