// The vocabulary of communication: primitives, algorithms, reduce ops, phases.
//
// Each enum has a Name() used in every table and JSON file, and a Parse() for flags.
#pragma once

#include <cstdint>
#include <string_view>

#include "absl/status/statusor.h"

namespace tally::comm {

// What a call does. kSendRecv covers point-to-point Send and Recv; kAllToAllV is the
// all-to-all whose blocks each rank pair sizes on its own (expert parallelism's dispatch).
enum class Primitive : uint8_t {
  kBroadcast,
  kScatter,
  kGather,
  kReduce,
  kAllGather,
  kReduceScatter,
  kAllReduce,
  kAllToAll,
  kSendRecv,
  kBarrier,
  kAllToAllV,
};
inline constexpr Primitive kAllPrimitives[] = {
    Primitive::kBroadcast, Primitive::kScatter,       Primitive::kGather,
    Primitive::kReduce,    Primitive::kAllGather,     Primitive::kReduceScatter,
    Primitive::kAllReduce, Primitive::kAllToAll,      Primitive::kSendRecv,
    Primitive::kBarrier,   Primitive::kAllToAllV};

// How it is done. kNaive is the root-based star (the seed's "monitor collects") or a
// direct exchange; kRing passes chunks around the ring (or down a chain for rooted ops);
// kNative is the transport's own collective (MPI_Allreduce, ...), whose bytes the
// ledger cannot observe: it books the ring's, marked modelled. kHierarchical is two
// levels of rings, inside each node and across nodes (hierarchical.h), for all-reduce,
// reduce-scatter and all-gather over a group spread evenly over several nodes; anything
// else asked of it runs (and is booked as) the ring. kRecursiveDoubling is the
// latency-optimal all-reduce of small buffers (recursive_doubling.h): whole buffers
// exchanged in log2(p) rounds; other primitives asked of it run the ring.
enum class Algorithm : uint8_t { kRing, kNaive, kNative, kHierarchical, kRecursiveDoubling };

enum class ReduceOp : uint8_t { kSum, kAvg, kMax, kMin, kProd };

// The part of a training step a transfer belongs to, set by a PhaseScope.
enum class Phase : uint8_t { kForward, kBackward, kOptimizer, kSetup, kEval, kCheckpoint, kOther };
inline constexpr int kNumPhases = 7;

const char* Name(Primitive p);  // snake_case, as nccl-tests names them: "all_reduce"
const char* Name(Algorithm a);  // "ring", "naive", "native", "hierarchical", "recursive_doubling"
const char* Name(ReduceOp op);  // "sum", "avg", ...
const char* Name(Phase phase);  // "forward", ...
// The CamelCase name used in error messages: "AllReduce".
const char* Title(Primitive p);

absl::StatusOr<Primitive> ParsePrimitive(std::string_view name);
absl::StatusOr<Algorithm> ParseAlgorithm(std::string_view name);
absl::StatusOr<ReduceOp> ParseReduceOp(std::string_view name);

}  // namespace tally::comm
