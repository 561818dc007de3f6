#include "core/runtime/comm/check/collective_check.h"

#include <algorithm>
#include <functional>
#include <vector>

#include "core/runtime/comm/algorithms/partition.h"
#include "core/runtime/status_macros.h"

namespace tally::comm {
namespace {

// Rank r's contribution to element i of the reducing primitives.
float Contribution(int r, int64_t i) { return float(10 * (r + 1) + i % 5); }
// Element i of the vector the gathering primitives assemble and the rooted ones spread.
float Global(int64_t i) { return float(i % 1000003 + 1); }
// Element i of rank r's all-to-all input: names its source and position.
float Tagged(int r, int64_t i) { return float(10000 * r + i % 10000); }
float Unset() { return -1.0f; }

void Fill(const Tensor& t, const std::function<float(int64_t)>& value) {
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = value(i);
}

int64_t Mismatches(const Tensor& t, const std::function<float(int64_t)>& want) {
  const float* p = t.data<float>();
  int64_t wrong = 0;
  for (int64_t i = 0; i < t.numel(); ++i) wrong += p[i] != want(i);
  return wrong;
}

// An all-to-all-v's counts (partition.h's SkewedCount): what rank `rank` sends every
// rank, and receives from every rank.
std::vector<int64_t> SendCounts(int64_t n, int p, int rank) {
  std::vector<int64_t> counts(static_cast<size_t>(p), 0);
  for (int j = 0; j < p; ++j) counts[size_t(j)] = SkewedCount(n, p, rank, j);
  return counts;
}
std::vector<int64_t> RecvCounts(int64_t n, int p, int rank) {
  std::vector<int64_t> counts(static_cast<size_t>(p), 0);
  for (int j = 0; j < p; ++j) counts[size_t(j)] = SkewedCount(n, p, j, rank);
  return counts;
}
int64_t Sum(const std::vector<int64_t>& counts) {
  int64_t sum = 0;
  for (int64_t c : counts) sum += c;
  return sum;
}

// Which of a call's buffers each rank needs, by size (0: unused).
struct Sizes {
  int64_t input = 0, output = 0;
};

Sizes BufferSizes(const Communicator& comm, Primitive primitive, int64_t n, int root) {
  int p = comm.size();
  bool is_root = comm.rank() == root;
  int64_t own = ChunkOf(n, p, comm.rank()).count;
  switch (primitive) {
    case Primitive::kBroadcast:
    case Primitive::kAllReduce: return {0, n};
    case Primitive::kReduce: return {n, is_root ? n : 0};
    case Primitive::kReduceScatter: return {n, own};
    case Primitive::kAllGather: return {own, n};
    case Primitive::kScatter: return {is_root ? n : 0, own};
    case Primitive::kGather: return {own, is_root ? n : 0};
    case Primitive::kAllToAll: return {n, p * own};
    case Primitive::kSendRecv: return {n, n};
    case Primitive::kBarrier: return {0, 0};
    case Primitive::kAllToAllV:
      return {Sum(SendCounts(n, p, comm.rank())), Sum(RecvCounts(n, p, comm.rank()))};
  }
  return {};
}

}  // namespace

absl::StatusOr<CallBuffers> MakeCallBuffers(Communicator& comm, Primitive primitive,
                                            int64_t count, int root) {
  Sizes sizes = BufferSizes(comm, primitive, count, root);
  CallBuffers b;
  ASSIGN_OR_RETURN(b.input, Tensor::Empty({sizes.input}, DType::kF32, comm.allocator()));
  ASSIGN_OR_RETURN(b.output, Tensor::Empty({sizes.output}, DType::kF32, comm.allocator()));
  return b;
}

absl::StatusOr<CallBuffers> CopyCallBuffers(const CallBuffers& from, Allocator& memory) {
  CallBuffers b;
  ASSIGN_OR_RETURN(b.input, Tensor::Empty(from.input.shape(), from.input.dtype(), memory));
  ASSIGN_OR_RETURN(b.output, Tensor::Empty(from.output.shape(), from.output.dtype(), memory));
  RETURN_IF_ERROR(CopyContents(from, b));
  return b;
}

absl::Status CopyContents(const CallBuffers& from, const CallBuffers& to) {
  RETURN_IF_ERROR(to.input.CopyFrom(from.input));
  return to.output.CopyFrom(from.output);
}

void FillInputs(Communicator& comm, Primitive primitive, CallBuffers& b, int64_t count,
                int root) {
  int r = comm.rank();
  Chunk own = ChunkOf(count, comm.size(), r);
  Fill(b.output, [](int64_t) { return Unset(); });
  switch (primitive) {
    case Primitive::kBroadcast:
      if (r == root) Fill(b.output, Global);
      break;
    case Primitive::kAllReduce: Fill(b.output, [&](int64_t i) { return Contribution(r, i); }); break;
    case Primitive::kReduce:
    case Primitive::kReduceScatter: Fill(b.input, [&](int64_t i) { return Contribution(r, i); }); break;
    case Primitive::kAllGather:
    case Primitive::kGather: Fill(b.input, [&](int64_t i) { return Global(own.offset + i); }); break;
    case Primitive::kScatter: Fill(b.input, Global); break;
    case Primitive::kAllToAll:
    case Primitive::kAllToAllV:
    case Primitive::kSendRecv: Fill(b.input, [&](int64_t i) { return Tagged(r, i); }); break;
    case Primitive::kBarrier: break;
  }
}

absl::Status Call(Communicator& comm, Primitive primitive, Algorithm algorithm, CallBuffers& b,
                  int64_t count, int root) {
  switch (primitive) {
    case Primitive::kBroadcast: return comm.Broadcast(b.output, root, algorithm);
    case Primitive::kReduce: return comm.Reduce(b.input, b.output, ReduceOp::kSum, root, algorithm);
    case Primitive::kAllReduce: return comm.AllReduce(b.output, ReduceOp::kSum, algorithm);
    case Primitive::kReduceScatter:
      return comm.ReduceScatter(b.input, b.output, ReduceOp::kSum, algorithm);
    case Primitive::kAllGather: return comm.AllGather(b.input, b.output, algorithm);
    case Primitive::kScatter: return comm.Scatter(b.input, b.output, count, root, algorithm);
    case Primitive::kGather: return comm.Gather(b.input, b.output, count, root, algorithm);
    case Primitive::kAllToAll: return comm.AllToAll(b.input, b.output, algorithm);
    case Primitive::kBarrier: return comm.Barrier(algorithm);
    case Primitive::kAllToAllV: {
      const int p = comm.size(), r = comm.rank();
      return comm.AllToAllV(b.input, SendCounts(count, p, r), b.output, RecvCounts(count, p, r),
                            algorithm);
    }
    case Primitive::kSendRecv: {
      if (comm.size() == 1) return absl::OkStatus();
      int right = (comm.rank() + 1) % comm.size();
      int left = (comm.rank() + comm.size() - 1) % comm.size();
      std::unique_ptr<Work> send = comm.Isend(b.input, right);
      std::unique_ptr<Work> recv = comm.Irecv(b.output, left);
      RETURN_IF_ERROR(recv->Wait());
      return send->Wait();
    }
  }
  return absl::InvalidArgumentError("unknown primitive");
}

int64_t CountWrong(Communicator& comm, Primitive primitive, const CallBuffers& b, int64_t count,
                   int root) {
  int p = comm.size(), r = comm.rank();
  Chunk own = ChunkOf(count, p, r);
  auto sum = [&](int64_t i) {
    float s = 0;
    for (int q = 0; q < p; ++q) s += Contribution(q, i);
    return s;
  };
  auto contribution = [&](int64_t i) { return Contribution(r, i); };
  switch (primitive) {
    case Primitive::kBroadcast: return Mismatches(b.output, Global);
    case Primitive::kAllReduce: return Mismatches(b.output, sum);
    case Primitive::kReduce:
      return Mismatches(b.input, contribution) + (r == root ? Mismatches(b.output, sum) : 0);
    case Primitive::kReduceScatter:
      return Mismatches(b.input, contribution) +
             Mismatches(b.output, [&](int64_t i) { return sum(own.offset + i); });
    case Primitive::kAllGather: return Mismatches(b.output, Global);
    case Primitive::kScatter:
      return Mismatches(b.output, [&](int64_t i) { return Global(own.offset + i); });
    case Primitive::kGather: return r == root ? Mismatches(b.output, Global) : 0;
    case Primitive::kAllToAll:
      // Output slot j holds rank j's chunk r.
      return Mismatches(b.output, [&](int64_t i) {
        int64_t per_slot = std::max<int64_t>(own.count, 1);
        return Tagged(int(i / per_slot), own.offset + i % per_slot);
      });
    case Primitive::kSendRecv:
      if (p == 1) return 0;
      return Mismatches(b.output, [&](int64_t i) { return Tagged((r + p - 1) % p, i); });
    case Primitive::kBarrier: return 0;
    case Primitive::kAllToAllV: {
      // Block j of the output holds rank j's block for this rank, from where it sat in
      // rank j's input.
      const std::vector<int64_t> recv = RecvCounts(count, p, r);
      const std::vector<int64_t> at = Offsets(recv);
      std::vector<float> want(size_t(Sum(recv)));
      for (int j = 0; j < p; ++j) {
        const int64_t from = Offsets(SendCounts(count, p, j))[size_t(r)];
        for (int64_t i = 0; i < recv[size_t(j)]; ++i) want[size_t(at[size_t(j)] + i)] = Tagged(j, from + i);
      }
      return Mismatches(b.output, [&](int64_t i) { return want[size_t(i)]; }) +
             Mismatches(b.input, [&](int64_t i) { return Tagged(r, i); });
    }
  }
  return 0;
}

}  // namespace tally::comm
