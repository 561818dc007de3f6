#include "core/runtime/comm/transport/threads/threads_transport.h"

#include <algorithm>
#include <cstring>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#include <thread>

#include "absl/strings/str_cat.h"
#include "core/runtime/clock.h"
#include "core/runtime/comm/transport/device_memory.h"
#include "core/runtime/comm/algorithms/reduce.h"

namespace tally::comm::threads {

// ---------------------------------------------------------------------------- Session

Session::Session(int world_size, absl::Duration timeout)
    : timeout_(timeout), exited_(new std::atomic<bool>[world_size]) {
  for (int r = 0; r < world_size; ++r) exited_[r].store(false);
  // Spinning only pays while every rank has a core to spin on; with more ranks than cores
  // a spinning waiter would steal the very core its peer needs to make progress.
  unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  if (unsigned(world_size) > cores) wait_policy_.spin = absl::ZeroDuration();
  // A sleeper wakes every slice to ask whether to give up. At hundreds of ranks a core
  // those wake-ups outnumber the messages, so the slice grows with the ranks a core (to
  // at most kMaxSlice: a failed rank still ends every wait within a quarter second).
  const int64_t ranks_a_core = int64_t(world_size) / cores;
  wait_policy_.slice = std::clamp(WaitPolicy::kBaseSlice * (ranks_a_core / 16),
                                  WaitPolicy::kBaseSlice, WaitPolicy::kMaxSlice);
}

void Session::Abort(absl::Status reason) {
  std::lock_guard<std::mutex> lock(mu_);
  if (aborted_.load(std::memory_order_relaxed)) return;
  abort_status_ = std::move(reason);
  aborted_.store(true, std::memory_order_release);
}

absl::Status Session::abort_status() const {
  std::lock_guard<std::mutex> lock(mu_);
  return abort_status_;
}

// ---------------------------------------------------------------------------- Hub

Hub::Hub(std::shared_ptr<Session> session, std::vector<int> world_ranks, std::string name)
    : session_(std::move(session)),
      world_ranks_(std::move(world_ranks)),
      name_(std::move(name)),
      channels_(new Channel[world_ranks_.size() * world_ranks_.size()]),
      board_(world_ranks_.size() * kBoardDepth) {}

std::string Hub::PostCall(int rank, const OpSignature& signature) {
  int slot = int(signature.seq % kBoardDepth);
  std::lock_guard<std::mutex> lock(board_mu_);
  board_[rank * kBoardDepth + slot] = signature;
  for (int peer = 0; peer < size(); ++peer) {
    const std::optional<OpSignature>& theirs = board_[peer * kBoardDepth + slot];
    if (peer == rank || !theirs.has_value() || theirs->seq != signature.seq) continue;
    std::string mismatch = DescribeMismatch(name_, rank, signature, peer, *theirs);
    if (!mismatch.empty()) return mismatch;
  }
  return "";
}

std::shared_ptr<Hub> Hub::JoinSplit(uint64_t split_id, std::span<const int> members,
                                    const std::string& name) {
  std::lock_guard<std::mutex> lock(splits_mu_);
  auto key = std::make_pair(split_id, std::vector<int>(members.begin(), members.end()));
  PendingSplit& pending = splits_[key];
  if (pending.hub == nullptr) {
    std::vector<int> world_ranks;
    for (int m : members) world_ranks.push_back(world_ranks_[m]);
    pending.hub = std::make_shared<Hub>(session_, std::move(world_ranks), name);
  }
  std::shared_ptr<Hub> hub = pending.hub;
  if (++pending.joined == int(members.size())) splits_.erase(key);  // everyone has it
  return hub;
}

// ---------------------------------------------------------------------------- Transfers

namespace {

// Copies of at least this many bytes bypass the cache on the way in: a large message is
// not read again soon by the receiver, and streaming stores save the read-for-ownership
// of every destination line, a third of a copy's memory traffic.
constexpr size_t kStreamingCopyBytes = size_t(256) << 10;

void CopyBytes(void* dst, const void* src, size_t bytes) {
#if defined(__SSE2__)
  if (bytes >= kStreamingCopyBytes) {
    auto* d = static_cast<char*>(dst);
    auto* s = static_cast<const char*>(src);
    size_t head = (16 - reinterpret_cast<uintptr_t>(d) % 16) % 16;
    std::memcpy(d, s, head);
    size_t body = (bytes - head) / 64 * 64;
    for (size_t i = head; i < head + body; i += 64) {
      __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
      __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 16));
      __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 32));
      __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 48));
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + i), a);
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 16), b);
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 32), c);
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 48), e);
    }
    std::memcpy(d + head + body, s + head + body, bytes - head - body);
    _mm_sfence();  // streaming stores are weakly ordered: publish them before completing
    return;
  }
