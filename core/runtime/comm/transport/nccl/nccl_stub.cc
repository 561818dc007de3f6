// The NCCL transport's stand-in for a build without NCCL or CUDA: it says so.
#include "core/runtime/comm/transport/nccl/nccl_transport.h"

namespace tally::comm::nccl {

bool Available() { return false; }

absl::StatusOr<std::unique_ptr<Transport>> WorldTransport(std::unique_ptr<Transport>, int,
                                                          absl::Duration) {
  return absl::UnimplementedError(
      "[nccl] this build has no NCCL: it needs the CUDA toolkit and NCCL (libnccl-dev) when "
      "it is configured");
}

}  // namespace tally::comm::nccl
