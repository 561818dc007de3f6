// The NCCL transport (nccl_transport.h): a group's messages queued, then launched as one
// NCCL group on two communicators, their headers over the launcher's transport.
#include "runtime/comm/nccl/nccl_transport.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/strings/str_cat.h"
#include "runtime/comm/device_memory.h"
#include "runtime/comm/partition.h"
#include "runtime/comm/poller.h"
#include "runtime/comm/reduce.h"
#include "runtime/cuda/cuda.h"
#include "runtime/cuda/cuda_status.h"
#include "runtime/status_macros.h"

namespace tally::comm::nccl {
namespace {

// An NCCL return code as a Status naming the call. The communicators are non-blocking,
// so ncclInProgress is no error: the call goes on, and AwaitComm waits for it.
absl::Status NcclStatus(ncclResult_t code, const char* call) {
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

absl::StatusOr<ncclDataType_t> TypeOf(DType dtype) {
  switch (dtype) {
    case DType::kF32: return ncclFloat32;
    case DType::kF64: return ncclFloat64;
    case DType::kI32: return ncclInt32;
    case DType::kI64: return ncclInt64;
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

Group::~Group() {
  cudaSetDevice(gpu);
  for (Channel* c : {&up, &down}) {
    if (c->comm != nullptr) {
      bool clean = failure.ok() && NcclStatus(ncclCommFinalize(c->comm), "ncclCommFinalize").ok();
      if (clean) clean = AwaitComms("ncclCommFinalize").ok();
      if (clean) {
        ncclCommDestroy(c->comm);
      } else {
        ncclCommAbort(c->comm);
      }
      c->comm = nullptr;
    }
    if (c->stream != nullptr) cudaStreamDestroy(c->stream);
  }
}

absl::Status Group::Fail(absl::Status status) {
  if (failure.ok()) {
    failure = std::move(status);
    for (Channel* c : {&up, &down}) {
      if (c->comm != nullptr) ncclCommAbort(c->comm);
      c->comm = nullptr;
    }
  }
  return failure;
}

absl::Status Group::Poll(absl::FunctionRef<absl::StatusOr<bool>()> ready,
                         const std::string& what) {
  Poller poller(timeout);
  for (;;) {
    ASSIGN_OR_RETURN(bool done, ready());
    if (done) return absl::OkStatus();
    RETURN_IF_ERROR(bootstrap->RunStatus());
    if (!poller.Next()) {
      return absl::DeadlineExceededError(absl::StrCat(what, ": waited ",
                                                      absl::FormatDuration(timeout), " on GPU ",
                                                      gpu, "; deadline exceeded"));
    }
  }
}

absl::Status Group::AwaitComms(const std::string& what) {
  return Poll(
      [&]() -> absl::StatusOr<bool> {
        for (Channel* c : {&up, &down}) {
          if (c->comm == nullptr) continue;
          ncclResult_t state = ncclSuccess;
          NCCL_RETURN_IF_ERROR(ncclCommGetAsyncError(c->comm, &state));
          if (state == ncclInProgress) return false;
          NCCL_RETURN_IF_ERROR(state);
        }
        return true;
      },
      what);
}

absl::Status Group::AwaitEvent(const Event& event, const std::string& what) {
  return Poll(
      [&]() -> absl::StatusOr<bool> {
        const cudaError_t code = cudaEventQuery(event.get());
        if (code == cudaSuccess) return true;
        if (code != cudaErrorNotReady) return cuda::CudaStatus(code, "cudaEventQuery");
        for (Channel* c : {&up, &down}) {  // a peer's failure shows here, not in the event
          if (c->comm == nullptr) continue;
          ncclResult_t state = ncclSuccess;
          NCCL_RETURN_IF_ERROR(ncclCommGetAsyncError(c->comm, &state));
          NCCL_RETURN_IF_ERROR(state);
        }
        return false;
      },
      what);
}

absl::Status Group::AfterDefaultStream() {
  ASSIGN_OR_RETURN(std::shared_ptr<Event> computed, Event::RecordOn(cudaStreamLegacy));
  for (Channel* c : {&up, &down}) {
    CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(c->stream, computed->get(), 0));
  }
  return absl::OkStatus();
}

absl::Status Group::Launch() {
  std::vector<std::shared_ptr<Message>> batch;
  batch.swap(queued);
  CUDA_RETURN_IF_ERROR(cudaSetDevice(gpu));
  for (const std::shared_ptr<Message>& m : batch) {
    if (m->bytes == 0 || (!m->host && !m->reduction.has_value())) continue;
    ASSIGN_OR_RETURN(m->staging, staging.Take(m->bytes));
    if (m->is_send) {
      CUDA_RETURN_IF_ERROR(
          cudaMemcpy(m->staging.data, m->data, m->bytes, cudaMemcpyHostToDevice));
    }
  }
  RETURN_IF_ERROR(AfterDefaultStream());
  NCCL_RETURN_IF_ERROR(ncclGroupStart());
  absl::Status posted;
  for (const std::shared_ptr<Message>& m : batch) {
    if (m->bytes == 0 || !posted.ok()) continue;  // the header alone meets the peer
    Channel& c = ChannelTo(*m);
    void* buffer = m->staging.data != nullptr ? m->staging.data : m->data;
    posted = m->is_send
                 ? NcclStatus(ncclSend(buffer, m->bytes, ncclUint8, m->peer, c.comm, c.stream),
                              "ncclSend")
                 : NcclStatus(ncclRecv(buffer, m->bytes, ncclUint8, m->peer, c.comm, c.stream),
                              "ncclRecv");
  }
  absl::Status ended = NcclStatus(ncclGroupEnd(), "ncclGroupEnd");
  RETURN_IF_ERROR(posted);
  RETURN_IF_ERROR(ended);
  RETURN_IF_ERROR(AwaitComms(absl::StrCat("[nccl on '", bootstrap->name(), "'] rank ", rank(),
                                          ": launching ", batch.size(), " messages")));
  ASSIGN_OR_RETURN(std::shared_ptr<Event> up_done, Event::RecordOn(up.stream));
  ASSIGN_OR_RETURN(std::shared_ptr<Event> down_done, Event::RecordOn(down.stream));
  for (const std::shared_ptr<Message>& m : batch) {
    m->launched = true;
    if (m->bytes > 0) m->done = &ChannelTo(*m) == &up ? up_done : down_done;
  }
  return absl::OkStatus();
}

class NcclRequest : public Request {
 public:
  NcclRequest(std::shared_ptr<Group> group, std::shared_ptr<Message> message)
      : group_(std::move(group)), m_(std::move(message)) {}

  ~NcclRequest() override {
    if (m_->finished) return;
    if (!m_->launched) {  // withdrawn before its group was launched
      std::erase(group_->queued, m_);
      group_->staging.Give(m_->staging);
    }
    // Launched and dropped unfinished (a failed run on its way out): the GPU may still
    // write into its staging buffer, which is left to it.
  }

  absl::Status Wait() override {
    Message& m = *m_;
    Group& g = *group_;
    if (m.finished) return m.status;
    if (!g.failure.ok()) return Finish(g.failure);
    if (!m.launched) {
      if (absl::Status s = g.Launch(); !s.ok()) return Finish(g.Fail(s));
    }
    // The header: the peer made the same call (the bootstrap compares the signatures)
    // with as many bytes.
    if (absl::Status s = m.header_request->Wait(); !s.ok()) return Finish(g.Fail(s));
    if (!m.is_send) {
      OpSignature theirs = m.signature;
      theirs.device = int(m.header.device);
      std::string mismatch =
          DescribeMismatch(g.bootstrap->name(), g.rank(), m.signature, m.peer, theirs);
      if (mismatch.empty() && m.header.bytes != m.bytes) {
        mismatch = absl::StrCat(g.Where(m.signature), " expected ", m.bytes, " bytes from rank ",
                                m.peer, ", which sent ", m.header.bytes);
      }
      if (!mismatch.empty()) return Finish(g.Fail(absl::InvalidArgumentError(mismatch)));
    }
    if (m.done != nullptr) {
      absl::Status s = g.AwaitEvent(
          *m.done, absl::StrCat(g.Where(m.signature), " (", m.is_send ? "send to" : "recv from",
                                " rank ", m.peer, ", ", m.bytes, " bytes)"));
      if (!s.ok()) return Finish(g.Fail(s));
    }
    absl::Status s = Deliver();
    if (!s.ok()) return Finish(g.Fail(s));
    g.staging.Give(m.staging);
    m.staging = {};
    return Finish(absl::OkStatus());
  }

 private:
  // A receive's bytes from the staging buffer into the caller's, copied or reduced.
  absl::Status Deliver() {
    Message& m = *m_;
    if (m.is_send || m.staging.data == nullptr) return absl::OkStatus();
    if (!m.reduction.has_value()) {
      return cuda::CopyToHost(m.data, m.staging.data, m.bytes);  // only host data is staged
    }
    const int64_t count = int64_t(m.bytes / SizeOf(m.reduction->dtype));
    if (!m.host) {
      return DeviceReduceInto(m.data, m.staging.data, count, m.reduction->dtype, m.reduction->op);
    }
    std::vector<char> incoming(m.bytes);
    RETURN_IF_ERROR(cuda::CopyToHost(incoming.data(), m.staging.data, m.bytes));
    ReduceInto(m.data, incoming.data(), count, m.reduction->dtype, m.reduction->op);
    return absl::OkStatus();
  }

  absl::Status Finish(absl::Status status) {
    m_->finished = true;
    m_->status = std::move(status);
    return m_->status;
  }

  std::shared_ptr<Group> group_;
  std::shared_ptr<Message> m_;
};

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
    case Primitive::kSendRecv: break;
  }
  return {};
}

class NcclTransport : public Transport {
 public:
  explicit NcclTransport(std::shared_ptr<Group> group) : group_(std::move(group)) {}

