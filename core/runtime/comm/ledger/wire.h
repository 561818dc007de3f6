// Wire: the collective algorithms' view of a transport, and the place every byte is booked.
//
// A Communicator makes one Wire per call. The algorithm posts sends and receives through
// it; the Wire splits each into messages of at most max_chunk_bytes, stamps them with the
// call's signature, books each in the rank's TrafficLedger, and hands them to the
// transport. Because booking happens here, on the only path to the transport, the ledger
// counts every byte by construction.
//
//   Requests step;
//   wire.Send(wire.right(), chunk, bytes, step);
//   wire.RecvReduce(wire.left(), into, bytes, step);
//   RETURN_IF_ERROR(step.WaitAll());
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/runtime/clock.h"
#include "core/runtime/comm/ledger/ledger.h"
#include "core/runtime/comm/transport/transport.h"
#include "core/runtime/tensor.h"

namespace tally::comm {

class Requests;

class Wire {
 public:
  // `scratch` is the communicator's reusable comm buffer (see Scratch). The call began at
  // `started_nanos` (MonotonicNanos).
  Wire(Transport& transport, TrafficLedger& ledger, Allocator& allocator, Tensor* scratch,
       const OpSignature& signature, size_t max_chunk_bytes, int64_t started_nanos);

  int rank() const { return transport_.rank(); }
  int size() const { return transport_.size(); }
  int right() const { return (rank() + 1) % size(); }
  int left() const { return (rank() + size() - 1) % size(); }
  // The rank `distance` steps after `from` around the ring.
  int RingRank(int from, int distance) const { return ((from + distance) % size() + size()) % size(); }

  const OpSignature& signature() const { return signature_; }
  size_t element_size() const { return SizeOf(signature_.dtype); }

  // Messages of one transfer: [offset, offset + bytes) pieces of at most max_chunk_bytes
  // (whole elements). A zero-byte transfer is one zero-byte message, so that every rank
  // still meets its peer and the signatures are still compared.
  struct Segment {
    size_t offset, bytes;
  };
  // Most transfers are one piece: kept inline, without a heap allocation per transfer.
  using SegmentList = absl::InlinedVector<Segment, 1>;
  SegmentList Segments(size_t bytes) const;
  // The messages posted for a transfer of `segments`: those, or for meta buffers (a dry
  // run) one in their place, which carries nothing; the ledger books `segments` either
  // way, so that a dry run's ledger is a real run's and a dry run at real scale does not
  // post millions of messages.
  SegmentList Posted(const SegmentList& segments, size_t bytes) const;

  // Whether a kExchange send of `bytes` leaves the caller's buffer free as soon as it is
  // posted (the transport copies it then: Transport::ExchangeCopiedAtPost).
  bool ExchangeCopiedAtPost(size_t bytes) const {
    return bytes <= transport_.ExchangeCopiedAtPost(signature_);
  }

  // Post the messages of one transfer to/from group rank `peer`, adding them to `pending`.
  void Send(int peer, const void* data, size_t bytes, Requests& pending,
            SendMode mode = SendMode::kRendezvous);
  void Recv(int peer, void* data, size_t bytes, Requests& pending);
  // data = op(data, message), the op and dtype of the call.
  void RecvReduce(int peer, void* data, size_t bytes, Requests& pending);

  // Books what a call of the transport's own collective moved, which the transport does
  // not tell: the ring's bytes (ExactTraffic), sent to the right neighbour and received
  // from the left one.
  void BookModelled();

  // Books one call of the collective (payload: the caller's buffer size) in the ledger: it
  // ran from started_nanos() until now, and held the caller up from `blocked_nanos`.
  void RecordCall(int64_t payload_bytes, int64_t blocked_nanos);
  // The same for a call that ended at `ended_nanos` (a non-blocking collective, booked
  // when it is waited for): held up from `blocked_nanos` to its end, if it had not ended.
  // The thread that ran the call has booked its messages' times (StampCompleted).
  void RecordCall(int64_t payload_bytes, int64_t blocked_nanos, int64_t ended_nanos);
  // Reads the clock (or takes `now`), booking the times of the messages waited for since
  // the last reading; returns the reading.
  int64_t StampCompleted(int64_t now = -1);
  int64_t started_nanos() const { return started_nanos_; }

  // Space for `count` elements of the call's dtype, valid until the call returns, in the
  // call's memory (host, or its GPU). It is the communicator's comm buffer, grown when a
  // call needs more and kept (as NCCL keeps its buffers), so repeated calls neither
  // allocate nor fault in pages. One per call.
  absl::StatusOr<void*> Scratch(int64_t count);
  // The ledger row the call books under.
  const LedgerKey& key() const { return key_; }
  TrafficLedger& ledger() { return ledger_; }
  // What this call has sent so far, by peer (world rank), when the rank's timeline records
  // (timeline.h; read when the call was made); empty otherwise.
  const std::vector<tally::PeerBytes>& sent() const { return sent_; }

 private:
  friend class Requests;
  void PostRecv(int peer, void* data, size_t bytes, bool reduce, Requests& pending);

  // The messages' times (TransferTotals::seconds) take no clock reading of their own: a
  // message is stamped as posted by the first post of the run it belongs to (posts made
  // back to back, with no wait between), and as done by the first reading after its wait
  // (the next run of posts', or the call's end).
  int64_t PostedNanos();
  void Completed(TransferTotals* row, int64_t posted_nanos);
  int PeerWorldRank(int peer) const;
  // The ledger row of this call and peer, looked up once per call.
  TransferTotals& Row(int peer_world);

  Transport& transport_;
  TrafficLedger& ledger_;
  Allocator& allocator_;
  Tensor* scratch_;
  OpSignature signature_;
  size_t max_chunk_bytes_;
  LedgerKey key_;
  absl::InlinedVector<std::pair<int, TransferTotals*>, 2> rows_;  // (peer world rank, its row)
  int64_t sent_bytes_ = 0;  // added to the ledger's running total as the call is recorded
  bool recording_;  // the rank's timeline, as the call was made (on the rank's thread)
  int64_t started_nanos_;
  int64_t posted_nanos_ = -1;  // the current run of posts' stamp; -1 after a wait
  absl::InlinedVector<std::pair<TransferTotals*, int64_t>, 2> completed_;  // (row, posted)
  std::vector<tally::PeerBytes> sent_;
};

// Point-to-point requests posted together and waited for together (a ring step's send
// and receive, mostly).
class Requests {
 public:
  size_t size() const { return entries_.size(); }
  // Waits for the i-th posted message.
  absl::Status Wait(size_t i);
  // Waits for all of them; returns the first error.
  absl::Status WaitAll();
  // Adds a request that has failed with `status` (found before anything was posted).
  void Fail(absl::Status status);

 private:
  friend class Wire;
  struct Entry {
    std::unique_ptr<Request> request;
    Wire* wire;            // that posted it (null: a failure found before posting)
    TransferTotals* row;   // where its time is booked
    int64_t posted_nanos;  // its run of posts' stamp (Wire::PostedNanos)
    bool waited = false;
    absl::Status status;
  };
  absl::InlinedVector<Entry, 2> entries_;  // a step is a send and a receive, mostly
};

}  // namespace tally::comm
