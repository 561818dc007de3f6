// The threads transport: every rank is a thread of one process.
//
// A message is a rendezvous. Each side posts its half (pointer, bytes; the receiver also
// a reduction) on the channel from sender to receiver, and the bytes move once, straight
// from the sender's buffer into the receiver's (or reduced into it): no staging copy, so
// a ring all-reduce reads and writes every byte as often as NCCL's would.
//
// Small messages of an exchange (SendMode::kExchange, at most kEagerBytes) are sent eagerly: the sender copies them
// into the message and goes on at once, as MPI's eager protocol does. That saves the wait
// for the receiver, which dominates the latency of a small all-reduce.
//
// Who moves the bytes of a large message: a receiver that finds the send already posted moves the bytes at once.
// A sender that finds the receive already posted links the two halves and leaves the
// copy to the receiver, which is waiting for it; only a sender that would otherwise go to
// sleep claims the copy itself. So in a ring each rank copies its own incoming data, the
// work splits evenly across cores, and no pattern of waits can deadlock (whichever side
// waits can always finish the transfer).
//
//   auto session = std::make_shared<Session>(/*world_size=*/4, absl::Seconds(60));
//   auto world = std::make_shared<Hub>(session, std::vector<int>{0, 1, 2, 3}, "world");
//   ThreadsTransport t(world, /*rank=*/2);   // one per rank thread
//
// Faults: a wait gives up when its deadline passes, when the run is aborted (any rank
// failed, or two ranks made different calls), or when the peer it waits for has returned.
// Each of these aborts the whole session, so every other rank's wait ends too. A half
// that was given up is withdrawn first, so no copy ever lands in a buffer whose owner has
// stopped waiting for it.
#pragma once

#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "core/runtime/comm/transport/threads/completion.h"
#include "core/runtime/comm/transport/transport.h"

namespace tally::comm::threads {

// How a rank waits: spin while a core is free to spin on, then sleep on a futex, waking
// every `slice` to check the deadline, the abort flag and the peer.
struct WaitPolicy {
  static constexpr absl::Duration kBaseSlice = absl::Milliseconds(20);
  static constexpr absl::Duration kMaxSlice = absl::Milliseconds(250);
  absl::Duration spin = absl::Microseconds(50);  // zero when ranks outnumber cores
  absl::Duration slice = kBaseSlice;             // longer at many ranks a core
};

// What all ranks of one run share: the abort flag, who has returned, the wait policy.
class Session {
 public:
  Session(int world_size, absl::Duration timeout);

  // Records the first reason; later calls keep it. Every wait then fails with it.
  void Abort(absl::Status reason);
  bool aborted() const { return aborted_.load(std::memory_order_acquire); }
  absl::Status abort_status() const;

  void MarkExited(int world_rank) { exited_[world_rank].store(true, std::memory_order_release); }
  bool exited(int world_rank) const { return exited_[world_rank].load(std::memory_order_acquire); }

  absl::Duration timeout() const { return timeout_; }
  const WaitPolicy& wait_policy() const { return wait_policy_; }

 private:
  absl::Duration timeout_;
  WaitPolicy wait_policy_;
  std::unique_ptr<std::atomic<bool>[]> exited_;
  std::atomic<bool> aborted_{false};
  // A std::mutex, as everywhere in tally: ThreadSanitizer sees its locks through pthread's,
  // and not an absl::Mutex of a library built without the sanitizer (Debian's), whose
  // guarded reads it then reports as races.
  mutable std::mutex mu_;
  absl::Status abort_status_;
};

struct PendingOp;
class ThreadsRequest;

// Two halves that met with the receiver's half posted first. Either owner may claim the
// transfer (and move the bytes) or, giving up, cancel it; the token decides who wins.
struct Link {
  enum Token : int { kOpen, kClaimed, kCancelled };
  PendingOp* send;  // owners do not leave while the token is open or claimed
  PendingOp* recv;
  std::atomic<int> token{kOpen};
  // An eager send has no owner left to keep it alive: the link does, until the receiver
  // has taken its bytes or withdrawn.
  std::shared_ptr<PendingOp> eager_send;
};

// One posted send or receive.
struct PendingOp {
  bool is_send = false;
  std::unique_ptr<char[]> eager;  // an eager send's own copy of its bytes
  const void* send_data = nullptr;
  void* recv_data = nullptr;
  size_t bytes = 0;
  int sender = 0, receiver = 0;  // group ranks
  OpSignature signature;
  std::optional<Reduction> reduction;
  Completion completion;
  std::shared_ptr<Link> link;  // set (under the channel lock) before completion.Link()
};

// The mailboxes of one group: a channel per ordered pair of ranks.
class Hub {
 public:
  Hub(std::shared_ptr<Session> session, std::vector<int> world_ranks, std::string name);

