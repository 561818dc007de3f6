#include "core/runtime/comm/algorithms/naive.h"

#include <vector>

#include "core/runtime/comm/algorithms/buffer_math.h"
#include "core/runtime/comm/algorithms/reduce.h"
#include "core/runtime/status_macros.h"

namespace tally::comm::naive {
namespace {

// The star's centre for the all-* primitives.
constexpr int kHub = 0;

}  // namespace

absl::Status Broadcast(Wire& wire, void* data, int64_t count, int root) {
  Requests pending;
  if (wire.rank() == root) {
    for (int peer = 0; peer < wire.size(); ++peer) {
      if (peer != root) wire.Send(peer, data, Bytes(count, wire), pending);
    }
  } else {
    wire.Recv(root, data, Bytes(count, wire), pending);
  }
  return pending.WaitAll();
}

// The root folds in one contribution at a time, in rank order, so the result does not
// depend on which message happens to arrive first.
absl::Status Reduce(Wire& wire, const void* input, void* output, int64_t count, int root) {
  if (wire.rank() != root) {
    Requests pending;
    wire.Send(root, input, Bytes(count, wire), pending);
    return pending.WaitAll();
  }
  RETURN_IF_ERROR(CopyElements(output, input, count, wire));
  for (int peer = 0; peer < wire.size(); ++peer) {
    if (peer == root) continue;
    Requests pending;
    wire.RecvReduce(peer, output, Bytes(count, wire), pending);
    RETURN_IF_ERROR(pending.WaitAll());
  }
  RETURN_IF_ERROR(FinishAverageOf(wire, output, count));
  return absl::OkStatus();
}

absl::Status AllReduce(Wire& wire, void* data, int64_t count) {
  RETURN_IF_ERROR(Reduce(wire, data, data, count, kHub));
  return Broadcast(wire, data, count, kHub);
}

absl::Status Scatter(Wire& wire, const void* input, void* output, int64_t count, int root) {
  int p = wire.size();
  Requests pending;
  if (wire.rank() == root) {
    for (int peer = 0; peer < p; ++peer) {
      Chunk chunk = ChunkOf(count, p, peer);
      if (peer == root) {
        RETURN_IF_ERROR(CopyElements(output, At(input, chunk.offset, wire), chunk.count, wire));
      } else {
        wire.Send(peer, At(input, chunk.offset, wire), Bytes(chunk.count, wire), pending);
      }
    }
  } else {
    wire.Recv(root, output, Bytes(ChunkOf(count, p, wire.rank()).count, wire), pending);
  }
  return pending.WaitAll();
}

absl::Status Gather(Wire& wire, const void* input, void* output, int64_t count, int root) {
  int p = wire.size();
  Requests pending;
  if (wire.rank() == root) {
    for (int peer = 0; peer < p; ++peer) {
      Chunk chunk = ChunkOf(count, p, peer);
      if (peer == root) {
        RETURN_IF_ERROR(CopyElements(At(output, chunk.offset, wire), input, chunk.count, wire));
      } else {
        wire.Recv(peer, At(output, chunk.offset, wire), Bytes(chunk.count, wire), pending);
      }
    }
  } else {
    wire.Send(root, input, Bytes(ChunkOf(count, p, wire.rank()).count, wire), pending);
  }
  return pending.WaitAll();
}

absl::Status AllGather(Wire& wire, const void* input, void* output, int64_t count) {
  RETURN_IF_ERROR(Gather(wire, input, output, count, kHub));
  return Broadcast(wire, output, count, kHub);
}

absl::Status ReduceScatter(Wire& wire, const void* input, void* output, int64_t count) {
  void* reduced = nullptr;  // the full reduction, on the hub only
  if (wire.rank() == kHub) {
    ASSIGN_OR_RETURN(reduced, wire.Scratch(count));
  }
  RETURN_IF_ERROR(Reduce(wire, input, reduced, count, kHub));
  return Scatter(wire, reduced, output, count, kHub);
}

absl::Status AllToAll(Wire& wire, const void* input, void* output, int64_t count) {
  int p = wire.size(), r = wire.rank();
  Chunk own = ChunkOf(count, p, r);
  Requests pending;
  for (int peer = 0; peer < p; ++peer) {
    Chunk chunk = ChunkOf(count, p, peer);
    if (peer == r) {
      RETURN_IF_ERROR(CopyElements(At(output, r * own.count, wire), At(input, own.offset, wire), own.count, wire));
      continue;
    }
    wire.Send(peer, At(input, chunk.offset, wire), Bytes(chunk.count, wire), pending,
              SendMode::kExchange);
    wire.Recv(peer, At(output, peer * own.count, wire), Bytes(own.count, wire), pending);
  }
  return pending.WaitAll();
}

absl::Status AllToAllV(Wire& wire, const void* input, std::span<const int64_t> send_counts,
                       void* output, std::span<const int64_t> recv_counts) {
  const int p = wire.size(), r = wire.rank();
  BlockOffsets at;
  RETURN_IF_ERROR(OwnBlockAndOffsets(wire, input, send_counts, output, recv_counts, at));
  Requests pending;
  for (int peer = 0; peer < p; ++peer) {
    if (peer == r) continue;
    if (send_counts[peer] > 0) {
      wire.Send(peer, At(input, at.send[peer], wire), Bytes(send_counts[peer], wire), pending,
                SendMode::kExchange);
    }
    if (recv_counts[peer] > 0) {
      wire.Recv(peer, At(output, at.recv[peer], wire), Bytes(recv_counts[peer], wire), pending);
    }
  }
  return pending.WaitAll();
}

absl::Status Barrier(Wire& wire) {
  Requests arrive;
  if (wire.rank() == kHub) {
    for (int peer = 1; peer < wire.size(); ++peer) wire.Recv(peer, nullptr, 0, arrive);
  } else {
    wire.Send(kHub, nullptr, 0, arrive);
  }
  RETURN_IF_ERROR(arrive.WaitAll());
  Requests release;
  if (wire.rank() == kHub) {
    for (int peer = 1; peer < wire.size(); ++peer) wire.Send(peer, nullptr, 0, release);
  } else {
    wire.Recv(kHub, nullptr, 0, release);
  }
  return release.WaitAll();
}

}  // namespace tally::comm::naive
