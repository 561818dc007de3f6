// Recursive doubling: the latency-optimal all-reduce for small buffers (MPICH's and Open
// MPI's choice below a few kilobytes; Thakur, Rabenseifner and Gropp 2005).
//
// p = group size, p' = the largest power of two <= p, e = p - p', r = this rank, M = the
// buffer's bytes. Every step exchanges whole buffers:
//
//   fold      ranks r < 2e: the even one sends its M to r + 1, which reduces it in; the
//             odd ones and the ranks >= 2e (p' of them, renumbered 0..p'-1) go on
//   doubling  log2(p') rounds: round k exchanges with the rank whose new number differs
//             in bit k, each reducing the other's buffer into its own
//   unfold    each odd rank r < 2e sends the result back to r - 1
//
// Bytes sent per rank: log2(p')·M (+ M for an odd rank below 2e, which also returns the
// result; an even rank below 2e sends M only): log2(p)·M when p is a power of two, against
// the ring's 2(p-1)/p·M, in log2(p) messages instead of 2(p-1). Both partners of a round
// hold the same partial result afterwards (sums and products are commutative in IEEE
// arithmetic, as are max and min of numbers), so every rank ends with the same bits.
#pragma once

#include <cstdint>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "core/runtime/comm/ledger/wire.h"

namespace tally::comm::recursive_doubling {

absl::Status AllReduce(Wire& wire, void* data, int64_t count);

// What group rank `rank` does, step by step: with whom, and whether it sends its buffer,
// receives one and reduces it in, both at once, or receives the result (the unfold).
// ExactTraffic and ExactSentTo count these.
enum class Move { kSend, kReduce, kExchange, kReceive };
struct Step {
  int peer;
  Move move;
  bool sends() const { return move == Move::kSend || move == Move::kExchange; }
  bool receives() const { return move != Move::kSend; }
};
// A rank's steps: at most log2(p) + 2, kept inline (a small all-reduce allocates nothing).
using Steps = absl::InlinedVector<Step, 8>;
Steps Schedule(int group_size, int rank);

}  // namespace tally::comm::recursive_doubling
