// Transport: the only thing that moves bytes between ranks.
//
// Point-to-point, non-blocking, byte ranges, within one group of ranks:
//
//   std::unique_ptr<Request> s = transport.Isend(right, chunk, bytes, signature,
//                                                SendMode::kRendezvous);
//   std::unique_ptr<Request> r = transport.Irecv(left, into, bytes, signature, &sum_f32);
//   RETURN_IF_ERROR(r->Wait());
//   RETURN_IF_ERROR(s->Wait());
//
// Messages between two ranks match in the order they were posted (per direction). Every
// message carries the OpSignature of the call that sent it; a receiver whose own call
// differs fails with a message that names both sides. A receive may reduce into its
// buffer instead of overwriting it (NCCL's recv-reduce-copy): `into = op(into, message)`.
//
// Implementations: threads/ (ranks are threads of one process; the default), mpi/ (one
// process per rank, under mpirun) and nccl/ (one GPU per rank, over either launcher).
// The collective algorithms (ring.h, naive.h) are written once against it, through the
// counting layer in wire.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/runtime/comm/types.h"
#include "core/runtime/dtype.h"

namespace tally::comm {

// Which call a message belongs to. Ranks of a group must make the same calls in the same
// order; the signature lets the receiver check that they did.
struct OpSignature {
  Primitive primitive = Primitive::kSendRecv;
  Algorithm algorithm = Algorithm::kRing;
  DType dtype = DType::kF32;
  ReduceOp op = ReduceOp::kSum;
  int root = -1;        // -1: the primitive has no root
  int64_t count = -1;   // elements of the call as every rank sees it; -1: not compared
  uint64_t seq = 0;     // collective calls made on the group before this one
  int device = -1;      // the CUDA device that holds the call's buffers; -1: host memory;
                        // kMetaBuffers: meta tensors (no payload)

  // The call's buffers are meta tensors (device.h): its messages carry their size, and
  // are matched, checked and counted as any other, but move no bytes.
  static constexpr int kMetaBuffers = -2;
  bool meta() const { return device == kMetaBuffers; }

  bool operator==(const OpSignature&) const = default;
};

// "[AllReduce on 'dp'] rank 2 passed 96 elements, rank 0 passed 128": the first way in
// which `theirs` (from group rank `their_rank`) differs from `mine`. Empty if they agree.
std::string DescribeMismatch(const std::string& group, int my_rank, const OpSignature& mine,
                             int their_rank, const OpSignature& theirs);

// How a receive combines the message with what its buffer holds.
struct Reduction {
  ReduceOp op;
  DType dtype;
};

// How a send may complete. kRendezvous: when the receiver has the bytes. kExchange: a
// small message may be buffered and the send completed at once; allowed only where every
// rank of the call also receives afterwards (a ring step, an all-to-all), so that no rank
// finishes a call without hearing from its peers, and a mismatch still reaches everyone.
enum class SendMode { kRendezvous, kExchange };

// One posted send or receive.
class Request {
 public:
  virtual ~Request() = default;
  // Blocks until the transfer is done, the deadline passes, or the run is aborted.
  virtual absl::Status Wait() = 0;
};

class Transport {
 public:
  virtual ~Transport() = default;

  virtual int rank() const = 0;  // in this group, 0..size()-1
  virtual int size() const = 0;
  virtual int world_rank(int group_rank) const = 0;
  virtual const std::string& name() const = 0;  // "world", "dp", "tp", ...

  // Called by every rank as it enters a collective call. A transport that can see its
  // peers' calls without sending anything (threads: a shared board) fails here, before a
  // byte moves, when two ranks enter different calls, whatever the algorithm's message
  // pattern. Every transport also compares signatures on each message it matches.
  virtual absl::Status Announce(const OpSignature& signature) = 0;

  // Posts a send of `bytes` bytes at `data` to group rank `peer`. The buffer must stay
  // valid and unchanged until the request completes.
  virtual std::unique_ptr<Request> Isend(int peer, const void* data, size_t bytes,
                                         const OpSignature& signature, SendMode mode) = 0;
  // Posts a receive of exactly `bytes` bytes from `peer` into `data`; with `reduction`, the
  // message is combined into `data` instead of copied.
  virtual std::unique_ptr<Request> Irecv(int peer, void* data, size_t bytes,
                                         const OpSignature& signature,
                                         std::optional<Reduction> reduction) = 0;

  // Starts the messages posted so far. NCCL queues them until a wait, to launch them as
  // one group (a ring step's send and receive); a point-to-point Isend, which may not be
  // waited for until much later, is started at once with this. The default does nothing:
  // its messages start when posted.
  virtual absl::Status Flush() { return absl::OkStatus(); }

  // An error unless `peer` is another rank of this group ("[AllReduce on 'tp'] rank 1
  // cannot exchange with rank 5 of a group of 2"): what every Isend and Irecv checks.
  absl::Status CheckPeer(int peer, const OpSignature& signature) const;

  // Whether the transport moves device memory (OpSignature::device >= 0): copies and
  // reductions between GPU buffers. The default does not.
  virtual bool MovesDeviceMemory() const { return false; }
  // The most bytes of a kExchange send that the transport copies out of the caller's
  // buffer as it posts it, so that the buffer may change at once (recursive doubling
  // reduces into the buffer it sends from). The default copies none.
  virtual size_t ExchangeCopiedAtPost(const OpSignature&) const { return 0; }
  // Whether the transport carries meta buffers' messages (OpSignature::meta()): matched
  // and counted, with no payload. The default does not.
  virtual bool CarriesMeta() const { return false; }
  // Whether this transport's calls may run on a thread of the rank other than the rank's
  // own while the rank's other communicators are used (the non-blocking collectives'
  // communication thread). MPI initialised for one thread's calls, and NCCL on the
  // rank's stream, may not.
  virtual bool RunsOnAnyThread() const { return false; }

  // The GPU this rank's transport is bound to (NCCL: one GPU per rank), where the rank's
  // tensors must live; -1 when it is bound to none.
  virtual int gpu() const { return -1; }

  // Not OK once the run has been aborted (a rank failed), with the reason. A transport
  // that waits on something other than its own requests (NCCL waits on a GPU stream)
  // polls its launcher's transport with it to stop early. The default never knows.
  virtual absl::Status RunStatus() const { return absl::OkStatus(); }

  // The transport's own collective for a call of the Communicator (`signature` names it:
  // primitive, dtype, op, root, count; the buffers are the Communicator's, with its
  // layouts), for CommOptions::native_collectives. The default has none.
  virtual absl::Status NativeCollective(const OpSignature& signature, const void* input,
                                        void* output);

  // A transport for the sub-group `members` (group ranks of this transport, in the new
  // group's rank order), which must contain rank(). Every member calls it with the same
  // `members` and `split_id`; `split_id` tells concurrent splits apart.
  virtual absl::StatusOr<std::unique_ptr<Transport>> Split(std::span<const int> members,
                                                           uint64_t split_id,
                                                           const std::string& name) = 0;
};

// A request that has already failed with `status` (for errors found while posting).
std::unique_ptr<Request> FailedRequest(absl::Status status);

}  // namespace tally::comm
