// The NCCL transport: one rank per GPU, the bytes over ncclSend / ncclRecv, under either
// launcher (threads of one process over the local GPUs, or mpirun).
//
//   LaunchOptions options;
//   options.world_size = 2;
//   options.world_transport = nccl::WorldTransport;  // rank r of threads on GPU r
//   RETURN_IF_ERROR(RunThreadRanks(options, [](Communicator& world) -> absl::Status {
//     ASSIGN_OR_RETURN(Tensor x, Tensor::Empty({1000}, DType::kF32, gpu_allocator));
//     return world.AllReduce(x, ReduceOp::kSum);   // the ring, over NCCL
//   }));
//
// The collective algorithms are the same ones (ring.h, naive.h), so a run books the same
// bytes as on threads or MPI. What NCCL cannot do, the launcher's own transport (the
// "bootstrap": threads or MPI, which every NCCL group keeps beside its communicator) does:
//   - each message is preceded there by a header (its byte count, and whether its
//     buffer is in GPU or host memory) under the call's OpSignature, so a receiver whose
//     call differs fails naming both sides, where NCCL would hang or mix the bytes up;
//   - the NCCL unique id of a new group goes from its first member to the others there
//     (ncclCommSplit would need every rank of the parent group; Split has only members).
// Sends and receives are queued as they are posted and launched together, in one
// ncclGroupStart/End, when the rank first waits for one of them: a ring step's send and
// receive are one NCCL group, as NCCL's own ring is. The rank then polls a CUDA event
// until the deadline, watching its launcher for an aborted run, and aborts the NCCL
// communicator if it gives up. Host buffers (the trainer's scalars) and reducing
// receives go through device staging buffers (device_memory.h does the reduction).
// With CommOptions::native_collectives each collective is NCCL's own (ncclAllReduce,
// ...; an uneven reduce-scatter or all-gather is a group of ncclReduce or ncclBroadcast,
// one per chunk), and its bytes are booked as the ring's.
//
// Inside: group.h (a group's communicators, launches and waits), nccl_transport.cc (the
// messages), collectives.cc (NCCL's own collectives).
//
// NCCL refuses two ranks of one communicator on the same GPU: with one GPU, share it
// over the threads transport instead (threads/, device_memory.h).
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/runtime/comm/transport/transport.h"

namespace tally::comm::nccl {

// Whether this build has NCCL (and CUDA).
bool Available();

// The NCCL world transport of the rank that `bootstrap` (the launcher's world transport)
// belongs to, on GPU `gpu`; every wait gives up after `timeout`. Every rank calls it.
absl::StatusOr<std::unique_ptr<Transport>> WorldTransport(std::unique_ptr<Transport> bootstrap,
                                                          int gpu, absl::Duration timeout);

}  // namespace tally::comm::nccl
