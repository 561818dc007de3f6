// One collective call with closed-form data: the buffers it needs, its inputs, the call
// itself, and a count of the output elements that differ from the closed form. The test
// suite and tally_bench's -c check are both built on it.
//
//   ASSIGN_OR_RETURN(CallBuffers b, MakeCallBuffers(comm, Primitive::kAllGather, n, root));
//   FillInputs(comm, Primitive::kAllGather, b, n, root);
//   RETURN_IF_ERROR(Call(comm, Primitive::kAllGather, Algorithm::kRing, b, n, root));
//   int64_t wrong = CountWrong(comm, Primitive::kAllGather, b, n, root);
//
// `count` is the call's full buffer, as in exact_traffic.h. Data are f32 and the reduce
// op is sum; the values are small integers, so every algorithm's sum is exact.
// kSendRecv is a ring exchange (send to the right neighbour, receive from the left), the
// pattern of nccl-tests' sendrecv.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "core/runtime/comm/communicator.h"

namespace tally::comm {

struct CallBuffers {
  Tensor input;   // unused by in-place calls (Broadcast, AllReduce)
  Tensor output;  // the data of in-place calls
};

absl::StatusOr<CallBuffers> MakeCallBuffers(Communicator& comm, Primitive primitive,
                                            int64_t count, int root);
void FillInputs(Communicator& comm, Primitive primitive, CallBuffers& buffers, int64_t count,
                int root);
absl::Status Call(Communicator& comm, Primitive primitive, Algorithm algorithm,
                  CallBuffers& buffers, int64_t count, int root);
// The same buffers in `memory` (the rank's GPU, say), contents and all; and contents
// copied between buffers of the same sizes (back to the host, say).
absl::StatusOr<CallBuffers> CopyCallBuffers(const CallBuffers& from, Allocator& memory);
absl::Status CopyContents(const CallBuffers& from, const CallBuffers& to);
// Wrong elements of this rank's output, plus any input element the call modified.
int64_t CountWrong(Communicator& comm, Primitive primitive, const CallBuffers& buffers,
                   int64_t count, int root);

}  // namespace tally::comm
