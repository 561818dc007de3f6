// What the parts of the NCCL transport share (internal to core/runtime/comm/transport/nccl): a group of
// ranks on NCCL (its two communicators and their streams, the launcher's transport beside
// them, the messages queued for the next launch, device staging buffers) and NCCL's
// return codes as Status. nccl_transport.cc moves messages through it; collectives.cc
// runs NCCL's own collectives on it.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "core/runtime/comm/transport/transport.h"
#include "core/runtime/cuda/cuda_status.h"

namespace tally::comm::nccl {

// An NCCL return code as a Status naming the call. The communicators are non-blocking,
// so ncclInProgress is no error: the call goes on, and AwaitComm waits for it.
inline absl::Status NcclStatus(ncclResult_t code, const char* call) {
  if (code == ncclSuccess || code == ncclInProgress) return absl::OkStatus();
  const char* detail = ncclGetLastError(nullptr);
  return absl::InternalError(absl::StrCat("[nccl] ", call, " failed: ", ncclGetErrorString(code),
                                          detail != nullptr && *detail != '\0'
                                              ? absl::StrCat(" (", detail, ")")
                                              : std::string()));
}

#define NCCL_RETURN_IF_ERROR(call)                                                       \
  do {                                                                                   \
    ::absl::Status tally_nccl_status = NcclStatus((call), #call);                        \
    if (!tally_nccl_status.ok()) return tally_nccl_status;                               \
  } while (false)

// A CUDA event recorded on a stream: what a wait polls.
class Event {
 public:
  static absl::StatusOr<std::shared_ptr<Event>> RecordOn(cudaStream_t stream) {
    auto event = std::shared_ptr<Event>(new Event);
    CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&event->event_, cudaEventDisableTiming));
    CUDA_RETURN_IF_ERROR(cudaEventRecord(event->event_, stream));
    return event;
  }
  ~Event() {
    if (event_ != nullptr) cudaEventDestroy(event_);
  }
  cudaEvent_t get() const { return event_; }

 private:
  Event() = default;
  cudaEvent_t event_ = nullptr;
};

// Device buffers for host messages and reducing receives, kept for reuse: cudaMalloc is
// slow and synchronises the device. Used by the rank's one thread.
class StagingPool {
 public:
  struct Buffer {
    void* data = nullptr;
    size_t capacity = 0;
  };
  StagingPool() = default;
  StagingPool(const StagingPool&) = delete;
  StagingPool& operator=(const StagingPool&) = delete;
  ~StagingPool() {
    for (Buffer& b : free_) cudaFree(b.data);
  }
  absl::StatusOr<Buffer> Take(size_t bytes) {
    for (size_t i = 0; i < free_.size(); ++i) {
      if (free_[i].capacity < bytes) continue;
      Buffer b = free_[i];
      free_.erase(free_.begin() + std::ptrdiff_t(i));
      return b;
    }
    Buffer b;
    b.capacity = std::max<size_t>(bytes, 256);
    CUDA_RETURN_IF_ERROR(cudaMalloc(&b.data, b.capacity));
    return b;
  }
  void Give(Buffer b) {
    if (b.data != nullptr) free_.push_back(b);
  }

 private:
  std::vector<Buffer> free_;
};

// One posted send or receive.
struct Message {
  bool is_send = false;
  int peer = 0;
  void* data = nullptr;  // the caller's buffer (a send's is only read)
  size_t bytes = 0;
  OpSignature signature;
  std::optional<Reduction> reduction;
  // What the bootstrap does not compare: the byte count, and where the buffer is (it
  // carries the header itself in host memory). Sent, or as the sender sent it.
  struct Header {
    uint64_t bytes = 0;
    int64_t device = -1;
  } header;
  std::unique_ptr<Request> header_request;
  bool host = false;              // data is in host memory: NCCL moves a device copy
  StagingPool::Buffer staging;    // that copy, or a reducing receive's incoming bytes
  bool launched = false;
  std::shared_ptr<Event> done;    // recorded after its NCCL group; null for zero bytes
  bool finished = false;
  absl::Status status;
};

// An NCCL communicator and the stream its operations run on.
struct Channel {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
};

// One group of ranks on NCCL. Messages from a lower group rank to a higher one go over
// `up`, the others over `down`: NCCL runs a communicator's operations in the order they
// were launched, so with one communicator a pipeline stage's activation send, launched
// before its gradient receive, would wait behind it for the next stage, whose gradient
// send waits behind its own activation receive. Each direction in its own order cannot
// cross. The native collectives use `up`.
struct Group {
  std::unique_ptr<Transport> bootstrap;  // the launcher's transport for the same ranks
  int gpu = 0;
  absl::Duration timeout;
  Channel up, down;
  std::vector<std::shared_ptr<Message>> queued;  // posted, not yet launched
  StagingPool staging;
  absl::Status failure;  // once set, every later wait fails with it

  // The group of the ranks `bootstrap` holds, on GPU `gpu`: its first rank makes the
  // communicators' ids and sends them to the others over `bootstrap`, then every rank
  // joins both communicators. Every rank of `bootstrap` calls it.
  static absl::StatusOr<std::shared_ptr<Group>> Create(std::unique_ptr<Transport> bootstrap,
                                                       int gpu, absl::Duration timeout);
  ~Group();

  int rank() const { return bootstrap->rank(); }
  int size() const { return bootstrap->size(); }
  std::string Where(const OpSignature& signature) const {
    return absl::StrCat("[", Title(signature.primitive), " on '", bootstrap->name(), "'] rank ",
                        rank());
  }
  Channel& ChannelTo(const Message& m) {
    return (m.is_send ? rank() < m.peer : m.peer < rank()) ? up : down;
  }

  // Records the first failure and aborts the communicators, so that no NCCL kernel waits
  // on for a peer that gave up. Returns the first failure.
  absl::Status Fail(absl::Status status);
  // Polls `ready` until it holds, the run is aborted, or the deadline passes.
  absl::Status Poll(absl::FunctionRef<absl::StatusOr<bool>()> ready, const std::string& what);
  // Waits for the non-blocking NCCL calls made on both communicators.
  absl::Status AwaitComms(const std::string& what);
  // Waits for the work recorded by `event`.
  absl::Status AwaitEvent(const Event& event, const std::string& what);
  // Makes the streams wait for the kernels queued so far on the default stream (where
  // the model computes the bytes a send reads).
  absl::Status AfterDefaultStream();
  // Launches the queued messages as one NCCL group.
  absl::Status Launch();
};

// NCCL's own collective for `signature` on `group` (Transport::NativeCollective), on
// the group's `up` communicator, host buffers through staging copies.
absl::Status NativeCollective(Group& group, const OpSignature& signature, const void* input,
                              void* output);

}  // namespace tally::comm::nccl