  int rank() const override { return group_->rank(); }
  int size() const override { return group_->size(); }
  int world_rank(int group_rank) const override {
    return group_->bootstrap->world_rank(group_rank);
  }
  const std::string& name() const override { return group_->bootstrap->name(); }
  int gpu() const override { return group_->gpu; }
  bool MovesDeviceMemory() const override { return true; }
  absl::Status RunStatus() const override { return group_->bootstrap->RunStatus(); }
  absl::Status Announce(const OpSignature& signature) override {
    return group_->bootstrap->Announce(signature);
  }

  std::unique_ptr<Request> Isend(int peer, const void* data, size_t bytes,
                                 const OpSignature& signature, SendMode) override {
    return Post(/*is_send=*/true, peer, const_cast<void*>(data), bytes, signature, std::nullopt);
  }
  std::unique_ptr<Request> Irecv(int peer, void* data, size_t bytes, const OpSignature& signature,
                                 std::optional<Reduction> reduction) override {
    return Post(/*is_send=*/false, peer, data, bytes, signature, reduction);
  }

  absl::Status Flush() override {
    if (group_->queued.empty() || !group_->failure.ok()) return group_->failure;
    if (absl::Status s = group_->Launch(); !s.ok()) return group_->Fail(s);
    return absl::OkStatus();
  }

