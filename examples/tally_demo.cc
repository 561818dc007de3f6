// tally_demo: the collectives of one training step, counted at the wire.
//
//   tally_demo --ranks=8 --elements=262144
//
// The ranks form a dp x tp grid (tp = 2 when the rank count is even; Megatron's order, tp
// fastest). Each rank then does what one step of a data + tensor parallel run does with
// its buffers: a tensor-parallel all-reduce of activations in the forward phase, a
// data-parallel all-reduce of gradients in the backward phase (ring, and once more naive
// to show the star's hot spot), and a ZeRO-style reduce-scatter + all-gather in the
// optimizer phase. At the end it prints the ledger's traffic table, the peer matrix, and
// each rank's bytes next to the exact formula.
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "examples/example_main.h"
#include "absl/strings/str_format.h"
#include "core/runtime/comm/ledger/exact_traffic.h"
#include "core/runtime/comm/launch.h"
#include "core/runtime/comm/algorithms/partition.h"
#include "core/runtime/status_macros.h"

ABSL_FLAG(int, ranks, 8, "thread ranks (world size)");
ABSL_FLAG(int64_t, elements, 262144, "f32 elements per buffer (activations and gradients)");
ABSL_FLAG(std::string, traffic_json, "", "write every rank's ledger as JSON to this file");

namespace tally {
namespace {

using comm::Algorithm;
using comm::Communicator;
using comm::Phase;
using comm::Primitive;
using comm::ReduceOp;

absl::Status Step(Communicator& world, int tp_size, int64_t n, std::vector<int64_t>& expected) {
  int r = world.rank();
  ASSIGN_OR_RETURN(auto tp, world.Split(r / tp_size, r, "tp"));
  ASSIGN_OR_RETURN(auto dp, world.Split(r % tp_size, r, "dp"));
  world.ledger().Clear();  // count the step, not the set-up

  ASSIGN_OR_RETURN(Tensor activations, Tensor::Empty({n}, DType::kF32, world.allocator(),
                                                     MemoryCategory::kActivations));
  ASSIGN_OR_RETURN(Tensor grads, Tensor::Empty({n}, DType::kF32, world.allocator(),
                                               MemoryCategory::kGrads));
  comm::Chunk shard = comm::ChunkOf(n, dp->size(), dp->rank());
  ASSIGN_OR_RETURN(Tensor grad_shard, Tensor::Empty({shard.count}, DType::kF32, world.allocator(),
                                                    MemoryCategory::kGrads));
  {
    comm::PhaseScope phase(world.ledger(), Phase::kForward);
    comm::LabelScope label(world.ledger(), "layer0.mlp");
    RETURN_IF_ERROR(tp->AllReduce(activations, ReduceOp::kSum));
  }
  {
    comm::PhaseScope phase(world.ledger(), Phase::kBackward);
    RETURN_IF_ERROR(dp->AllReduce(grads, ReduceOp::kAvg, Algorithm::kRing));
    RETURN_IF_ERROR(dp->AllReduce(grads, ReduceOp::kAvg, Algorithm::kNaive));
  }
  {
    comm::PhaseScope phase(world.ledger(), Phase::kOptimizer);
    comm::LabelScope label(world.ledger(), "zero");
    RETURN_IF_ERROR(dp->ReduceScatter(grads, grad_shard, ReduceOp::kAvg));
    RETURN_IF_ERROR(dp->AllGather(grad_shard, grads));
  }
  auto exact = [&](Primitive p, Algorithm a, const Communicator& g) {
    return comm::ExactTraffic(p, a, g.size(), g.rank(), -1, n, 4).sent;
  };
  expected[r] = exact(Primitive::kAllReduce, Algorithm::kRing, *tp) +
                exact(Primitive::kAllReduce, Algorithm::kRing, *dp) +
                exact(Primitive::kAllReduce, Algorithm::kNaive, *dp) +
                exact(Primitive::kReduceScatter, Algorithm::kRing, *dp) +
                exact(Primitive::kAllGather, Algorithm::kRing, *dp);
  return absl::OkStatus();
}

absl::Status Main() {
  int ranks = absl::GetFlag(FLAGS_ranks);
  int64_t n = absl::GetFlag(FLAGS_elements);
  if (ranks < 1) return absl::InvalidArgumentError("[tally_demo] --ranks must be >= 1");
  if (n < 0) return absl::InvalidArgumentError("[tally_demo] --elements must be >= 0");
  int tp_size = ranks % 2 == 0 ? 2 : 1;

  std::vector<comm::TrafficLedger> ledgers(ranks);
  std::vector<int64_t> expected(ranks);
  comm::LaunchOptions options;
  options.world_size = ranks;
  RETURN_IF_ERROR(comm::RunThreadRanks(options, [&](Communicator& world) -> absl::Status {
    RETURN_IF_ERROR(Step(world, tp_size, n, expected));
    ledgers[world.rank()] = world.ledger();
    return absl::OkStatus();
  }));

  std::printf("tally_demo: %d thread ranks as dp=%d x tp=%d, %lld f32 elements per buffer (%lld bytes)\n\n",
              ranks, ranks / tp_size, tp_size, (long long)n, (long long)(4 * n));
  std::printf("%s\n", comm::FormatTrafficTable(ledgers).c_str());
  std::printf("%s\n", comm::FormatPeerMatrix(comm::PeerMatrix(ledgers)).c_str());
  std::printf("bytes sent per rank: ledger vs exact formula\n");
  bool all_equal = true;
  for (int r = 0; r < ranks; ++r) {
    int64_t measured = ledgers[r].Total().bytes_sent;
    all_equal &= measured == expected[r];
    std::printf("  rank %d: %12lld  %12lld  %s\n", r, (long long)measured, (long long)expected[r],
                measured == expected[r] ? "equal" : "DIFFERENT");
  }
  if (!absl::GetFlag(FLAGS_traffic_json).empty()) {
    RETURN_IF_ERROR(comm::WriteTrafficJson(absl::GetFlag(FLAGS_traffic_json), ledgers));
  }
  if (!all_equal) return absl::InternalError("[tally_demo] the ledger disagrees with the formula");
  return absl::OkStatus();
}

}  // namespace
}  // namespace tally

int main(int argc, char** argv) {
  return tally::RunExample(argc, argv, "collectives of one parallel step, counted: tally_demo --ranks=8", tally::Main);
}
