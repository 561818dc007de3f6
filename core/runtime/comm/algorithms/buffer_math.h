// Byte-address helpers shared by the algorithm files.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "core/runtime/comm/transport/device_memory.h"
#include "core/runtime/comm/algorithms/partition.h"
#include "core/runtime/comm/algorithms/reduce.h"
#include "core/runtime/comm/ledger/wire.h"

namespace tally::comm {

// Element `index` of a buffer of the wire's dtype.
inline char* At(void* base, int64_t index, const Wire& wire) {
  return static_cast<char*>(base) + size_t(index) * wire.element_size();
}
inline const char* At(const void* base, int64_t index, const Wire& wire) {
  return static_cast<const char*>(base) + size_t(index) * wire.element_size();
}
inline size_t Bytes(int64_t count, const Wire& wire) { return size_t(count) * wire.element_size(); }

// The local work of a call, on the call's memory: host loops, or CUDA (device_memory.h)
// when the call's buffers are on a GPU.

// Copies `count` elements unless source and destination are the same buffer.
inline absl::Status CopyElements(void* dst, const void* src, int64_t count, const Wire& wire) {
  if (dst == src || count <= 0 || wire.signature().meta()) return absl::OkStatus();
  if (wire.signature().device >= 0) return DeviceCopy(dst, src, Bytes(count, wire));
  std::memcpy(dst, src, Bytes(count, wire));
  return absl::OkStatus();
}

// An all-to-all-v's blocks (packed in rank order): where each starts in the input and in
// the output.
struct BlockOffsets {
  std::vector<int64_t> send, recv;
};
// The offsets, and this rank's block to itself copied into place.
inline absl::Status OwnBlockAndOffsets(const Wire& wire, const void* input,
                                       std::span<const int64_t> send_counts, void* output,
                                       std::span<const int64_t> recv_counts, BlockOffsets& at) {
  at = {Offsets(send_counts), Offsets(recv_counts)};
  const int r = wire.rank();
  return CopyElements(At(output, at.recv[size_t(r)], wire), At(input, at.send[size_t(r)], wire),
                      send_counts[size_t(r)], wire);
}

// data[0, count) divided by the group's size when the call averages (its sum is done).
inline absl::Status FinishAverageOf(const Wire& wire, void* data, int64_t count) {
  const OpSignature& s = wire.signature();
  if (s.op != ReduceOp::kAvg || count <= 0 || s.meta()) return absl::OkStatus();
  if (s.device >= 0) return DeviceFinishAverage(data, count, s.dtype, wire.size());
  FinishAverage(data, count, s.dtype, wire.size());
  return absl::OkStatus();
}

}  // namespace tally::comm
