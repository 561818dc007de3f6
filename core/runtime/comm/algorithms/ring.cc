#include "core/runtime/comm/algorithms/ring.h"

#include <vector>

#include "core/runtime/comm/algorithms/buffer_math.h"
#include "core/runtime/comm/algorithms/reduce.h"
#include "core/runtime/status_macros.h"

namespace tally::comm::ring {
namespace {

// One ring step: send a range to the right neighbour while receiving (or receive-reducing)
// a range from the left one, and wait for both. Every rank receives in every step, so the
// send may be an exchange (small messages go eagerly).
absl::Status Step(Wire& wire, const void* send, size_t send_bytes, void* recv, size_t recv_bytes,
                  bool reduce) {
  Requests step;
  wire.Send(wire.right(), send, send_bytes, step, SendMode::kExchange);
  if (reduce) {
    wire.RecvReduce(wire.left(), recv, recv_bytes, step);
  } else {
    wire.Recv(wire.left(), recv, recv_bytes, step);
  }
  return step.WaitAll();
}

// The reduce-scatter half of the ring all-reduce, in place.
//
// The buffer is cut into p chunks. At step s (0 <= s < p-1) rank r sends chunk r-s-1 to
// its right neighbour and receives chunk r-s-2 from its left one, reducing it into its own
// copy. Each chunk thus travels p-1 hops, collecting one contribution per hop, and after
// the last step rank r holds chunk r reduced over all ranks.
absl::Status ReduceScatterInPlace(Wire& wire, void* data, int64_t count) {
  int p = wire.size(), r = wire.rank();
  for (int s = 0; s < p - 1; ++s) {
    Chunk send_chunk = ChunkOf(count, p, wire.RingRank(r, -s - 1));
    Chunk recv_chunk = ChunkOf(count, p, wire.RingRank(r, -s - 2));
    RETURN_IF_ERROR(Step(wire, At(data, send_chunk.offset, wire), Bytes(send_chunk.count, wire),
                         At(data, recv_chunk.offset, wire), Bytes(recv_chunk.count, wire),
                         /*reduce=*/true));
  }
  return absl::OkStatus();
}

// The all-gather half, in place: rank r starts with chunk r complete. At step s it sends
// chunk r-s (which it completed one step earlier) and receives chunk r-s-1.
absl::Status AllGatherInPlace(Wire& wire, void* data, int64_t count) {
  int p = wire.size(), r = wire.rank();
  for (int s = 0; s < p - 1; ++s) {
    Chunk send_chunk = ChunkOf(count, p, wire.RingRank(r, -s));
    Chunk recv_chunk = ChunkOf(count, p, wire.RingRank(r, -s - 1));
    RETURN_IF_ERROR(Step(wire, At(data, send_chunk.offset, wire), Bytes(send_chunk.count, wire),
                         At(data, recv_chunk.offset, wire), Bytes(recv_chunk.count, wire),
                         /*reduce=*/false));
  }
  return absl::OkStatus();
}

absl::Status FinishChunkAverage(Wire& wire, void* data, Chunk chunk) {
  return FinishAverageOf(wire, At(data, chunk.offset, wire), chunk.count);
}

// Passes chunks of `counts` elements along the chain: receives them from `from`, in this
// order, into scratch space, and sends each on to `to` as soon as it has arrived. The
// sends join `onward`, which the caller waits for.
absl::Status Relay(Wire& wire, const std::vector<int64_t>& counts, int from, int to,
                   Requests& onward) {
  int64_t total = 0;
  for (int64_t n : counts) total += n;
  ASSIGN_OR_RETURN(void* relay, wire.Scratch(total));
  std::vector<Requests> arriving(counts.size());
  int64_t offset = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    wire.Recv(from, At(relay, offset, wire), Bytes(counts[i], wire), arriving[i]);
    offset += counts[i];
  }
  offset = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    RETURN_IF_ERROR(arriving[i].WaitAll());
    wire.Send(to, At(relay, offset, wire), Bytes(counts[i], wire), onward);
    offset += counts[i];
  }
  return absl::OkStatus();
}

// A rank's distance from the root along the ring: the root is 0, its right neighbour 1.
int Distance(const Wire& wire, int root) { return wire.RingRank(wire.rank(), -root); }

}  // namespace

absl::Status AllReduce(Wire& wire, void* data, int64_t count) {
  RETURN_IF_ERROR(ReduceScatterInPlace(wire, data, count));
  RETURN_IF_ERROR(FinishChunkAverage(wire, data, ChunkOf(count, wire.size(), wire.rank())));
  return AllGatherInPlace(wire, data, count);
}

