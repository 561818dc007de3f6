#include "core/parallel/sent_as.h"

#include "core/runtime/status_macros.h"

namespace tally::parallel {

absl::StatusOr<Kernels*> SentAs::KernelsFor(Device device) const {
  if (kernels_ == nullptr || kernels_->device() != device) {
    ASSIGN_OR_RETURN(std::unique_ptr<Kernels> k, Kernels::Create(device));
    kernels_ = std::move(k);
  }
  return kernels_.get();
}

absl::StatusOr<Tensor> SentAs::ToWire(comm::Communicator& group, const Tensor& t, bool copy) const {
  if (t.dtype() == type_) return t;
  Allocator comm_memory(group.allocator().ledger(), t.device());
  ASSIGN_OR_RETURN(Tensor wire, Tensor::Empty({t.numel()}, type_, comm_memory, MemoryCategory::kComm));
  if (copy) {
    ASSIGN_OR_RETURN(Kernels * k, KernelsFor(t.device()));
    RETURN_IF_ERROR(k->Convert(wire.raw_data(), type_, t.raw_data(), t.dtype(), t.numel()));
  }
  return wire;
}

absl::Status SentAs::FromWire(const Tensor& wire, const Tensor& t) const {
  if (wire.raw_data() == t.raw_data()) return absl::OkStatus();
  ASSIGN_OR_RETURN(Kernels * k, KernelsFor(t.device()));
  return k->Convert(t.raw_data(), t.dtype(), wire.raw_data(), type_, t.numel());
}

absl::Status SentAs::AllReduce(comm::Communicator& group, const Tensor& data, comm::ReduceOp op,
                             comm::Communicator::AlgorithmChoice algorithm) const {
  ASSIGN_OR_RETURN(Tensor wire, ToWire(group, data, /*copy=*/true));
  RETURN_IF_ERROR(group.AllReduce(wire, op, algorithm));
  return FromWire(wire, data);
}

absl::StatusOr<SentAs::Work> SentAs::IAllReduce(
    comm::Communicator& group, const Tensor& data, comm::ReduceOp op,
    comm::Communicator::AlgorithmChoice algorithm) const {
  Work pending;
  pending.sent_as_ = this;
  pending.data_ = data;
  ASSIGN_OR_RETURN(pending.wire_, ToWire(group, data, /*copy=*/true));
  ASSIGN_OR_RETURN(pending.work_, group.IAllReduce(pending.wire_, op, algorithm));
  return pending;
}

absl::StatusOr<SentAs::Work> SentAs::IReduceScatter(
    comm::Communicator& group, const Tensor& all, const Tensor& mine, comm::ReduceOp op,
    comm::Communicator::AlgorithmChoice algorithm) const {
  Work pending;
  pending.sent_as_ = this;
  pending.data_ = mine;
  ASSIGN_OR_RETURN(pending.input_, ToWire(group, all, /*copy=*/true));
  ASSIGN_OR_RETURN(pending.wire_, ToWire(group, mine, /*copy=*/false));
  ASSIGN_OR_RETURN(pending.work_,
                   group.IReduceScatter(pending.input_, pending.wire_, op, algorithm));
  return pending;
}

absl::Status SentAs::Work::Wait() {
  if (work_ == nullptr) return absl::OkStatus();
  absl::Status status = work_->Wait();
  work_.reset();
  input_ = Tensor();
  if (!status.ok()) return status;
  return sent_as_->FromWire(wire_, data_);
}

absl::Status SentAs::AllGather(comm::Communicator& group, const Tensor& mine, const Tensor& all,
                             comm::Communicator::AlgorithmChoice algorithm) const {
  ASSIGN_OR_RETURN(Tensor wire_mine, ToWire(group, mine, /*copy=*/true));
  ASSIGN_OR_RETURN(Tensor wire_all, ToWire(group, all, /*copy=*/false));
  RETURN_IF_ERROR(group.AllGather(wire_mine, wire_all, algorithm));
  return FromWire(wire_all, all);
}

absl::Status SentAs::ReduceScatter(comm::Communicator& group, const Tensor& all, const Tensor& mine,
                                 comm::ReduceOp op,
                                 comm::Communicator::AlgorithmChoice algorithm) const {
  ASSIGN_OR_RETURN(Tensor wire_all, ToWire(group, all, /*copy=*/true));
  ASSIGN_OR_RETURN(Tensor wire_mine, ToWire(group, mine, /*copy=*/false));
  RETURN_IF_ERROR(group.ReduceScatter(wire_all, wire_mine, op, algorithm));
  return FromWire(wire_mine, mine);
}

absl::Status SentAs::Send(comm::Communicator& group, const Tensor& data, int peer) const {
  ASSIGN_OR_RETURN(Tensor wire, ToWire(group, data, /*copy=*/true));
  return group.Send(wire, peer);
}

absl::Status SentAs::Recv(comm::Communicator& group, const Tensor& data, int peer) const {
  ASSIGN_OR_RETURN(Tensor wire, ToWire(group, data, /*copy=*/false));
  RETURN_IF_ERROR(group.Recv(wire, peer));
  return FromWire(wire, data);
}

}  // namespace tally::parallel
