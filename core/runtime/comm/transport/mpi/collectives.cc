// MPI's own collectives (--native_collectives) and the group's error words (group.h).
#include <mpi.h>

#include <climits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/runtime/comm/algorithms/partition.h"
#include "core/runtime/comm/algorithms/reduce.h"
#include "core/runtime/comm/transport/mpi/group.h"
#include "core/runtime/comm/transport/mpi/mpi_transport.h"
#include "core/runtime/status_macros.h"

namespace tally::comm::mpi {

std::string MpiError(const char* call, int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  return absl::StrCat(call, " failed: ", std::string(text, size_t(length)));
}

absl::Status Check(const char* call, int code) {
  return code == MPI_SUCCESS ? absl::OkStatus() : absl::InternalError(MpiError(call, code));
}

absl::Status CheckMpi(const char* call, int code) { return Check(call, code); }

namespace {

absl::StatusOr<MPI_Datatype> DatatypeOf(DType dtype) {
  switch (dtype) {
    case DType::kF32: return MPI_FLOAT;
    case DType::kF64: return MPI_DOUBLE;
    case DType::kI32: return MPI_INT32_T;
    case DType::kI64: return MPI_INT64_T;
    case DType::kI8: return MPI_INT8_T;
    case DType::kBF16: break;
  }
  return absl::UnimplementedError("[mpi] MPI has no bfloat16 reductions; use ring or naive");
}

MPI_Op OpOf(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: return MPI_SUM;  // then divided, as the ring does
    case ReduceOp::kMax: return MPI_MAX;
    case ReduceOp::kMin: return MPI_MIN;
    case ReduceOp::kProd: return MPI_PROD;
  }
  return MPI_SUM;
}

}  // namespace

// Long, and kept whole: one case per primitive, each MPI's own routine, so that every
// primitive's mapping reads next to the others.
absl::Status NativeCollective(const Group& group, const OpSignature& signature, const void* input,
                              void* output) {
  ASSIGN_OR_RETURN(MPI_Datatype type, DatatypeOf(signature.dtype));
  if (signature.count > INT_MAX) {
    return absl::InvalidArgumentError(
        absl::StrCat(group.Where(signature), ": ", signature.count, " elements are over MPI's int count"));
  }
  const MPI_Comm comm = group.comm;
  const MPI_Op op = OpOf(signature.op);
  const int n = group.size(), r = group.rank, root = signature.root;
  const int64_t count = signature.count;
  const size_t element = SizeOf(signature.dtype);
  // Counts and displacements of the chunks ChunkOf cuts `total` into.
  auto chunks = [&](int64_t total, std::vector<int>& counts, std::vector<int>& displs) {
    for (int q = 0; q < n; ++q) {
      const Chunk c = ChunkOf(total, n, q);
      counts.push_back(int(c.count));
      displs.push_back(int(c.offset));
    }
  };
  std::vector<int> counts, displs;
  int code = MPI_SUCCESS;
  const char* call = "";
  switch (signature.primitive) {
    case Primitive::kAllReduce:
      call = "MPI_Allreduce";
      code = MPI_Allreduce(MPI_IN_PLACE, output, int(count), type, op, comm);
      break;
    case Primitive::kReduceScatter:
      call = "MPI_Reduce_scatter";
      chunks(count, counts, displs);
      code = MPI_Reduce_scatter(input, output, counts.data(), type, op, comm);
      break;
    case Primitive::kAllGather: {
      call = "MPI_Allgatherv";
      chunks(count, counts, displs);
      // ZeRO passes its own chunk inside the output: that is MPI_IN_PLACE.
      const bool in_place = input == static_cast<char*>(output) + size_t(displs[r]) * element;
      code = MPI_Allgatherv(in_place ? MPI_IN_PLACE : input, counts[r], type, output,
                            counts.data(), displs.data(), type, comm);
      break;
    }
    case Primitive::kBroadcast:
      call = "MPI_Bcast";
      code = MPI_Bcast(output, int(count), type, root, comm);
      break;
    case Primitive::kReduce:
      call = "MPI_Reduce";
      code = MPI_Reduce(r == root && input == output ? MPI_IN_PLACE : input, output, int(count),
                        type, op, root, comm);
      break;
    case Primitive::kGather:
      call = "MPI_Gatherv";
      chunks(count, counts, displs);
      code = MPI_Gatherv(input, counts[r], type, output, counts.data(), displs.data(), type, root,
                         comm);
      break;
    case Primitive::kScatter:
      call = "MPI_Scatterv";
      chunks(count, counts, displs);
      code = MPI_Scatterv(input, counts.data(), displs.data(), type, output, counts[r], type, root,
                          comm);
      break;
    case Primitive::kAllToAll: {
      call = "MPI_Alltoallv";
      chunks(count, counts, displs);  // what this rank sends to each
      const int mine = counts[r];
      std::vector<int> recv_counts(size_t(n), mine), recv_displs;
      for (int q = 0; q < n; ++q) recv_displs.push_back(q * mine);
      code = MPI_Alltoallv(input, counts.data(), displs.data(), type, output, recv_counts.data(),
                           recv_displs.data(), type, comm);
      break;
    }
    case Primitive::kBarrier:
      call = "MPI_Barrier";
      code = MPI_Barrier(comm);
      break;
    case Primitive::kSendRecv:
      return absl::InvalidArgumentError("[mpi] point-to-point has no native collective");
    case Primitive::kAllToAllV:  // the Communicator runs its own
      return absl::InvalidArgumentError("[mpi] all-to-all-v has no native collective here");
  }
  if (code != MPI_SUCCESS) {
    return absl::InternalError(absl::StrCat(group.Where(signature), ": ", MpiError(call, code)));
  }
  if (signature.op == ReduceOp::kAvg) {
    switch (signature.primitive) {
      case Primitive::kAllReduce: FinishAverage(output, count, signature.dtype, n); break;
      case Primitive::kReduceScatter: FinishAverage(output, counts[r], signature.dtype, n); break;
      case Primitive::kReduce:
        if (r == root) FinishAverage(output, count, signature.dtype, n);
        break;
      default: break;
    }
  }
  return absl::OkStatus();
}

}  // namespace tally::comm::mpi