#endif
  std::memcpy(dst, src, bytes);
}

// Checks that the two halves agree, then moves the bytes. Returns the status both
// halves complete with.
absl::Status MoveBytes(const PendingOp& send, const PendingOp& recv, Hub& hub) {
  std::string mismatch = DescribeMismatch(hub.name(), recv.receiver, recv.signature, send.sender,
                                          send.signature);
  if (mismatch.empty() && send.bytes != recv.bytes) {
    mismatch = absl::StrCat("[", Title(recv.signature.primitive), " on '", hub.name(), "'] rank ",
                            send.sender, " sends ", send.bytes, " bytes to rank ", recv.receiver,
                            ", which expects ", recv.bytes);
  }
  if (!mismatch.empty()) {
    absl::Status status = absl::InvalidArgumentError(mismatch);
    hub.session().Abort(status);
    return status;
  }
  if (recv.signature.meta()) return absl::OkStatus();  // nothing to move
  if (recv.signature.device >= 0) {  // GPU buffers: the rank that matched moves them there
    if (!recv.reduction.has_value()) return DeviceCopy(recv.recv_data, send.send_data, recv.bytes);
    return DeviceReduceInto(recv.recv_data, send.send_data,
                            int64_t(recv.bytes / SizeOf(recv.reduction->dtype)),
                            recv.reduction->dtype, recv.reduction->op);
  }
  if (recv.reduction.has_value()) {
    int64_t count = int64_t(recv.bytes / SizeOf(recv.reduction->dtype));
    ReduceInto(recv.recv_data, send.send_data, count, recv.reduction->dtype, recv.reduction->op);
  } else if (recv.bytes > 0) {
    CopyBytes(recv.recv_data, send.send_data, recv.bytes);
  }
  return absl::OkStatus();
}

void MoveAndComplete(PendingOp& send, PendingOp& recv, Hub& hub) {
  absl::Status status = MoveBytes(send, recv, hub);
  send.completion.Complete(status);
  recv.completion.Complete(status);  // neither half may be touched after this
}

}  // namespace

class ThreadsRequest : public Request {
 public:
  ThreadsRequest(std::shared_ptr<PendingOp> op, std::shared_ptr<Hub> hub)
      : op_(std::move(op)), hub_(std::move(hub)) {}

  // A request dropped without Wait() must not leave its buffer to a peer.
  ~ThreadsRequest() override {
    if (waited_) return;
    while (op_->completion.state() != Completion::kDone) {
      if (Withdraw()) {
        // Its peer would wait for it in vain: end the run rather than let it time out.
        hub_->session().Abort(absl::AbortedError(
            absl::StrCat("[", Title(op_->signature.primitive), " on '", hub_->name(), "'] rank ",
                         self(), " dropped a ", op_->is_send ? "send to" : "receive from",
                         " rank ", peer(), " before it completed")));
        return;
      }
      op_->completion.SleepWhile(op_->completion.state(), absl::Milliseconds(1));
    }
  }

  absl::Status Wait() override;
  // Nobody will wait for this half (an eager send): dropping it withdraws nothing.
  void Detach() { waited_ = true; }

 private:
  enum class Claim { kMoved, kPeerMoving, kCancelled };
  // Claims a linked transfer and moves the bytes.
  Claim TryMove();
  // Takes this half back: off the channel if still queued, or by cancelling its link.
  // False if a transfer is under way (or done); the caller waits for it to finish.
  bool Withdraw();
  // Why to stop waiting, if there is a reason: abort, peer gone, deadline.
  absl::Status GiveUpReason(int64_t deadline_nanos) const;
  int peer() const { return op_->is_send ? op_->receiver : op_->sender; }
  int self() const { return op_->is_send ? op_->sender : op_->receiver; }

  std::shared_ptr<PendingOp> op_;
  std::shared_ptr<Hub> hub_;
  bool waited_ = false;
};

