// ZeRO's sharding arithmetic: which runs of the flat buffer are cut among the ranks, the
// rank's chunk of each, and how many calls and bytes a step spends on them. Pure functions
// of the layout; the stages (zero.h) act on what they return.
//
// Words used throughout core/parallel/zero/:
//   model unit  a unit of the model's parameters (the embeddings, a layer, ln_f), which the
//               model asks for and releases as a whole (core/model/parameters.h).
//   unit        a run of the buffer that ZeRO cuts among a group's ranks on its own
//               (ZeroUnit). ZeRO-1: the whole buffer. ZeRO-2/3: each model unit, except
//               that a first pipeline stage's embeddings are two units (wte and wpe);
//               under expert parallelism each is cut further into runs of experts' tensors
//               and runs of the others.
//   piece       this rank's share of one unit: the unit, the rank's chunk of it (ChunkOf,
//               so chunks need not be equal) and where that chunk sits in the packed shard.
//   shard       the rank's chunks of every unit, packed in buffer order.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "core/model/parameters.h"
#include "core/runtime/comm/algorithms/partition.h"
#include "core/runtime/comm/ledger/expected_calls.h"
#include "core/runtime/comm/types.h"

namespace tally::parallel {

// A run of the buffer that ZeRO cuts among the ranks of a group on its own.
struct ZeroUnit {
  comm::Chunk range;  // in buffer coordinates
  // Experts' tensors only, cut over the expert-data-parallel group (the ranks that hold the
  // same experts) under expert parallelism; otherwise cut over the dp group.
  bool experts = false;
};

// This rank's shard of a buffer cut into `units` (which tile it, in order).
class Sharding {
 public:
  // The ranks of a group that cuts units, and this one's place among them.
  struct Cut {
    int ranks = 1;
    int rank = 0;
  };
  struct Piece {
    comm::Chunk unit;    // the unit, in buffer coordinates
    comm::Chunk own;     // the rank's chunk of it, in buffer coordinates
    int64_t packed = 0;  // where the chunk starts in the packed shard
    bool experts = false;  // cut by the `experts` group
  };
  // Units without experts cut by `dense`, the experts' by `experts`.
  Sharding(const std::vector<ZeroUnit>& units, Cut dense, Cut experts);
  // Every unit cut by one group.
  Sharding(const std::vector<ZeroUnit>& units, int ranks, int rank)
      : Sharding(units, {ranks, rank}, {ranks, rank}) {}

  const std::vector<Piece>& pieces() const { return pieces_; }
  int64_t size() const { return size_; }  // elements of the packed shard

 private:
  std::vector<Piece> pieces_;
  int64_t size_ = 0;
};

// The units ZeRO stage `zero_stage` cuts `layout`'s buffer into. With `expert_parallel`
// each is cut further into runs of experts' tensors and runs of the others, so that the
// two kinds can be sharded over different groups.
std::vector<ZeroUnit> ZeroUnits(const model::ParameterLayout& layout, int zero_stage,
                                bool expert_parallel = false);
// The ranges of the `units` that hold experts' tensors (`experts`), or of the others.
std::vector<comm::Chunk> UnitRanges(const std::vector<ZeroUnit>& units, bool experts);

// The pieces [first, second) of each model unit (ZeRO-1: every model unit in all of them).
std::vector<std::pair<size_t, size_t>> PiecesOfUnits(const model::ParameterLayout& layout,
                                                     int zero_stage, bool expert_parallel = false);

// How many times one step of ZeRO stage `zero_stage` calls `primitive` on each unit under
// `phase`, with `micro_batches` micro-batches per rank (0: never); `recompute`: a pipeline
// stage recomputes its forward in backward (ZeRO-3 gathers for it too).
// `reshard`: ZeRO-3 frees a unit after its forward (false: it stays for the backward, which
// gathers nothing).
int ZeroCallsPerStep(int zero_stage, int micro_batches, comm::Primitive primitive, comm::Phase phase,
                     bool recompute = false, bool reshard = true);
// The exact bytes rank `rank` of `ranks` sends in those calls in one step over `units`
// (UnitRanges(ZeroUnits(...)) of the group's kind): exact_traffic.h summed over the units,
// times the calls.
// `element`: bytes a value of the primitive's buffer (the gradients' wire type for the
// reduce-scatter, the parameters' type for the all-gather).
// `nodes`: the node of each rank, for the hierarchical algorithm.
int64_t ZeroBytesPerStep(std::span<const comm::Chunk> units, int zero_stage, int ranks, int rank,
                         int micro_batches, comm::Algorithm algorithm, comm::Primitive primitive,
                         comm::Phase phase, bool recompute = false, int64_t element = 4,
                         std::span<const int> nodes = {});

// One step's calls of ZeRO stage `zero_stage` over `units` (UnitRanges(ZeroUnits(...)) of
// the group's kind) as data (core/runtime/comm/ledger/expected_calls.h): for each unit its
// reduce-scatters (phase backward) and all-gathers (optimizer, forward, backward), as
// many as ZeroCallsPerStep, booked in group `group` (dp, or edp for the experts') with no
// scope. `grad_element`: bytes a value of the reduce-scatter (the gradients' wire type);
// `param_element`: of the all-gather (the parameters' type). The variants' calls
// (extensions/) are made from these.
struct ZeroShape {
  const char* group = "";
  int ranks = 1, rank = 0;
  std::vector<int> nodes = {};  // the node of each rank (the hierarchical algorithm)
  int zero_stage = 0, micro_batches = 1;
  bool recompute = false;
  bool reshard = true;  // ZeRO-3's reshard after forward
  int64_t grad_element = 4, param_element = 4;
};
comm::ExpectedCalls ZeroCalls(std::span<const comm::Chunk> units, const ZeroShape& shape);

}  // namespace tally::parallel