  struct Channel {
    std::mutex mu;
    std::deque<std::shared_ptr<PendingOp>> sends;  // posted, not yet matched
    std::deque<std::shared_ptr<PendingOp>> recvs;
  };
  Channel& channel(int src, int dst) { return channels_[size_t(src) * world_ranks_.size() + dst]; }

  // The hub of the sub-group `members` (ranks of this hub): the first member to ask
  // creates it, the others find it under (split_id, members).
  std::shared_ptr<Hub> JoinSplit(uint64_t split_id, std::span<const int> members,
                                 const std::string& name);

  // Posts `signature` as group rank `rank`'s current call and compares it with the calls
  // the other ranks posted under the same sequence number. Returns the first mismatch
  // (DescribeMismatch), or "" if there is none.
  std::string PostCall(int rank, const OpSignature& signature);

  Session& session() const { return *session_; }
  int size() const { return int(world_ranks_.size()); }
  int world_rank(int rank) const { return world_ranks_[rank]; }
  const std::string& name() const { return name_; }

 private:
  std::shared_ptr<Session> session_;
  std::vector<int> world_ranks_;
  std::string name_;
  std::unique_ptr<Channel[]> channels_;

  // The call board: each rank's last kBoardDepth collective calls, by sequence number.
  // Ranks drift apart by at most a call or two (every collective waits on its peers), so a
  // rank entering call s still finds its peers' call s here.
  static constexpr int kBoardDepth = 16;
  std::mutex board_mu_;
  std::vector<std::optional<OpSignature>> board_;  // [rank * kBoardDepth + seq % kBoardDepth]

  std::mutex splits_mu_;
  struct PendingSplit {
    std::shared_ptr<Hub> hub;
    int joined = 0;
  };
  std::map<std::pair<uint64_t, std::vector<int>>, PendingSplit> splits_;
};

class ThreadsTransport : public Transport {
 public:
  // Exchange sends of at most this many bytes are eager: buffered, done at once.
  static constexpr size_t kEagerBytes = 8192;

  ThreadsTransport(std::shared_ptr<Hub> hub, int rank) : hub_(std::move(hub)), rank_(rank) {}

  int rank() const override { return rank_; }
  int size() const override { return hub_->size(); }
  int world_rank(int group_rank) const override { return hub_->world_rank(group_rank); }
  const std::string& name() const override { return hub_->name(); }

  absl::Status Announce(const OpSignature& signature) override;
  // GPU buffers too (device_memory.h): the ranks share the process's address space, so a
  // transfer is one cudaMemcpy, or one reduction kernel, from one rank's buffer into the
  // other's. Small sends are then not buffered (kEagerBytes is for host memory).
  bool MovesDeviceMemory() const override { return true; }
  bool CarriesMeta() const override { return true; }
  size_t ExchangeCopiedAtPost(const OpSignature& signature) const override {
    return signature.device < 0 ? kEagerBytes : 0;
  }
  bool RunsOnAnyThread() const override { return true; }
  absl::Status RunStatus() const override {
    return hub_->session().aborted() ? hub_->session().abort_status() : absl::OkStatus();
  }
  std::unique_ptr<Request> Isend(int peer, const void* data, size_t bytes,
                                 const OpSignature& signature, SendMode mode) override;
  std::unique_ptr<Request> Irecv(int peer, void* data, size_t bytes, const OpSignature& signature,
                                 std::optional<Reduction> reduction) override;
  absl::StatusOr<std::unique_ptr<Transport>> Split(std::span<const int> members, uint64_t split_id,
                                                   const std::string& name) override;

 private:
  // CheckPeer, and no post once the run is aborted.
  absl::Status CheckPost(int peer, const OpSignature& signature) const;
  // Posts `op` on its channel, or meets the peer's half already there.
  std::unique_ptr<ThreadsRequest> Post(std::shared_ptr<PendingOp> op);

  std::shared_ptr<Hub> hub_;
  int rank_;
};

}  // namespace tally::comm::threads