  absl::Status NativeCollective(const OpSignature& signature, const void* input,
                                void* output) override;

  absl::StatusOr<std::unique_ptr<Transport>> Split(std::span<const int> members, uint64_t split_id,
                                                   const std::string& name) override;

  // The transport of the ranks `bootstrap` holds, on GPU `gpu`: makes its communicators.
  static absl::StatusOr<std::unique_ptr<Transport>> Create(std::unique_ptr<Transport> bootstrap,
                                                           int gpu, absl::Duration timeout);

 private:
  std::unique_ptr<Request> Post(bool is_send, int peer, void* data, size_t bytes,
                                const OpSignature& signature, std::optional<Reduction> reduction) {
    Group& g = *group_;
    if (!g.failure.ok()) return FailedRequest(g.failure);
    if (peer < 0 || peer >= size() || peer == rank()) {
      return FailedRequest(absl::InvalidArgumentError(absl::StrCat(
          g.Where(signature), " cannot exchange with rank ", peer, " of a group of ", size())));
    }
    if (signature.device >= 0 && signature.device != g.gpu) {
      return FailedRequest(absl::InvalidArgumentError(
          absl::StrCat(g.Where(signature), ": a buffer on GPU ", signature.device,
                       ", but this rank's NCCL communicator is on GPU ", g.gpu)));
    }
    auto m = std::make_shared<Message>();
    m->is_send = is_send;
    m->peer = peer;
    m->data = data;
    m->bytes = bytes;
    m->signature = signature;
    m->reduction = reduction;
    m->host = signature.device < 0;
    if (is_send) m->header = {bytes, signature.device};
    OpSignature in_host_memory = signature;  // the header's own memory
    in_host_memory.device = -1;
    m->header_request =
        is_send ? g.bootstrap->Isend(peer, &m->header, sizeof m->header, in_host_memory,
                                     SendMode::kRendezvous)
                : g.bootstrap->Irecv(peer, &m->header, sizeof m->header, in_host_memory,
                                     std::nullopt);
    g.queued.push_back(m);
    return std::make_unique<NcclRequest>(group_, std::move(m));
  }

