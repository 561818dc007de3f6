// The NCCL transport (nccl_transport.h): messages queued as posted, launched as one NCCL
// group at the first wait (group.h), their headers over the launcher's transport.
#include "core/runtime/comm/transport/nccl/nccl_transport.h"

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/runtime/comm/transport/device_memory.h"
#include "core/runtime/comm/transport/nccl/group.h"
#include "core/runtime/comm/algorithms/reduce.h"
#include "core/runtime/cuda/cuda.h"
#include "core/runtime/status_macros.h"

namespace tally::comm::nccl {
namespace {

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
                                void* output) override {
    if (signature.primitive == Primitive::kSendRecv) {
      return absl::InvalidArgumentError("[nccl] point-to-point has no native collective");
    }
    RETURN_IF_ERROR(Flush());
    return nccl::NativeCollective(*group_, signature, input, output);
  }

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
    if (absl::Status s = CheckPeer(peer, signature); !s.ok()) return FailedRequest(s);
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
  ASSIGN_OR_RETURN(std::shared_ptr<Group> group,
                   Group::Create(std::move(bootstrap), gpu, timeout));
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
