// The group of ranks on NCCL (group.h): making its communicators, launching its queued
// messages as one NCCL group, waiting with a deadline, failing and closing down.
#include "core/runtime/comm/transport/nccl/group.h"

#include <utility>

#include "core/runtime/comm/transport/poller.h"
#include "core/runtime/status_macros.h"

namespace tally::comm::nccl {

absl::StatusOr<std::shared_ptr<Group>> Group::Create(std::unique_ptr<Transport> bootstrap,
                                                     int gpu, absl::Duration timeout) {
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
  return group;
}

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

}  // namespace tally::comm::nccl
