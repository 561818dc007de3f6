#include "core/runtime/comm/types.h"

#include <string>

namespace tally::comm {

const char* Name(Primitive p) {
  switch (p) {
    case Primitive::kBroadcast: return "broadcast";
    case Primitive::kScatter: return "scatter";
    case Primitive::kGather: return "gather";
    case Primitive::kReduce: return "reduce";
    case Primitive::kAllGather: return "all_gather";
    case Primitive::kReduceScatter: return "reduce_scatter";
    case Primitive::kAllReduce: return "all_reduce";
    case Primitive::kAllToAll: return "alltoall";
    case Primitive::kSendRecv: return "sendrecv";
    case Primitive::kBarrier: return "barrier";
    case Primitive::kAllToAllV: return "alltoallv";
  }
  return "?";
}

const char* Title(Primitive p) {
  switch (p) {
    case Primitive::kBroadcast: return "Broadcast";
    case Primitive::kScatter: return "Scatter";
    case Primitive::kGather: return "Gather";
    case Primitive::kReduce: return "Reduce";
    case Primitive::kAllGather: return "AllGather";
    case Primitive::kReduceScatter: return "ReduceScatter";
    case Primitive::kAllReduce: return "AllReduce";
    case Primitive::kAllToAll: return "AllToAll";
    case Primitive::kSendRecv: return "SendRecv";
    case Primitive::kBarrier: return "Barrier";
    case Primitive::kAllToAllV: return "AllToAllV";
  }
  return "?";
}

const char* Name(Algorithm a) {
  switch (a) {
    case Algorithm::kRing: return "ring";
    case Algorithm::kNaive: return "naive";
    case Algorithm::kNative: return "native";
    case Algorithm::kHierarchical: return "hierarchical";
    case Algorithm::kRecursiveDoubling: return "recursive_doubling";
  }
  return "?";
}

const char* Name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kAvg: return "avg";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kMin: return "min";
    case ReduceOp::kProd: return "prod";
  }
  return "?";
}

const char* Name(Phase phase) {
  switch (phase) {
    case Phase::kForward: return "forward";
    case Phase::kBackward: return "backward";
    case Phase::kOptimizer: return "optimizer";
    case Phase::kSetup: return "setup";
    case Phase::kEval: return "eval";
    case Phase::kCheckpoint: return "checkpoint";
    case Phase::kOther: return "other";
  }
  return "?";
}

absl::StatusOr<Primitive> ParsePrimitive(std::string_view name) {
  for (Primitive p : kAllPrimitives) {
    if (name == Name(p)) return p;
  }
  return absl::InvalidArgumentError(
      "[comm] unknown primitive '" + std::string(name) +
      "'; expected broadcast, scatter, gather, reduce, all_gather, reduce_scatter, all_reduce, "
      "alltoall, sendrecv, barrier or alltoallv");
}

absl::StatusOr<Algorithm> ParseAlgorithm(std::string_view name) {
  if (name == "ring") return Algorithm::kRing;
  if (name == "naive") return Algorithm::kNaive;
  if (name == "native") return Algorithm::kNative;
  if (name == "hierarchical") return Algorithm::kHierarchical;
  if (name == "recursive_doubling") return Algorithm::kRecursiveDoubling;
  return absl::InvalidArgumentError(
      "[comm] unknown algorithm '" + std::string(name) +
      "'; expected ring, naive, native, hierarchical or recursive_doubling");
}

absl::StatusOr<ReduceOp> ParseReduceOp(std::string_view name) {
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin,
                      ReduceOp::kProd}) {
    if (name == Name(op)) return op;
  }
  return absl::InvalidArgumentError("[comm] unknown reduce op '" + std::string(name) +
                                    "'; expected sum, avg, max, min or prod");
}

}  // namespace tally::comm
