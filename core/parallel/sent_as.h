// SentAs: collectives whose values travel as one type (fp32 or bf16) whatever the type of
// the buffers they read and write. Mixed precision sends bf16 (2 bytes a value, as the
// traffic ledger books them) from fp32 activations, and gradient compression sends an
// fp32 run's gradients as bf16 (PyTorch DDP's bf16 compress hook):
//
//   SentAs bf16(DType::kBF16);
//   RETURN_IF_ERROR(bf16.AllReduce(group, activations, comm::ReduceOp::kSum));
//
// When the types match the collective runs on the buffers themselves. Otherwise they
// are converted (rounded to nearest even; core/runtime/kernels/kernels.h) into a buffer of the
// wire type, charged to the group's comm memory, and the result converted back; a sum
// of bf16 values is formed in fp32 and rounded once per hop (the transports' reduce).
#pragma once

#include <memory>

#include "absl/status/status.h"
#include "core/runtime/comm/communicator.h"
#include "core/runtime/dtype.h"
#include "core/runtime/kernels/kernels.h"
#include "core/runtime/tensor.h"

namespace tally::parallel {

class SentAs {
 public:
  explicit SentAs(DType type = DType::kF32) : type_(type) {}
  DType type() const { return type_; }

  absl::Status AllReduce(comm::Communicator& group, const Tensor& data, comm::ReduceOp op,
                         comm::Communicator::AlgorithmChoice algorithm = {}) const;
  absl::Status AllGather(comm::Communicator& group, const Tensor& mine, const Tensor& all,
                         comm::Communicator::AlgorithmChoice algorithm = {}) const;
  absl::Status ReduceScatter(comm::Communicator& group, const Tensor& all, const Tensor& mine,
                             comm::ReduceOp op,
                             comm::Communicator::AlgorithmChoice algorithm = {}) const;
  // Non-blocking forms (Communicator::IAllReduce, IReduceScatter) travelling as the wire
  // type: the input converted into a wire buffer now, the result converted back into
  // `data` / `mine` by Wait.
  class Work {
   public:
    absl::Status Wait();

   private:
    friend class SentAs;
    const SentAs* sent_as_ = nullptr;
    std::unique_ptr<comm::CollectiveWork> work_;
    Tensor wire_, data_;  // the result, as it arrives and where it goes
    Tensor input_;        // a reduce-scatter's input in the wire type, while it is sent
  };
  absl::StatusOr<Work> IAllReduce(comm::Communicator& group, const Tensor& data, comm::ReduceOp op,
                                  comm::Communicator::AlgorithmChoice algorithm = {}) const;
  absl::StatusOr<Work> IReduceScatter(comm::Communicator& group, const Tensor& all,
                                      const Tensor& mine, comm::ReduceOp op,
                                      comm::Communicator::AlgorithmChoice algorithm = {}) const;

  absl::Status Send(comm::Communicator& group, const Tensor& data, int peer) const;
  absl::Status Recv(comm::Communicator& group, const Tensor& data, int peer) const;

 private:
  // `t` as the wire type: itself, or a converted copy in the group's comm memory.
  absl::StatusOr<Tensor> ToWire(comm::Communicator& group, const Tensor& t, bool copy) const;
  // `wire`'s values into `t` (nothing when they are the same tensor).
  absl::Status FromWire(const Tensor& wire, const Tensor& t) const;
  absl::StatusOr<Kernels*> KernelsFor(Device device) const;

  DType type_;
  // The kernels that convert, made on first use for the buffers' device (one rank's).
  mutable std::shared_ptr<Kernels> kernels_;
};

}  // namespace tally::parallel
