// NCCL's own collectives (group.h's NativeCollective, for --native_collectives): each
// primitive as one NCCL call where NCCL has it for the call's layout, else as a group of
// NCCL calls; host buffers through device copies; an average as a sum, then divided.
#include <cstdint>

#include "core/runtime/comm/transport/device_memory.h"
#include "core/runtime/comm/transport/nccl/group.h"
#include "core/runtime/comm/algorithms/partition.h"
#include "core/runtime/comm/algorithms/reduce.h"
#include "core/runtime/cuda/cuda.h"
#include "core/runtime/status_macros.h"

namespace tally::comm::nccl {
namespace {

absl::StatusOr<ncclDataType_t> TypeOf(DType dtype) {
  switch (dtype) {
    case DType::kF32: return ncclFloat32;
    case DType::kF64: return ncclFloat64;
    case DType::kI32: return ncclInt32;
    case DType::kI64: return ncclInt64;
    case DType::kI8: return ncclInt8;
    case DType::kBF16: return ncclBfloat16;
  }
  return absl::InvalidArgumentError("[nccl] unknown dtype");
}

ncclRedOp_t OpOf(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: return ncclSum;  // then divided, as the ring does
    case ReduceOp::kMax: return ncclMax;
    case ReduceOp::kMin: return ncclMin;
    case ReduceOp::kProd: return ncclProd;
  }
  return ncclSum;
}

// The elements of a native collective's input and output on this rank (0: unused), for
// staging host buffers.
struct Extents {
  int64_t input = 0, output = 0;
};

Extents ExtentsOf(const OpSignature& s, int n, int r) {
  const int64_t count = s.count, mine = ChunkOf(count, n, r).count;
  const bool root = r == s.root;
  switch (s.primitive) {
    case Primitive::kAllReduce:
    case Primitive::kBroadcast: return {count, count};
    case Primitive::kReduceScatter: return {count, mine};
    case Primitive::kAllGather: return {mine, count};
    case Primitive::kReduce: return {count, root ? count : 0};
    case Primitive::kGather: return {mine, root ? count : 0};
    case Primitive::kScatter: return {root ? count : 0, mine};
    case Primitive::kAllToAll: return {count, int64_t(n) * mine};
    case Primitive::kBarrier:
    case Primitive::kSendRecv:
    case Primitive::kAllToAllV: break;  // the Communicator runs its own all-to-all-v
  }
  return {};
}

}  // namespace