// The same ring as ReduceScatterInPlace, but the input stays untouched: each step reduces
// into one of two scratch chunks (the one sent last step is still being read by the
// right neighbour), and the last step reduces straight into the output.
absl::Status ReduceScatter(Wire& wire, const void* input, void* output, int64_t count) {
  int p = wire.size(), r = wire.rank();
  Chunk own = ChunkOf(count, p, r);
  // Two scratch chunks (chunk 0 is the largest).
  int64_t largest = ChunkOf(count, p, 0).count;
  ASSIGN_OR_RETURN(void* scratch, wire.Scratch(p > 1 ? 2 * largest : 0));
  const void* send = At(input, ChunkOf(count, p, wire.RingRank(r, -1)).offset, wire);
  for (int s = 0; s < p - 1; ++s) {
    Chunk send_chunk = ChunkOf(count, p, wire.RingRank(r, -s - 1));
    Chunk recv_chunk = ChunkOf(count, p, wire.RingRank(r, -s - 2));
    void* into = (s == p - 2) ? output : At(scratch, (s % 2) * largest, wire);
    RETURN_IF_ERROR(CopyElements(into, At(input, recv_chunk.offset, wire), recv_chunk.count, wire));
    RETURN_IF_ERROR(Step(wire, send, Bytes(send_chunk.count, wire), into,
                         Bytes(recv_chunk.count, wire), /*reduce=*/true));
    send = into;
  }
  if (p == 1) RETURN_IF_ERROR(CopyElements(output, input, count, wire));
  return FinishChunkAverage(wire, output, Chunk{0, own.count});
}

absl::Status AllGather(Wire& wire, const void* input, void* output, int64_t count) {
  Chunk own = ChunkOf(count, wire.size(), wire.rank());
  RETURN_IF_ERROR(CopyElements(At(output, own.offset, wire), input, own.count, wire));
  return AllGatherInPlace(wire, output, count);
}

// Broadcast as a pipelined chain: root -> root+1 -> ... -> root+p-1. The buffer moves in
// segments of at most max_chunk_bytes, and each rank forwards a segment as soon as it has
// it, so all links of the chain are busy at once and the time approaches M/bandwidth
// rather than (p-1)·M/bandwidth.
absl::Status Broadcast(Wire& wire, void* data, int64_t count, int root) {
  int p = wire.size(), d = Distance(wire, root);
  if (p == 1) return absl::OkStatus();
  Wire::SegmentList segments = wire.Segments(Bytes(count, wire));
  Requests from_left, to_right;
  if (d > 0) {
    for (Wire::Segment seg : segments) {
      wire.Recv(wire.left(), At(data, 0, wire) + seg.offset, seg.bytes, from_left);
    }
  }
  for (size_t i = 0; i < segments.size(); ++i) {
    if (d > 0) RETURN_IF_ERROR(from_left.Wait(i));
    if (d < p - 1) wire.Send(wire.right(), At(data, 0, wire) + segments[i].offset,
                             segments[i].bytes, to_right);
  }
  return to_right.WaitAll();
}

// Reduce as a chain toward the root: the rank farthest from the root (distance p-1) sends
// its buffer to its left neighbour, which adds its own and passes the partial sum on,
// segment by segment, until the root adds the last contribution.
absl::Status Reduce(Wire& wire, const void* input, void* output, int64_t count, int root) {
  int p = wire.size(), d = Distance(wire, root);
  void* partial = output;
  if (d > 0) {
    ASSIGN_OR_RETURN(partial, wire.Scratch(count));
  }
  RETURN_IF_ERROR(CopyElements(partial, input, count, wire));
  Wire::SegmentList segments = wire.Segments(Bytes(count, wire));
  Requests from_right, to_left;
  if (d < p - 1) {
    for (Wire::Segment seg : segments) {
      wire.RecvReduce(wire.right(), At(partial, 0, wire) + seg.offset, seg.bytes, from_right);
    }
  }
  if (d > 0) {
    for (size_t i = 0; i < segments.size(); ++i) {
      if (d < p - 1) RETURN_IF_ERROR(from_right.Wait(i));
      wire.Send(wire.left(), At(partial, 0, wire) + segments[i].offset, segments[i].bytes,
                to_left);
    }
  }
  RETURN_IF_ERROR(from_right.WaitAll());
  RETURN_IF_ERROR(to_left.WaitAll());
  return d == 0 ? FinishChunkAverage(wire, output, Chunk{0, count}) : absl::OkStatus();
}

// Scatter down the chain: the root sends the chunks of ranks at distance p-1, p-2, ..., 1
// (farthest first) to its right neighbour; every rank keeps the last chunk that reaches it
// (its own) and relays the others, each as soon as it arrives.
absl::Status Scatter(Wire& wire, const void* input, void* output, int64_t count, int root) {
  int p = wire.size(), d = Distance(wire, root);
  auto chunk_at = [&](int distance) { return ChunkOf(count, p, wire.RingRank(root, distance)); };
  if (d == 0) {
    Chunk own = chunk_at(0);
    RETURN_IF_ERROR(CopyElements(output, At(input, own.offset, wire), own.count, wire));
    Requests to_right;
    for (int j = p - 1; j >= 1; --j) {
      wire.Send(wire.right(), At(input, chunk_at(j).offset, wire), Bytes(chunk_at(j).count, wire),
                to_right);
    }
    return to_right.WaitAll();
  }
  // The chunks of the ranks behind this one come first, farthest first; its own is last.
  std::vector<int64_t> behind;
  for (int j = p - 1; j > d; --j) behind.push_back(chunk_at(j).count);
  Requests to_right;
  RETURN_IF_ERROR(Relay(wire, behind, wire.left(), wire.right(), to_right));
  Requests own;
  wire.Recv(wire.left(), output, Bytes(chunk_at(d).count, wire), own);
  RETURN_IF_ERROR(own.WaitAll());
  return to_right.WaitAll();
}

