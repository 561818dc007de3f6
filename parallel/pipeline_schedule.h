// Pipeline schedules as data: which layers each stage holds, and the ordered list of
// forwards and backwards each stage runs for the m micro-batches of a step.
//
//   gpipe (Huang et al., 2019): every forward, then every backward.
//   1f1b  (PipeDream-flush, as in Megatron-LM): stage s runs min(N-1-s, m) warm-up
//         forwards, then alternates one forward and one backward, then cools down with
//         the remaining backwards. A stage then holds at most N-s micro-batches'
//         activations at once, against m under gpipe; the bubble is the same.
//
// With N stages, m micro-batches and a backward that takes as long as the forward, both
// leave each stage idle for a fraction (N-1)/(m+N-1) of the step: the bubble.
//
//   ASSIGN_OR_RETURN(auto layers, StageLayers(/*n_layer=*/8, /*stages=*/4, {}));  // 2 each
//   std::vector<PipelineStep> steps = StageSteps(PipelineSchedule::k1F1B, 4, stage, m);
//   std::cout << ScheduleChart(Simulate(PipelineSchedule::k1F1B, 4, m));
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/comm/ledger/ledger.h"

namespace tally::parallel {

enum class PipelineSchedule { kGPipe, k1F1B };

// The ledger scope of a boundary's transfer: stage `from` sends to stage `to` of the
// same replica ("stage0->1": activations, forward; "stage1->0": their gradients,
// backward).
std::string BoundaryScope(int from, int to);
// The (from, to) stages of a boundary scope; nullopt for any other scope.
std::optional<std::pair<int, int>> ParseBoundaryScope(std::string_view scope);
// Whether a ledger row is a boundary's transfer (group pp, send/recv, forward or backward).
bool IsPipelineBoundary(const comm::LedgerKey& key);
// Bytes each boundary carries each way in a step: every micro-batch's (b, s, h)
// activations forward and their gradients back, so `replica_sequences`·s·h·4 for the
// replica's share of the global batch, whatever the micro-batch count; under sequence
// parallelism each tensor-parallel rank sends its part of the sequence (`sequence_split`
// = tp, else 1).
// `element` bytes a value (4; 2 when the boundaries travel as bf16).
int64_t BoundaryBytesPerStep(int64_t replica_sequences, int seq_len, int n_embd, int sequence_split,
                             int64_t element = 4);

// "gpipe" or "1f1b".
absl::StatusOr<PipelineSchedule> ParsePipelineSchedule(const std::string& name);
const char* Name(PipelineSchedule schedule);

// Layers [begin, end) of each stage: contiguous, in order, covering all n_layer. `given`
// empty: balanced (the first n_layer % stages stages get one more); otherwise the count
// per stage (--pp_layers=3,3,2), each at least 1, summing to n_layer.
struct LayerRange {
  int begin = 0, end = 0;
};
absl::StatusOr<std::vector<LayerRange>> StageLayers(int n_layer, int stages,
                                                   const std::vector<int>& given);

struct PipelineStep {
  enum Kind { kForward, kBackward };
  Kind kind = kForward;
  int micro_batch = 0;
};

// What stage `stage` of `stages` runs, in order, for `micro_batches` micro-batches: each
// micro-batch's forward once and its backward once, the backward after the forward.
std::vector<PipelineStep> StageSteps(PipelineSchedule schedule, int stages, int stage,
                                     int micro_batches);

// The schedule played out with every forward taking one time slot and every backward
// `backward_slots`: each step starts as soon as its stage is free and its input is
// there (a forward needs the previous stage's forward of the micro-batch, a backward the
// next stage's backward, or on the last stage its own forward).
struct Timeline {
  struct Slot {
    int stage = 0, start = 0, length = 0;
    PipelineStep step;
  };
  int stages = 0, micro_batches = 0, length = 0;  // length: slots until the last step ends
  std::vector<Slot> slots;                         // every step of every stage
  // Idle slots over all slots of a stage: (length - busy) / length.
  double IdleFraction(int stage) const;
};
Timeline Simulate(PipelineSchedule schedule, int stages, int micro_batches,
                  int backward_slots = 1);

// (N-1)/(m+N-1).
double TheoreticalBubble(int stages, int micro_batches);

// One line per stage, one column per slot: "F3" forward of micro-batch 3, "B3" its
// backward, ".." idle; then the idle fraction.
//
//   stage 0 | F0 F1 .. .. B0 B1 |  33% idle
//   stage 1 | .. F0 F1 B0 B1 .. |  33% idle
std::string ScheduleChart(const Timeline& timeline);

}  // namespace tally::parallel