  std::shared_ptr<Group> group_;
};

absl::StatusOr<std::unique_ptr<Transport>> NcclTransport::Create(
    std::unique_ptr<Transport> bootstrap, int gpu, absl::Duration timeout) {
  auto group = std::make_shared<Group>();
  group->bootstrap = std::move(bootstrap);
  group->gpu = gpu;
  group->timeout = timeout;
  Group& g = *group;
  CUDA_RETURN_IF_ERROR(cudaSetDevice(gpu));
  // The communicators' ids, from the group's first rank to the others.
  ncclUniqueId ids[2];
  OpSignature signature;
  signature.count = int64_t(sizeof ids);
  if (g.rank() == 0) {
    NCCL_RETURN_IF_ERROR(ncclGetUniqueId(&ids[0]));
    NCCL_RETURN_IF_ERROR(ncclGetUniqueId(&ids[1]));
    std::vector<std::unique_ptr<Request>> sends;
    for (int q = 1; q < g.size(); ++q) {
      sends.push_back(g.bootstrap->Isend(q, ids, sizeof ids, signature, SendMode::kRendezvous));
    }
    for (auto& s : sends) RETURN_IF_ERROR(s->Wait());
  } else {
    RETURN_IF_ERROR(g.bootstrap->Irecv(0, ids, sizeof ids, signature, std::nullopt)->Wait());
  }
  Channel* channels[2] = {&g.up, &g.down};
  for (int i = 0; i < 2; ++i) {
    CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&channels[i]->stream, cudaStreamNonBlocking));
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;  // every wait has a deadline, the communicator's making too
    NCCL_RETURN_IF_ERROR(
        ncclCommInitRankConfig(&channels[i]->comm, g.size(), ids[i], g.rank(), &config));
  }
  if (absl::Status s = g.AwaitComms(absl::StrCat("[nccl on '", g.bootstrap->name(), "'] rank ",
                                                 g.rank(), ": making the communicators"));
      !s.ok()) {
    return g.Fail(s);
  }
  return std::unique_ptr<Transport>(std::make_unique<NcclTransport>(std::move(group)));
}

absl::StatusOr<std::unique_ptr<Transport>> NcclTransport::Split(std::span<const int> members,
                                                                uint64_t split_id,
                                                                const std::string& name) {
  RETURN_IF_ERROR(Flush());
  ASSIGN_OR_RETURN(std::unique_ptr<Transport> bootstrap,
                   group_->bootstrap->Split(members, split_id, name));
  return Create(std::move(bootstrap), group_->gpu, group_->timeout);
}

absl::Status NcclTransport::NativeCollective(const OpSignature& s, const void* input,
                                             void* output) {
  if (s.primitive == Primitive::kSendRecv) {
    return absl::InvalidArgumentError("[nccl] point-to-point has no native collective");
  }
  RETURN_IF_ERROR(Flush());
  Group& g = *group_;
  ASSIGN_OR_RETURN(ncclDataType_t type, TypeOf(s.dtype));
  const ncclRedOp_t op = OpOf(s.op);
  const int n = size(), r = rank();
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
    case Primitive::kSendRecv: break;
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

}  // namespace

bool Available() { return true; }

absl::StatusOr<std::unique_ptr<Transport>> WorldTransport(std::unique_ptr<Transport> bootstrap,
                                                          int gpu, absl::Duration timeout) {
  ASSIGN_OR_RETURN(int gpus, cuda::DeviceCount());
  if (gpu < 0 || gpu >= gpus) {
    return absl::InvalidArgumentError(absl::StrCat(
        "[nccl] rank ", bootstrap->rank(), " needs GPU ", gpu, ", and this machine has ", gpus,
        ": NCCL takes one GPU per rank (several ranks share one GPU over --backend=threads)"));
  }
  return NcclTransport::Create(std::move(bootstrap), gpu, timeout);
}

}  // namespace tally::comm::nccl
