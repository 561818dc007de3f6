#include "core/runtime/comm/communicator.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/runtime/clock.h"
#include "core/runtime/comm/ledger/exact_traffic.h"
#include "core/runtime/comm/algorithms/hierarchical.h"
#include "core/runtime/comm/algorithms/naive.h"
#include "core/runtime/comm/algorithms/recursive_doubling.h"
#include "core/runtime/comm/algorithms/partition.h"
#include "core/runtime/comm/algorithms/ring.h"
#include "core/runtime/status_macros.h"

namespace tally::comm {

Communicator::Communicator(std::unique_ptr<Transport> transport, RankResources* resources,
                           CommOptions options)
    : transport_(std::move(transport)), resources_(resources), options_(options) {
  group_nodes_ = GroupNodes();
  timeline_group_ = name() + ":";
  for (int r = 0; r < size(); ++r) {
    absl::StrAppend(&timeline_group_, r > 0 ? "," : "", transport_->world_rank(r));
  }
  absl::StrAppend(&timeline_group_, "#", resources_->groups[timeline_group_]++);
}

absl::Status Communicator::CheckCount(Primitive primitive, const char* what, const Tensor& t,
                                      int64_t expected) const {
  if (t.numel() == expected) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("[", Title(primitive), " on '", name(),
                                                 "'] rank ", rank(), ": ", what, " has ",
                                                 t.numel(), " elements, expected ", expected));
}

absl::StatusOr<Wire> Communicator::Begin(
    Primitive primitive, AlgorithmChoice algorithm, DType dtype, ReduceOp op, int root,
    int64_t count, std::initializer_list<const Tensor*> tensors, bool queued) {
  const int64_t started = MonotonicNanos();  // the call's time includes the drain
  if (!queued) Drain();
  Algorithm chosen =
      options_.native_collectives
          ? Algorithm::kNative
          : EffectiveAlgorithm(primitive, algorithm.value_or(options_.algorithm), group_nodes_,
                               count * int64_t(SizeOf(dtype)), options_.small_allreduce_bytes);
  // An all-to-all-v has no native form here: it runs (and is booked as) the ring.
  if (primitive == Primitive::kAllToAllV && chosen == Algorithm::kNative) chosen = Algorithm::kRing;
  OpSignature signature{primitive, chosen, dtype, op, root, count, collective_calls_++};
  // Where a failure happened, written only when one does (a small call takes a microsecond).
  auto where = [&] { return absl::StrCat("[", Title(primitive), " on '", name(), "'] rank ", rank()); };
  if (primitive != Primitive::kSendRecv && root != -1 && (root < 0 || root >= size())) {
    return absl::InvalidArgumentError(
        absl::StrCat(where(), ": root ", root, " is not a rank of a group of ", size()));
  }
  // Only an all-to-all-v has no count every rank sees (-1, not compared).
  if (count < 0 && primitive != Primitive::kAllToAllV) {
    return absl::InvalidArgumentError(absl::StrCat(where(), ": negative count"));
  }
  const Tensor* first = nullptr;  // of the buffers this rank passes (a non-root's may be empty)
  for (const Tensor* t : tensors) {
    if (t->defined()) {
      if (first == nullptr) first = t;
      ASSIGN_OR_RETURN(signature.device, BufferDevice(where, *t, *first));
    }
    if (t->dtype() != dtype) {
      return absl::InvalidArgumentError(absl::StrCat(where(), ": tensors of dtype ", Name(dtype),
                                                     " and ", Name(t->dtype()), " mixed"));
    }
  }
  RETURN_IF_ERROR(transport_->Announce(signature));
  return Wire(*transport_, ledger(), allocator(), &scratch_, signature, options_.max_chunk_bytes,
              started);
}