// Long, and kept whole: one case per primitive, each NCCL's own call, so that every
// primitive's mapping reads next to the others.
absl::Status NativeCollective(Group& g, const OpSignature& s, const void* input,
                              void* output) {
  ASSIGN_OR_RETURN(ncclDataType_t type, TypeOf(s.dtype));
  const ncclRedOp_t op = OpOf(s.op);
  const int n = g.size(), r = g.rank();
  const size_t element = SizeOf(s.dtype);
  CUDA_RETURN_IF_ERROR(cudaSetDevice(g.gpu));

  // Host buffers go through device copies of the whole input and output.
  const Extents extents = ExtentsOf(s, n, r);
  const bool host = s.device < 0;
  StagingPool::Buffer in_copy, out_copy;
  const char* in = static_cast<const char*>(input);
  char* out = static_cast<char*>(output);
  if (host && extents.input > 0) {
    ASSIGN_OR_RETURN(in_copy, g.staging.Take(size_t(extents.input) * element));
    RETURN_IF_ERROR(cuda::CopyToDevice(in_copy.data, input, size_t(extents.input) * element));
    in = static_cast<const char*>(in_copy.data);
  }
  if (host && extents.output > 0) {
    if (input == output && extents.input == extents.output) {
      out = static_cast<char*>(in_copy.data);
    } else {
      ASSIGN_OR_RETURN(out_copy, g.staging.Take(size_t(extents.output) * element));
      out = static_cast<char*>(out_copy.data);
    }
  }
  StagingPool::Buffer barrier;
  if (s.primitive == Primitive::kBarrier) {
    ASSIGN_OR_RETURN(barrier, g.staging.Take(element));
  }

  RETURN_IF_ERROR(g.AfterDefaultStream());
  const ncclComm_t comm = g.up.comm;
  const cudaStream_t stream = g.up.stream;
  const int64_t count = s.count;
  auto at = [&](auto* base, int64_t index) { return base + size_t(index) * element; };
  const char* call = "";
  ncclResult_t code = ncclGroupStart();
  // The first failing call of the group, if any.
  auto add = [&](const char* name, ncclResult_t result) {
    if (code == ncclSuccess || code == ncclInProgress) {
      call = name;
      code = result;
    }
  };
  // A send or receive of `elements` elements (nothing when there are none).
  auto send = [&](const char* from, int64_t elements, int peer) {
    if (elements > 0) add("ncclSend", ncclSend(from, elements, type, peer, comm, stream));
  };
  auto recv = [&](char* into, int64_t elements, int peer) {
    if (elements > 0) add("ncclRecv", ncclRecv(into, elements, type, peer, comm, stream));
  };
  const bool even = count % n == 0;
  switch (s.primitive) {
    case Primitive::kAllReduce:
      if (count > 0) add("ncclAllReduce", ncclAllReduce(in, out, count, type, op, comm, stream));
      break;
    case Primitive::kReduceScatter:
      if (even) {
        add("ncclReduceScatter", ncclReduceScatter(in, out, count / n, type, op, comm, stream));
        break;
      }
      for (int q = 0; q < n; ++q) {  // uneven chunks: one reduce to each chunk's owner
        const Chunk c = ChunkOf(count, n, q);
        if (c.count == 0) continue;
        add("ncclReduce", ncclReduce(at(in, c.offset), out, c.count, type, op, q, comm, stream));
      }
      break;
    case Primitive::kAllGather:
      if (even) {
        add("ncclAllGather", ncclAllGather(in, out, count / n, type, comm, stream));
        break;
      }
      for (int q = 0; q < n; ++q) {  // uneven chunks: one broadcast from each owner
        const Chunk c = ChunkOf(count, n, q);
        if (c.count == 0) continue;
        add("ncclBroadcast", ncclBroadcast(in, at(out, c.offset), c.count, type, q, comm, stream));
      }
      break;
    case Primitive::kBroadcast:
      if (count == 0) break;
      add("ncclBroadcast", ncclBroadcast(out, out, count, type, s.root, comm, stream));
      break;
    case Primitive::kReduce:
      if (count == 0) break;
      add("ncclReduce", ncclReduce(in, out, count, type, op, s.root, comm, stream));
      break;
    case Primitive::kGather:  // the root receives every chunk, its own too
      for (int q = 0; q < n && r == s.root; ++q) {
        const Chunk c = ChunkOf(count, n, q);
        recv(at(out, c.offset), c.count, q);
      }
      send(in, extents.input, s.root);
      break;
    case Primitive::kScatter:
      for (int q = 0; q < n && r == s.root; ++q) {
        const Chunk c = ChunkOf(count, n, q);
        send(at(in, c.offset), c.count, q);
      }
      recv(out, extents.output, s.root);
      break;
    case Primitive::kAllToAll: {
      const int64_t mine = ChunkOf(count, n, r).count;
      for (int q = 0; q < n; ++q) {
        const Chunk c = ChunkOf(count, n, q);
        send(at(in, c.offset), c.count, q);
        recv(at(out, q * mine), mine, q);
      }
      break;
    }
    case Primitive::kBarrier:
      add("ncclAllReduce", ncclAllReduce(barrier.data, barrier.data, 1, type, ncclSum, comm,
                                         stream));
      break;
    case Primitive::kSendRecv:
    case Primitive::kAllToAllV: break;
  }
  const ncclResult_t ended = ncclGroupEnd();
  absl::Status status = NcclStatus(code, call);
  if (status.ok()) status = NcclStatus(ended, "ncclGroupEnd");
  if (status.ok()) status = g.AwaitComms(g.Where(s) + ": launching NCCL's own collective");
  absl::StatusOr<std::shared_ptr<Event>> done = Event::RecordOn(stream);
  if (status.ok()) status = done.status();
  if (status.ok()) status = g.AwaitEvent(**done, g.Where(s) + " (NCCL's own collective)");
  if (!status.ok()) return g.Fail(std::move(status));

  if (host && extents.output > 0) {
    RETURN_IF_ERROR(cuda::CopyToHost(output, out, size_t(extents.output) * element));
  }
  g.staging.Give(in_copy);
  g.staging.Give(out_copy);
  g.staging.Give(barrier);
  if (s.op == ReduceOp::kAvg) {
    int64_t averaged = 0;  // the elements that hold a sum on this rank
    switch (s.primitive) {
      case Primitive::kAllReduce: averaged = count; break;
      case Primitive::kReduceScatter: averaged = extents.output; break;
      case Primitive::kReduce: averaged = extents.output; break;
      default: break;
    }
    if (averaged > 0 && host) FinishAverage(output, averaged, s.dtype, n);
    if (averaged > 0 && !host) RETURN_IF_ERROR(DeviceFinishAverage(output, averaged, s.dtype, n));
  }
  return absl::OkStatus();
}

}  // namespace tally::comm::nccl