// Gather up the chain, the mirror of Scatter: each rank sends its own chunk to its left
// neighbour, then relays the chunks of the ranks behind it (distance d+1, d+2, ...) in the
// order they arrive; the root receives them straight into place.
absl::Status Gather(Wire& wire, const void* input, void* output, int64_t count, int root) {
  int p = wire.size(), d = Distance(wire, root);
  auto chunk_at = [&](int distance) { return ChunkOf(count, p, wire.RingRank(root, distance)); };
  if (d == 0) {
    Chunk own = chunk_at(0);
    RETURN_IF_ERROR(CopyElements(At(output, own.offset, wire), input, own.count, wire));
    Requests from_right;
    for (int j = 1; j < p; ++j) {
      wire.Recv(wire.right(), At(output, chunk_at(j).offset, wire),
                Bytes(chunk_at(j).count, wire), from_right);
    }
    return from_right.WaitAll();
  }
  Requests to_left;
  wire.Send(wire.left(), input, Bytes(chunk_at(d).count, wire), to_left);
  std::vector<int64_t> behind;
  for (int j = d + 1; j < p; ++j) behind.push_back(chunk_at(j).count);
  RETURN_IF_ERROR(Relay(wire, behind, wire.right(), wire.left(), to_left));
  return to_left.WaitAll();
}

// All-to-all as p-1 ring-ordered pairwise exchanges: at step s rank r sends its chunk for
// rank r+s and receives rank r-s's chunk for it. Each step pairs every rank with exactly
// one sender and one receiver, so no link carries two messages at once.
absl::Status AllToAll(Wire& wire, const void* input, void* output, int64_t count) {
  int p = wire.size(), r = wire.rank();
  Chunk own = ChunkOf(count, p, r);
  RETURN_IF_ERROR(CopyElements(At(output, r * own.count, wire), At(input, own.offset, wire), own.count, wire));
  for (int s = 1; s < p; ++s) {
    int to = wire.RingRank(r, s), from = wire.RingRank(r, -s);
    Chunk to_chunk = ChunkOf(count, p, to);
    Requests step;
    wire.Send(to, At(input, to_chunk.offset, wire), Bytes(to_chunk.count, wire), step,
              SendMode::kExchange);
    wire.Recv(from, At(output, from * own.count, wire), Bytes(own.count, wire), step);
    RETURN_IF_ERROR(step.WaitAll());
  }
  return absl::OkStatus();
}

// The same pairing as AllToAll, each pair's block its own size; an empty block is no
// message (both ends know its count).
absl::Status AllToAllV(Wire& wire, const void* input, std::span<const int64_t> send_counts,
                       void* output, std::span<const int64_t> recv_counts) {
  const int p = wire.size(), r = wire.rank();
  BlockOffsets at;
  RETURN_IF_ERROR(OwnBlockAndOffsets(wire, input, send_counts, output, recv_counts, at));
  for (int s = 1; s < p; ++s) {
    const int to = wire.RingRank(r, s), from = wire.RingRank(r, -s);
    Requests step;
    if (send_counts[to] > 0) {
      wire.Send(to, At(input, at.send[to], wire), Bytes(send_counts[to], wire), step,
                SendMode::kExchange);
    }
    if (recv_counts[from] > 0) {
      wire.Recv(from, At(output, at.recv[from], wire), Bytes(recv_counts[from], wire), step);
    }
    RETURN_IF_ERROR(step.WaitAll());
  }
  return absl::OkStatus();
}

// A zero-byte token goes around the ring twice. When rank 0 gets it back the first time,
// every rank has arrived; the second lap tells them so.
absl::Status Barrier(Wire& wire) {
  if (wire.size() == 1) return absl::OkStatus();
  for (int lap = 0; lap < 2; ++lap) {
    Requests token;
    if (wire.rank() == 0) {
      wire.Send(wire.right(), nullptr, 0, token);
      wire.Recv(wire.left(), nullptr, 0, token);
      RETURN_IF_ERROR(token.WaitAll());
    } else {
      wire.Recv(wire.left(), nullptr, 0, token);
      RETURN_IF_ERROR(token.Wait(0));
      wire.Send(wire.right(), nullptr, 0, token);
      RETURN_IF_ERROR(token.WaitAll());
    }
  }
  return absl::OkStatus();
}

}  // namespace tally::comm::ring