absl::StatusOr<int> Communicator::BufferDevice(absl::FunctionRef<std::string()> where,
                                               const Tensor& t, const Tensor& first) const {
  if (t.device() != first.device()) {
    return absl::InvalidArgumentError(absl::StrCat(where(), ": tensors on ", first.device().ToString(),
                                                   " and ", t.device().ToString(), " mixed"));
  }
  if (t.device().type == DeviceType::kCPU) return -1;
  if (t.device().type == DeviceType::kMeta) {
    if (transport_->CarriesMeta()) return OpSignature::kMetaBuffers;
    return absl::UnimplementedError(absl::StrCat(where(), ": meta tensors (a dry run) need the "
                                                 "threads transport"));
  }
  if (!transport_->MovesDeviceMemory()) {
    return absl::UnimplementedError(absl::StrCat(where(), ": tensors on ", t.device().ToString(),
                                                 " need a transport that moves GPU memory (the "
                                                 "threads transport does)"));
  }
  if (gpu() >= 0 && t.device().index != gpu()) {
    return absl::InvalidArgumentError(absl::StrCat(where(), ": tensors on ", t.device().ToString(),
                                                   ", but this rank's transport is on GPU ",
                                                   gpu()));
  }
  return t.device().index;
}

absl::Status Communicator::Run(Wire& wire, const void* input, void* output,
                               absl::FunctionRef<absl::Status()> ring_call,
                               absl::FunctionRef<absl::Status()> naive_call) {
  return Run(wire, input, output, ring_call, naive_call, ring_call);
}

absl::Status Communicator::Run(Wire& wire, const void* input, void* output,
                               absl::FunctionRef<absl::Status()> ring_call,
                               absl::FunctionRef<absl::Status()> naive_call,
                               absl::FunctionRef<absl::Status()> hierarchical_call) {
  switch (wire.signature().algorithm) {
    case Algorithm::kRing: return ring_call();
    case Algorithm::kNaive: return naive_call();
    case Algorithm::kHierarchical: return hierarchical_call();
    case Algorithm::kRecursiveDoubling: return ring_call();  // all-reduce runs its own
    case Algorithm::kNative: break;
  }
  RETURN_IF_ERROR(transport_->NativeCollective(wire.signature(), input, output));
  wire.BookModelled();
  return absl::OkStatus();
}

absl::Status Communicator::Finish(Wire& wire, int64_t payload_bytes, absl::Status status) {
  wire.RecordCall(payload_bytes, wire.started_nanos());
  tally::Timeline& timeline = ledger().timeline();
  if (timeline.recording()) {
    timeline.Collective(TimelineGroup(), size(), int64_t(wire.signature().seq),
                        wire.key().RowName(), wire.sent(), wire.started_nanos(),
                        MonotonicNanos());
  }
  return status;
}


absl::Status Communicator::Broadcast(Tensor& data, int root, AlgorithmChoice algorithm) {
  ASSIGN_OR_RETURN(auto wire, Begin(Primitive::kBroadcast, algorithm, data.dtype(), ReduceOp::kSum,
                                    root, data.numel(), {&data}));
  absl::Status s = Run(
      wire, data.raw_data(), data.raw_data(),
      [&] { return ring::Broadcast(wire, data.raw_data(), data.numel(), root); },
      [&] { return naive::Broadcast(wire, data.raw_data(), data.numel(), root); });
  return Finish(wire, int64_t(data.nbytes()), s);
}

absl::Status Communicator::Reduce(const Tensor& input, Tensor& output, ReduceOp op, int root,
                                  AlgorithmChoice algorithm) {
  bool is_root = rank() == root;
  if (is_root) RETURN_IF_ERROR(CheckCount(Primitive::kReduce, "output", output, input.numel()));
  ASSIGN_OR_RETURN(auto wire, Begin(Primitive::kReduce, algorithm, input.dtype(), op, root,
                                    input.numel(), {&input, is_root ? &output : &input}));
  absl::Status s = Run(
      wire, input.raw_data(), output.raw_data(),
      [&] { return ring::Reduce(wire, input.raw_data(), output.raw_data(), input.numel(), root); },
      [&] { return naive::Reduce(wire, input.raw_data(), output.raw_data(), input.numel(), root); });
  return Finish(wire, int64_t(input.nbytes()), s);
}

absl::Status Communicator::AllReduceOn(Wire& w, const Tensor& data) {
  if (w.signature().algorithm == Algorithm::kRecursiveDoubling) {
    return recursive_doubling::AllReduce(w, data.raw_data(), data.numel());
  }
  return Run(
      w, data.raw_data(), data.raw_data(),
      [&] { return ring::AllReduce(w, data.raw_data(), data.numel()); },
      [&] { return naive::AllReduce(w, data.raw_data(), data.numel()); },
      [&] {
        return hierarchical::AllReduce(w, *hierarchical::LayoutOf(group_nodes_), data.raw_data(),
                                       data.numel());
      });
}