ThreadsRequest::Claim ThreadsRequest::TryMove() {
  Link& link = *op_->link;
  int expected = Link::kOpen;
  if (link.token.compare_exchange_strong(expected, Link::kClaimed, std::memory_order_acq_rel)) {
    MoveAndComplete(*link.send, *link.recv, *hub_);
    link.eager_send.reset();
    return Claim::kMoved;
  }
  return expected == Link::kCancelled ? Claim::kCancelled : Claim::kPeerMoving;
}

bool ThreadsRequest::Withdraw() {
  if (op_->completion.state() == Completion::kPending) {
    Hub::Channel& channel = hub_->channel(op_->sender, op_->receiver);
    std::lock_guard<std::mutex> lock(channel.mu);
    auto& queue = op_->is_send ? channel.sends : channel.recvs;
    for (auto it = queue.begin(); it != queue.end(); ++it) {
      if (it->get() == op_.get()) {
        queue.erase(it);
        return true;
      }
    }
    // Not queued any more: the peer has met it and is linking or moving it.
  }
  if (op_->completion.state() == Completion::kLinked) {
    int expected = Link::kOpen;
    if (op_->link->token.compare_exchange_strong(expected, Link::kCancelled,
                                                 std::memory_order_acq_rel)) {
      op_->link->eager_send.reset();
      return true;
    }
    return expected == Link::kCancelled;
  }
  return false;
}

absl::Status ThreadsRequest::GiveUpReason(int64_t deadline_nanos) const {
  Session& session = hub_->session();
  if (session.aborted()) return session.abort_status();
  std::string where = absl::StrCat("[", Title(op_->signature.primitive), " on '", hub_->name(),
                                   "'] rank ", self());
  std::string what = absl::StrCat(op_->is_send ? "send" : "recv", " of ", op_->bytes, " bytes");
  if (session.exited(hub_->world_rank(peer()))) {
    return absl::AbortedError(absl::StrCat(where, " waits for rank ", peer(), " (", what,
                                           "), which has already returned"));
  }
  if (MonotonicNanos() > deadline_nanos) {
    return absl::DeadlineExceededError(
        absl::StrCat(where, " waited ", absl::FormatDuration(session.timeout()), " for rank ",
                     peer(), " (", what, "); deadline exceeded"));
  }
  return absl::OkStatus();
}

absl::Status ThreadsRequest::Wait() {
  waited_ = true;
  Session& session = hub_->session();
  const WaitPolicy& policy = session.wait_policy();
  int64_t now = MonotonicNanos();
  int64_t deadline = now + absl::ToInt64Nanoseconds(session.timeout());
  int64_t spin_end = now + absl::ToInt64Nanoseconds(policy.spin);
  bool spinning = policy.spin > absl::ZeroDuration();
  bool peer_moving = false;
  for (int i = 0;; ++i) {
    Completion::State state = op_->completion.state();
    if (state == Completion::kDone) return op_->completion.status();
    // A receiver moves linked bytes at once; a sender leaves them to the receiver while
    // it spins, and claims them only instead of going to sleep.
    if (state == Completion::kLinked && !peer_moving && (!op_->is_send || !spinning)) {
      Claim claim = TryMove();
      if (claim == Claim::kMoved) return op_->completion.status();
      if (claim == Claim::kCancelled) return session.abort_status();  // the peer withdrew
      peer_moving = true;  // the peer claimed it: done soon
    }
    if (spinning) {
      CpuRelax();
      if ((i & 63) == 63 && MonotonicNanos() > spin_end) spinning = false;
      continue;
    }
    op_->completion.SleepWhile(state, peer_moving ? absl::Milliseconds(1) : policy.slice);
    // Progress first: only a wait that is still where it was asks whether to give up.
    if (peer_moving || op_->completion.state() != state) continue;
    absl::Status stop = GiveUpReason(deadline);
    if (!stop.ok() && Withdraw()) {
      session.Abort(stop);
      return session.abort_status();
    }
  }
}


// ---------------------------------------------------------------------------- Transport

absl::Status ThreadsTransport::CheckPost(int peer, const OpSignature& signature) const {
  if (absl::Status s = CheckPeer(peer, signature); !s.ok()) return s;
  return RunStatus();
}

