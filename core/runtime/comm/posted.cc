// The posted calls of a Communicator: point-to-point messages (Isend, Irecv) and the
// non-blocking collectives (IAllReduce, IReduceScatter, IAllGather), each a Work whose
// Wait books it; the blocking calls are communicator.cc.
#include "core/runtime/comm/communicator.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/runtime/clock.h"
#include "core/runtime/comm/algorithms/partition.h"
#include "core/runtime/status_macros.h"

namespace tally::comm {

Work::Work(std::unique_ptr<Wire> wire, size_t bytes) : wire_(std::move(wire)), bytes_(bytes) {}

std::unique_ptr<Work> Communicator::PointToPoint(const Tensor& data, int peer, bool send) {
  Drain();  // after the non-blocking collectives posted before it
  // Point-to-point messages are not collective calls: they carry no sequence number, and
  // only the count and dtype are compared at the receiver.
  OpSignature signature{Primitive::kSendRecv, options_.algorithm, data.dtype(), ReduceOp::kSum,
                        -1, data.numel(), 0};
  absl::StatusOr<int> device = BufferDevice(
      [&] { return absl::StrCat("[SendRecv on '", name(), "'] rank ", rank()); }, data, data);
  signature.device = device.ok() ? *device : -1;
  auto work = std::unique_ptr<Work>(
      new Work(std::make_unique<Wire>(*transport_, ledger(), allocator(), &scratch_, signature,
                                      options_.max_chunk_bytes, MonotonicNanos()),
               data.nbytes()));
  if (ledger().timeline().recording() && peer >= 0 && peer < size()) {
    work->timeline_work_ = ledger().timeline().PostMessage(
        TimelineGroup(), transport_->world_rank(peer), send, int64_t(data.nbytes()),
        work->wire_->key().RowName(), MonotonicNanos());
  }
  if (!device.ok()) {
    work->pending_.Fail(device.status());
  } else if (send) {
    work->wire_->Send(peer, data.raw_data(), data.nbytes(), work->pending_);
  } else {
    work->wire_->Recv(peer, data.raw_data(), data.nbytes(), work->pending_);
  }
  if (absl::Status s = transport_->Flush(); !s.ok()) work->pending_.Fail(s);
  return work;
}

void CollectiveWork::Done::Set(absl::Status s, int64_t ended) {
  {
    std::lock_guard<std::mutex> lock(mu);
    status = std::move(s);
    ended_nanos = ended;
    done = true;
  }
  cv.notify_all();
}

CollectiveWork::CollectiveWork(std::unique_ptr<Wire> wire, int64_t payload_bytes)
    : wire_(std::move(wire)), payload_bytes_(payload_bytes) {}

absl::Status CollectiveWork::Wait() {
  if (waited_) return status_;
  const int64_t waited = MonotonicNanos();
  int64_t ended = 0;
  {
    std::unique_lock<std::mutex> lock(done_->mu);
    done_->cv.wait(lock, [this] { return done_->done; });
    status_ = done_->status;
    ended = done_->ended_nanos;
  }
  wire_->RecordCall(payload_bytes_, waited, ended);
  if (timeline_work_ >= 0) {  // posted while the timeline recorded
    wire_->ledger().timeline().Wait(timeline_work_, wire_->sent(), waited, MonotonicNanos());
  }
  waited_ = true;
  return status_;
}

CollectiveWork::~CollectiveWork() { Wait().IgnoreError(); }

std::unique_ptr<CollectiveWork> Communicator::Post(std::unique_ptr<Wire> wire, Call call) {
  std::unique_ptr<CollectiveWork> work(new CollectiveWork(std::move(wire), call.payload_bytes));
  Wire* w = work->wire_.get();
  if (ledger().timeline().recording()) {
    work->timeline_work_ = ledger().timeline().PostCollective(
        TimelineGroup(), size(), int64_t(w->signature().seq), w->key().RowName(),
        MonotonicNanos());
  }
  std::shared_ptr<CollectiveWork::Done> done = work->done_;
  if (!transport_->RunsOnAnyThread() || w->signature().device >= 0) {
    absl::Status status = call.run(*w);  // on the rank's thread: now
    done->Set(std::move(status), w->StampCompleted());
    return work;
  }
  if (progress_ == nullptr) progress_ = std::make_unique<Progress>();
  progress_->Post([w, done, run = std::move(call.run)]() mutable {
    absl::Status status = run(*w);
    // The messages' times are booked here, by the thread that ran the call and books
    // every other call of its rows, not by the waiter.
    const int64_t ended = w->StampCompleted();
    run = nullptr;  // the call's tensors go before its waiter goes on (memory peaks)
    done->Set(std::move(status), ended);
  });
  return work;
}

absl::StatusOr<std::unique_ptr<CollectiveWork>> Communicator::IAllReduce(
    const Tensor& data, ReduceOp op, AlgorithmChoice algorithm) {
  ASSIGN_OR_RETURN(auto wire, Begin(Primitive::kAllReduce, algorithm, data.dtype(), op, -1,
                                    data.numel(), {&data}, /*queued=*/true));
  return Post(std::make_unique<Wire>(std::move(wire)), AllReduceCall(data));
}

absl::StatusOr<std::unique_ptr<CollectiveWork>> Communicator::IReduceScatter(
    const Tensor& input, const Tensor& output, ReduceOp op, AlgorithmChoice algorithm) {
  const int64_t n = input.numel();
  RETURN_IF_ERROR(CheckCount(Primitive::kReduceScatter, "output", output,
                             ChunkOf(n, size(), rank()).count));
  ASSIGN_OR_RETURN(auto wire, Begin(Primitive::kReduceScatter, algorithm, input.dtype(), op, -1,
                                    n, {&input, &output}, /*queued=*/true));
  return Post(std::make_unique<Wire>(std::move(wire)), ReduceScatterCall(input, output));
}

absl::StatusOr<std::unique_ptr<CollectiveWork>> Communicator::IAllGather(
    const Tensor& input, const Tensor& output, AlgorithmChoice algorithm) {
  const int64_t n = output.numel();
  RETURN_IF_ERROR(CheckCount(Primitive::kAllGather, "input", input,
                             ChunkOf(n, size(), rank()).count));
  ASSIGN_OR_RETURN(auto wire, Begin(Primitive::kAllGather, algorithm, input.dtype(),
                                    ReduceOp::kSum, -1, n, {&input, &output}, /*queued=*/true));
  return Post(std::make_unique<Wire>(std::move(wire)), AllGatherCall(input, output));
}

absl::Status Work::Wait() {
  const int64_t waited = MonotonicNanos();
  absl::Status status = pending_.WaitAll();
  wire_->RecordCall(int64_t(bytes_), waited);
  if (timeline_work_ >= 0) {  // posted while the timeline recorded
    wire_->ledger().timeline().Wait(timeline_work_, wire_->sent(), waited, MonotonicNanos());
  }
  return status;
}

std::unique_ptr<Work> Communicator::Isend(const Tensor& data, int peer) {
  return PointToPoint(data, peer, /*send=*/true);
}

std::unique_ptr<Work> Communicator::Irecv(Tensor& data, int peer) {
  return PointToPoint(data, peer, /*send=*/false);
}

absl::Status Communicator::Send(const Tensor& data, int peer) { return Isend(data, peer)->Wait(); }

absl::Status Communicator::Recv(Tensor& data, int peer) { return Irecv(data, peer)->Wait(); }

}  // namespace tally::comm