Communicator::Call Communicator::AllReduceCall(const Tensor& data) {
  return {int64_t(data.nbytes()), [this, data](Wire& w) { return AllReduceOn(w, data); }};
}

absl::Status Communicator::AllReduce(Tensor& data, ReduceOp op, AlgorithmChoice algorithm) {
  ASSIGN_OR_RETURN(auto wire, Begin(Primitive::kAllReduce, algorithm, data.dtype(), op, -1,
                                    data.numel(), {&data}));
  return Finish(wire, int64_t(data.nbytes()), AllReduceOn(wire, data));
}

absl::StatusOr<double> Communicator::AllReduceValue(double value, DType dtype, ReduceOp op,
                                                    AlgorithmChoice algorithm) {
  if (dtype != DType::kF32 && dtype != DType::kF64) {
    return absl::InvalidArgumentError("[AllReduceValue] the value must be kF32 or kF64");
  }
  ASSIGN_OR_RETURN(Tensor one, Tensor::Empty({1}, dtype, allocator(), MemoryCategory::kComm));
  if (dtype == DType::kF32) {
    one.data<float>()[0] = float(value);
  } else {
    one.data<double>()[0] = value;
  }
  RETURN_IF_ERROR(AllReduce(one, op, algorithm));
  return dtype == DType::kF32 ? double(one.data<float>()[0]) : one.data<double>()[0];
}

absl::Status Communicator::ReduceScatterOn(Wire& w, const Tensor& input, const Tensor& output) {
  const int64_t n = input.numel();
  return Run(
      w, input.raw_data(), output.raw_data(),
      [&] { return ring::ReduceScatter(w, input.raw_data(), output.raw_data(), n); },
      [&] { return naive::ReduceScatter(w, input.raw_data(), output.raw_data(), n); },
      [&] {
        return hierarchical::ReduceScatter(w, *hierarchical::LayoutOf(group_nodes_),
                                           input.raw_data(), output.raw_data(), n);
      });
}

Communicator::Call Communicator::ReduceScatterCall(const Tensor& input, const Tensor& output) {
  return {int64_t(input.nbytes()),
          [this, input, output](Wire& w) { return ReduceScatterOn(w, input, output); }};
}

absl::Status Communicator::ReduceScatter(const Tensor& input, Tensor& output, ReduceOp op,
                                         AlgorithmChoice algorithm) {
  int64_t n = input.numel();
  RETURN_IF_ERROR(CheckCount(Primitive::kReduceScatter, "output", output,
                             ChunkOf(n, size(), rank()).count));
  ASSIGN_OR_RETURN(auto wire, Begin(Primitive::kReduceScatter, algorithm, input.dtype(), op, -1, n,
                                    {&input, &output}));
  return Finish(wire, int64_t(input.nbytes()), ReduceScatterOn(wire, input, output));
}

absl::Status Communicator::AllGatherOn(Wire& w, const Tensor& input, const Tensor& output) {
  const int64_t n = output.numel();
  return Run(
      w, input.raw_data(), output.raw_data(),
      [&] { return ring::AllGather(w, input.raw_data(), output.raw_data(), n); },
      [&] { return naive::AllGather(w, input.raw_data(), output.raw_data(), n); },
      [&] {
        return hierarchical::AllGather(w, *hierarchical::LayoutOf(group_nodes_), input.raw_data(),
                                       output.raw_data(), n);
      });
}

Communicator::Call Communicator::AllGatherCall(const Tensor& input, const Tensor& output) {
  return {int64_t(output.nbytes()),
          [this, input, output](Wire& w) { return AllGatherOn(w, input, output); }};
}

absl::Status Communicator::AllGather(const Tensor& input, Tensor& output,
                                     AlgorithmChoice algorithm) {
  int64_t n = output.numel();
  RETURN_IF_ERROR(
      CheckCount(Primitive::kAllGather, "input", input, ChunkOf(n, size(), rank()).count));
  ASSIGN_OR_RETURN(auto wire, Begin(Primitive::kAllGather, algorithm, output.dtype(),
                                    ReduceOp::kSum, -1, n, {&input, &output}));
  return Finish(wire, int64_t(output.nbytes()), AllGatherOn(wire, input, output));
}