absl::Status ThreadsTransport::Announce(const OpSignature& signature) {
  Session& session = hub_->session();
  if (session.aborted()) return session.abort_status();
  std::string mismatch = hub_->PostCall(rank_, signature);
  if (mismatch.empty()) return absl::OkStatus();
  session.Abort(absl::InvalidArgumentError(mismatch));
  return session.abort_status();
}

std::unique_ptr<ThreadsRequest> ThreadsTransport::Post(std::shared_ptr<PendingOp> op) {
  Hub::Channel& channel = hub_->channel(op->sender, op->receiver);
  std::shared_ptr<PendingOp> peer_half;
  {
    std::lock_guard<std::mutex> lock(channel.mu);
    auto& theirs = op->is_send ? channel.recvs : channel.sends;
    auto& ours = op->is_send ? channel.sends : channel.recvs;
    if (theirs.empty()) {
      ours.push_back(op);
    } else {
      peer_half = std::move(theirs.front());
      theirs.pop_front();
      if (op->is_send) {  // the receive was waiting: link the halves, the receiver copies
        auto link = std::make_shared<Link>();
        link->send = op.get();
        link->recv = peer_half.get();
        if (op->eager != nullptr) link->eager_send = op;
        op->link = link;
        peer_half->link = link;
      }
    }
  }
  if (peer_half != nullptr) {
    if (op->is_send) {
      op->completion.Link();
      peer_half->completion.Link();
    } else {  // the send was waiting: this receiver moves the bytes now
      MoveAndComplete(*peer_half, *op, *hub_);
    }
  }
  return std::make_unique<ThreadsRequest>(std::move(op), hub_);
}

std::unique_ptr<Request> ThreadsTransport::Isend(int peer, const void* data, size_t bytes,
                                                 const OpSignature& signature, SendMode mode) {
  if (absl::Status s = CheckPost(peer, signature); !s.ok()) return FailedRequest(s);
  auto op = std::make_shared<PendingOp>();
  op->is_send = true;
  op->send_data = data;
  op->bytes = bytes;
  op->sender = rank_;
  op->receiver = peer;
  op->signature = signature;
  if (mode == SendMode::kExchange && bytes <= kEagerBytes && signature.device < 0) {
    op->eager.reset(new char[bytes > 0 ? bytes : 1]);
    if (bytes > 0 && !signature.meta()) std::memcpy(op->eager.get(), data, bytes);
    op->send_data = op->eager.get();
    // The message owns its bytes now: the receiver takes them whenever it comes, and the
    // sender has nothing to wait for. (A mismatch found then aborts the run, and the
    // sender learns of it at its next wait.)
    Post(std::move(op))->Detach();
    return FailedRequest(absl::OkStatus());
  }
  return Post(std::move(op));
}

std::unique_ptr<Request> ThreadsTransport::Irecv(int peer, void* data, size_t bytes,
                                                 const OpSignature& signature,
                                                 std::optional<Reduction> reduction) {
  if (absl::Status s = CheckPost(peer, signature); !s.ok()) return FailedRequest(s);
  auto op = std::make_shared<PendingOp>();
  op->recv_data = data;
  op->bytes = bytes;
  op->sender = peer;
  op->receiver = rank_;
  op->signature = signature;
  op->reduction = reduction;
  return Post(std::move(op));
}

absl::StatusOr<std::unique_ptr<Transport>> ThreadsTransport::Split(std::span<const int> members,
                                                                   uint64_t split_id,
                                                                   const std::string& name) {
  int new_rank = -1;
  for (size_t i = 0; i < members.size(); ++i) {
    if (members[i] < 0 || members[i] >= size()) {
      return absl::InvalidArgumentError(absl::StrCat("[Split of '", this->name(), "'] member ",
                                                     members[i], " is not a rank of the group"));
    }
    if (members[i] == rank_) new_rank = int(i);
  }
  if (new_rank < 0) {
    return absl::InvalidArgumentError(absl::StrCat("[Split of '", this->name(), "'] rank ", rank_,
                                                   " is not among the members of '", name, "'"));
  }
  std::shared_ptr<Hub> hub = hub_->JoinSplit(split_id, members, name);
  return std::unique_ptr<Transport>(std::make_unique<ThreadsTransport>(std::move(hub), new_rank));
}

}  // namespace tally::comm::threads
