#include "runtime/comm/threads/threads_transport.h"

#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "runtime/comm/reduce.h"

namespace tally::comm::threads {

// ---------------------------------------------------------------------------- Session

Session::Session(int world_size, absl::Duration timeout)
    : world_size_(world_size),
      timeout_(timeout),
      exited_(new std::atomic<bool>[world_size]) {
  for (int r = 0; r < world_size; ++r) exited_[r].store(false);
  // Spinning only pays while every rank has a core to spin on; with more ranks than cores
  // a spinning waiter would steal the very core its peer needs to make progress.
  unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  if (unsigned(world_size) > cores) wait_policy_.spin = absl::ZeroDuration();
}

void Session::Abort(absl::Status reason) {
  absl::MutexLock lock(&mu_);
  if (aborted_.load(std::memory_order_relaxed)) return;
  abort_status_ = std::move(reason);
  aborted_.store(true, std::memory_order_release);
}

absl::Status Session::abort_status() const {
  absl::MutexLock lock(&mu_);
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

// ---------------------------------------------------------------------------- Requests

namespace {

class ThreadsRequest : public Request {
 public:
  ThreadsRequest(std::shared_ptr<PendingOp> op, std::shared_ptr<Hub> hub, int self, int peer,
                 bool is_send)
      : op_(std::move(op)), hub_(std::move(hub)), self_(self), peer_(peer), is_send_(is_send) {}

  // A request dropped without Wait() must not leave its buffer to a peer.
  ~ThreadsRequest() override {
    if (!waited_) op_->completion.CancelOrFinish();
  }

  absl::Status Wait() override {
    waited_ = true;
    Session& session = hub_->session();
    absl::Time deadline = absl::Now() + session.timeout();
    return op_->completion.Wait(session.wait_policy(), [&]() -> absl::Status {
      if (session.aborted()) return session.abort_status();
      absl::Status failure;
      if (session.exited(hub_->world_rank(peer_))) {
        failure = absl::AbortedError(
            absl::StrCat(Where(), " rank ", self_, " waits for rank ", peer_, " (",
                         is_send_ ? "send" : "recv", " of ", op_->bytes,
                         " bytes), which has already returned"));
      } else if (absl::Now() > deadline) {
        failure = absl::DeadlineExceededError(
            absl::StrCat(Where(), " rank ", self_, " waited ",
                         absl::FormatDuration(session.timeout()), " for rank ", peer_, " (",
                         is_send_ ? "send" : "recv", " of ", op_->bytes,
                         " bytes); deadline exceeded"));
      } else {
        return absl::OkStatus();
      }
      session.Abort(failure);
      return session.abort_status();
    });
  }

 private:
  std::string Where() const {
    return absl::StrCat("[", Title(op_->signature.primitive), " on '", hub_->name(), "']");
  }

  std::shared_ptr<PendingOp> op_;
  std::shared_ptr<Hub> hub_;
  int self_, peer_;
  bool is_send_;
  bool waited_ = false;
};

}  // namespace

std::unique_ptr<Request> ThreadsTransport::MakeRequest(std::shared_ptr<PendingOp> op, int peer,
                                                       bool is_send) {
  return std::make_unique<ThreadsRequest>(std::move(op), hub_, rank_, peer, is_send);
}

// ---------------------------------------------------------------------------- Transport

absl::Status ThreadsTransport::CheckPeer(int peer, const OpSignature& signature) const {
  if (peer < 0 || peer >= size() || peer == rank_) {
    return absl::InvalidArgumentError(
        absl::StrCat("[", Title(signature.primitive), " on '", name(), "'] rank ", rank_,
                     " cannot exchange with rank ", peer, " of a group of ", size()));
  }
  if (hub_->session().aborted()) return hub_->session().abort_status();
  return absl::OkStatus();
}

absl::Status ThreadsTransport::Announce(const OpSignature& signature) {
  Session& session = hub_->session();
  if (session.aborted()) return session.abort_status();
  std::string mismatch = hub_->PostCall(rank_, signature);
  if (mismatch.empty()) return absl::OkStatus();
  session.Abort(absl::InvalidArgumentError(mismatch));
  return session.abort_status();
}

std::unique_ptr<Request> ThreadsTransport::Isend(int peer, const void* data, size_t bytes,
                                                 const OpSignature& signature) {
  if (absl::Status s = CheckPeer(peer, signature); !s.ok()) return FailedRequest(s);
  auto op = std::make_shared<PendingOp>();
  op->send_data = data;
  op->bytes = bytes;
  op->signature = signature;

  Hub::Channel& channel = hub_->channel(rank_, peer);
  std::shared_ptr<PendingOp> recv;
  {
    std::lock_guard<std::mutex> lock(channel.mu);
    if (channel.recvs.empty()) {
      channel.sends.push_back(op);
    } else {
      recv = std::move(channel.recvs.front());
      channel.recvs.pop_front();
    }
  }
  if (recv != nullptr) Transfer(*op, rank_, *recv, peer, /*queued=*/*recv);
  return MakeRequest(std::move(op), peer, /*is_send=*/true);
}

std::unique_ptr<Request> ThreadsTransport::Irecv(int peer, void* data, size_t bytes,
                                                 const OpSignature& signature,
                                                 std::optional<Reduction> reduction) {
  if (absl::Status s = CheckPeer(peer, signature); !s.ok()) return FailedRequest(s);
  auto op = std::make_shared<PendingOp>();
  op->recv_data = data;
  op->bytes = bytes;
  op->signature = signature;
  op->reduction = reduction;

  Hub::Channel& channel = hub_->channel(peer, rank_);
  std::shared_ptr<PendingOp> send;
  {
    std::lock_guard<std::mutex> lock(channel.mu);
    if (channel.sends.empty()) {
      channel.recvs.push_back(op);
    } else {
      send = std::move(channel.sends.front());
      channel.sends.pop_front();
    }
  }
  if (send != nullptr) Transfer(*send, peer, *op, rank_, /*queued=*/*send);
  return MakeRequest(std::move(op), peer, /*is_send=*/false);
}

void ThreadsTransport::Transfer(PendingOp& send, int sender, PendingOp& recv, int receiver,
                                PendingOp& queued) {
  PendingOp& own = (&queued == &send) ? recv : send;
  Session& session = hub_->session();
  if (!queued.completion.Claim()) {  // its owner gave up: the run is being aborted
    own.completion.Complete(session.abort_status());
    return;
  }
  std::string mismatch =
      DescribeMismatch(name(), receiver, recv.signature, sender, send.signature);
  if (mismatch.empty() && send.bytes != recv.bytes) {
    mismatch = absl::StrCat("[", Title(recv.signature.primitive), " on '", name(), "'] rank ",
                            sender, " sends ", send.bytes, " bytes to rank ", receiver,
                            ", which expects ", recv.bytes);
  }
  absl::Status status;
  if (!mismatch.empty()) {
    status = absl::InvalidArgumentError(mismatch);
    session.Abort(status);
  } else if (recv.reduction.has_value()) {
    int64_t count = int64_t(recv.bytes / SizeOf(recv.reduction->dtype));
    ReduceInto(recv.recv_data, send.send_data, count, recv.reduction->dtype, recv.reduction->op);
  } else if (recv.bytes > 0) {
    std::memcpy(recv.recv_data, send.send_data, recv.bytes);
  }
  queued.completion.Complete(status);
  own.completion.Complete(status);
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