absl::Status Communicator::Scatter(const Tensor& input, Tensor& output, int64_t count, int root,
                                   AlgorithmChoice algorithm) {
  bool is_root = rank() == root;
  if (is_root) RETURN_IF_ERROR(CheckCount(Primitive::kScatter, "input", input, count));
  if (root >= 0 && root < size() && count >= 0) {
    RETURN_IF_ERROR(CheckCount(Primitive::kScatter, "output", output,
                               ChunkOf(count, size(), rank()).count));
  }
  ASSIGN_OR_RETURN(auto wire, Begin(Primitive::kScatter, algorithm, output.dtype(),
                                    ReduceOp::kSum, root, count,
                                    {&output, is_root ? &input : &output}));
  absl::Status s = Run(
      wire, input.raw_data(), output.raw_data(),
      [&] { return ring::Scatter(wire, input.raw_data(), output.raw_data(), count, root); },
      [&] { return naive::Scatter(wire, input.raw_data(), output.raw_data(), count, root); });
  return Finish(wire, count * int64_t(SizeOf(output.dtype())), s);
}

absl::Status Communicator::Gather(const Tensor& input, Tensor& output, int64_t count, int root,
                                  AlgorithmChoice algorithm) {
  bool is_root = rank() == root;
  if (is_root) RETURN_IF_ERROR(CheckCount(Primitive::kGather, "output", output, count));
  if (root >= 0 && root < size() && count >= 0) {
    RETURN_IF_ERROR(
        CheckCount(Primitive::kGather, "input", input, ChunkOf(count, size(), rank()).count));
  }
  ASSIGN_OR_RETURN(auto wire, Begin(Primitive::kGather, algorithm, input.dtype(), ReduceOp::kSum,
                                    root, count, {&input, is_root ? &output : &input}));
  absl::Status s = Run(
      wire, input.raw_data(), output.raw_data(),
      [&] { return ring::Gather(wire, input.raw_data(), output.raw_data(), count, root); },
      [&] { return naive::Gather(wire, input.raw_data(), output.raw_data(), count, root); });
  return Finish(wire, count * int64_t(SizeOf(input.dtype())), s);
}

absl::Status Communicator::AllToAll(const Tensor& input, Tensor& output,
                                    AlgorithmChoice algorithm) {
  int64_t n = input.numel();
  RETURN_IF_ERROR(CheckCount(Primitive::kAllToAll, "output", output,
                             size() * ChunkOf(n, size(), rank()).count));
  ASSIGN_OR_RETURN(auto wire, Begin(Primitive::kAllToAll, algorithm, input.dtype(),
                                    ReduceOp::kSum, -1, n, {&input, &output}));
  absl::Status s = Run(
      wire, input.raw_data(), output.raw_data(),
      [&] { return ring::AllToAll(wire, input.raw_data(), output.raw_data(), n); },
      [&] { return naive::AllToAll(wire, input.raw_data(), output.raw_data(), n); });
  return Finish(wire, int64_t(input.nbytes()), s);
}

absl::StatusOr<std::vector<int64_t>> Communicator::ExchangeCounts(
    std::span<const int64_t> send_counts) {
  const int64_t n = int64_t(send_counts.size());
  if (n == 0 || n % size() != 0) {
    return absl::InvalidArgumentError(absl::StrCat("[AllToAllV on '", name(), "'] rank ", rank(),
                                                   ": ", n, " counts for a group of ", size(),
                                                   " (the same number for every rank)"));
  }
  ASSIGN_OR_RETURN(Tensor mine, Tensor::Empty({n}, DType::kI64, allocator(), MemoryCategory::kComm));
  ASSIGN_OR_RETURN(Tensor theirs, Tensor::Empty({n}, DType::kI64, allocator(), MemoryCategory::kComm));
  std::copy(send_counts.begin(), send_counts.end(), mine.data<int64_t>());
  RETURN_IF_ERROR(AllToAll(mine, theirs));
  return std::vector<int64_t>(theirs.data<int64_t>(), theirs.data<int64_t>() + n);
}

absl::Status Communicator::AllToAllV(const Tensor& input, std::span<const int64_t> send_counts,
                                     Tensor& output, std::span<const int64_t> recv_counts,
                                     AlgorithmChoice algorithm) {
  const std::string where = absl::StrCat("[AllToAllV on '", name(), "'] rank ", rank());
  if (int(send_counts.size()) != size() || int(recv_counts.size()) != size()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": ", send_counts.size(), " send and ",
                                                   recv_counts.size(),
                                                   " receive counts for a group of ", size()));
  }
  int64_t sends = 0, receives = 0;
  for (int j = 0; j < size(); ++j) {
    if (send_counts[j] < 0 || recv_counts[j] < 0) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": a negative count for rank ", j));
    }
    sends += send_counts[j];
    receives += recv_counts[j];
  }
  if (send_counts[rank()] != recv_counts[rank()]) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": sends itself ", send_counts[rank()],
                                                   " elements but receives ", recv_counts[rank()]));
  }
  RETURN_IF_ERROR(CheckCount(Primitive::kAllToAllV, "input", input, sends));
  RETURN_IF_ERROR(CheckCount(Primitive::kAllToAllV, "output", output, receives));
  ASSIGN_OR_RETURN(auto wire, Begin(Primitive::kAllToAllV, algorithm, input.dtype(),
                                    ReduceOp::kSum, -1, -1, {&input, &output}));
  absl::Status s = Run(
      wire, input.raw_data(), output.raw_data(),
      [&] {
        return ring::AllToAllV(wire, input.raw_data(), send_counts, output.raw_data(),
                               recv_counts);
      },
      [&] {
        return naive::AllToAllV(wire, input.raw_data(), send_counts, output.raw_data(),
                                recv_counts);
      });
  // What the counts say it sends, for the report's exact column.
  ledger().AddExpected(wire.key(), AllToAllVTraffic(send_counts, recv_counts, rank(),
                                                     SizeOf(input.dtype()))
                                        .sent);
  return Finish(wire, int64_t(input.nbytes()), s);
}

absl::Status Communicator::Barrier(AlgorithmChoice algorithm) {
  ASSIGN_OR_RETURN(auto wire, Begin(Primitive::kBarrier, algorithm, DType::kF32, ReduceOp::kSum,
                                    -1, 0, {}));
  absl::Status s = Run(wire, nullptr, nullptr, [&] { return ring::Barrier(wire); },
                       [&] { return naive::Barrier(wire); });
  return Finish(wire, 0, s);
}

// ---------------------------------------------------------------------------- Split

std::vector<int> Communicator::GroupNodes() const {
  std::vector<int> nodes(size(), 0);
  if (options_.nodes == nullptr) return nodes;
  for (int i = 0; i < size(); ++i) nodes[i] = options_.nodes->node(world_rank_of(i));
  return nodes;
}

absl::StatusOr<std::unique_ptr<Communicator>> Communicator::Split(int color, int key,
                                                                  const std::string& name) {
  PhaseScope setup(ledger(), Phase::kSetup);
  // Every rank learns every rank's (color, key) with one all-gather of two int64 each.
  ASSIGN_OR_RETURN(Tensor mine, Tensor::Empty({2}, DType::kI64, allocator(), MemoryCategory::kComm));
  ASSIGN_OR_RETURN(Tensor all, Tensor::Empty({2 * size()}, DType::kI64, allocator(),
                                             MemoryCategory::kComm));
  mine.data<int64_t>()[0] = color;
  mine.data<int64_t>()[1] = key;
  RETURN_IF_ERROR(AllGather(mine, all));
  uint64_t split_id = splits_++;
  if (color < 0) return std::unique_ptr<Communicator>();

  std::vector<std::pair<int64_t, int>> keyed;  // (key, rank) of the ranks of my color
  const int64_t* colors_keys = all.data<int64_t>();
  for (int r = 0; r < size(); ++r) {
    if (colors_keys[2 * r] == color) keyed.push_back({colors_keys[2 * r + 1], r});
  }
  std::sort(keyed.begin(), keyed.end());
  std::vector<int> members;
  for (const auto& [k, r] : keyed) members.push_back(r);
  ASSIGN_OR_RETURN(std::unique_ptr<Transport> transport,
                   transport_->Split(members, split_id, name));
  return std::make_unique<Communicator>(std::move(transport), resources_, options_);
}

}  // namespace tally::comm
