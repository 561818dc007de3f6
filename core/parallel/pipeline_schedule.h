// Pipeline schedules as data: which layers each stage holds, and the ordered list of
// forwards and backwards each stage runs for the m micro-batches of a step.
//
//   gpipe       (Huang et al., 2019): every forward, then every backward.
//   1f1b        (PipeDream-flush, as in Megatron-LM): stage s runs min(N-1-s, m) warm-up
//               forwards, then alternates one forward and one backward, then cools down
//               with the remaining backwards. A stage then holds at most N-s
//               micro-batches' activations at once, against m under gpipe; the bubble is
//               the same.
//   interleaved (Narayanan et al., 2021; Megatron-LM's interleaved 1F1B): the layers are
//               cut into v·N chunks (virtual stages) and stage s holds chunks s, N+s,
//               2N+s, ..., so a micro-batch passes every stage v times, from the last
//               stage back to the first between its rounds. Forwards run in groups of N
//               micro-batches: the k-th forward of a stage is chunk (k mod vN) / N of
//               micro-batch (k / vN)·N + k mod N; backwards the same with the chunks in
//               reverse. Stage s warms up with min(2(N-1-s) + (v-1)N, vm) forwards, then
//               alternates, then cools down (Megatron's schedules.py). m must be a multiple
//               of N.
//
// With N stages, m micro-batches and a backward that takes as long as the forward, gpipe
// and 1f1b leave each stage idle for a fraction (N-1)/(m+N-1) of the step: the bubble.
// Interleaving runs chunks 1/v as long, so the fill and drain shrink v-fold: the bubble
// is (N-1)/(v·m) of the ideal time, an idle fraction (N-1)/(v·m+N-1). The price: every
// micro-batch crosses v·N-1 boundaries instead of N-1, v times the point-to-point bytes.
//
//   ASSIGN_OR_RETURN(auto layers, StageLayers(/*n_layer=*/8, /*stages=*/4, {}));  // 2 each
//   std::vector<PipelineStep> steps = StageSteps(PipelineSchedule::k1F1B, 4, stage, m);
//   std::cout << ScheduleChart(Simulate(PipelineSchedule::k1F1B, 4, m));
//   ASSIGN_OR_RETURN(model::ModelChunks mine, StageModelChunks(8, 2, /*virtual_stages=*/2, {}, 0));
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "core/model/parameters.h"
#include "core/runtime/comm/ledger/expected_calls.h"
#include "core/runtime/comm/ledger/ledger.h"

namespace tally::parallel {

enum class PipelineSchedule { kGPipe, k1F1B, kInterleaved };

// The ledger scope of a boundary's transfer: stage `from` sends to stage `to` of the
// same replica ("stage0->1": activations, forward; "stage1->0": their gradients,
// backward). Under the interleaved schedule the stages named are virtual stages (chunks):
// chunk c of pipeline rank s is virtual stage c·N + s (VirtualStage), held by rank
// vs mod N.
std::string BoundaryScope(int from, int to);
// The (from, to) stages of a boundary scope; nullopt for any other scope.
std::optional<std::pair<int, int>> ParseBoundaryScope(std::string_view scope);
// Whether a ledger row is a boundary's transfer (group pp, send/recv, forward or backward).
bool IsPipelineBoundary(const comm::LedgerKey& key);
// One step's pipeline calls as data (core/runtime/comm/ledger/expected_calls.h), on stage
// `stage` of `stages`, which holds `virtual_stages` chunks (virtual stage c·N + stage
// each, of v·N). Per micro-batch, each boundary the stage's chunks send over (a chunk's
// output to the next virtual stage, phase forward; its input's gradient to the one
// before, phase backward) and receive over: one sendrecv of `boundary` values of
// `element` bytes (b·s·h of a micro-batch; 1/tp of it under sequence parallelism, a tp
// rank's chunk under scatter/gather), group pp, scope BoundaryScope(from, to). Under
// scatter/gather (`gathered` > 0) each received chunk is all-gathered over the tp group
// into the whole b·s·h tensor (`gathered` values), under the same scope and phase. On
// the first and the last stage, wte's gradient (`tied` values of `grad_element` bytes;
// under ZeRO-2/3 the dp rank's chunk of it) summed between the two once a step: group
// embedding, scope tied_embedding, phase backward.
struct PipelineShape {
  int stages = 1, stage = 0, virtual_stages = 1;
  int64_t micro_batches = 1;
  int64_t boundary = 0, element = 4;
  int tp = 1, tp_rank = 0;
  int64_t gathered = 0;
  int64_t tied = 0, grad_element = 4;
};
comm::ExpectedCalls PipelineCalls(const PipelineShape& shape);
// PipelineShape::tied for tp rank `tp_rank` of `tp` and dp rank `dp_rank` of `dp`: its
// rows of wte (config.vocab_size/tp of them, C values each; the first rows one more when
// tp does not divide), under ZeRO-2/3 its dp rank's chunk of those (partition.h's rule).
int64_t TiedEmbeddingValues(const model::GPTConfig& config, int tp, int tp_rank, int zero_stage,
                            int dp, int dp_rank);

// "gpipe", "1f1b" or "interleaved".
absl::StatusOr<PipelineSchedule> ParsePipelineSchedule(const std::string& name);
const char* Name(PipelineSchedule schedule);

// Layers [begin, end) of each stage: contiguous, in order, covering all n_layer. `given`
// empty: balanced (the first n_layer % stages stages get one more); otherwise the count
// per stage (--pp_layers=3,3,2), each at least 1, summing to n_layer.
using LayerRange = model::LayerRange;
absl::StatusOr<std::vector<LayerRange>> StageLayers(int n_layer, int stages,
                                                   const std::vector<int>& given);
// The chunks pipeline rank `stage` of `stages` holds with `virtual_stages` chunks a rank
// (1 but under the interleaved schedule): StageLayers over stages·virtual_stages virtual
// stages (`given` then has one count per virtual stage), and of them virtual stages
// stage, stages + stage, ... in order.
absl::StatusOr<model::ModelChunks> StageModelChunks(int n_layer, int stages, int virtual_stages,
                                          const std::vector<int>& given, int stage);
// Chunk `chunk` of pipeline rank `stage`: virtual stage chunk·stages + stage.
inline int VirtualStage(int chunk, int stages, int stage) { return chunk * stages + stage; }

struct PipelineStep {
  enum Kind { kForward, kBackward };
  Kind kind = kForward;
  int micro_batch = 0;
  int model_chunk = 0;  // the stage's chunk the step runs (0 but under the interleaved schedule)
};

// What stage `stage` of `stages` runs, in order, for `micro_batches` micro-batches: each
// micro-batch's forward once and its backward once on each of the stage's
// `virtual_stages` chunks, the backward after the forward. The interleaved schedule
// needs micro_batches a multiple of stages (TrainOptions::Validate checks it).
std::vector<PipelineStep> StageSteps(PipelineSchedule schedule, int stages, int stage,
                                     int micro_batches, int virtual_stages = 1);
// The most micro-batches whose forward on `chunk` has run and whose backward has not,
// over `steps`: the activation sets the chunk needs at once.
int InFlight(const std::vector<PipelineStep>& steps, int chunk);

// The schedule played out with every forward (of a chunk) taking one time slot and every
// backward `backward_slots`: each step starts as soon as its stage is free and its input
// is there (a forward needs the previous virtual stage's forward of the micro-batch, a
// backward the next virtual stage's backward, or on the last one its own forward).
// Steps that could never start (a schedule that deadlocks) are left out of `slots`.
struct SimulatedSchedule {
  struct Slot {
    int stage = 0, start = 0, length = 0;
    PipelineStep step;
  };
  int stages = 0, micro_batches = 0, virtual_stages = 1;
  int length = 0;            // slots until the last step ends
  std::vector<Slot> slots;  // every step of every stage
  // Idle slots over all slots of a stage: (length - busy) / length.
  double IdleFraction(int stage) const;
};
SimulatedSchedule Simulate(PipelineSchedule schedule, int stages, int micro_batches,
                           int backward_slots = 1, int virtual_stages = 1);

// The idle fraction of each stage with backwards as long as forwards: (N-1)/(m+N-1) for
// gpipe and 1f1b, (N-1)/(v·m+N-1) interleaved (v = 1 otherwise).
double TheoreticalBubble(int stages, int micro_batches, int virtual_stages = 1);

// One line per stage, one column per slot: "F3" forward of micro-batch 3, "B3" its
// backward, ".." idle; then the idle fraction. With several chunks a stage, a letter
// names the chunk: "F3a" micro-batch 3's forward on the stage's first chunk, "F3b" on
// its second.
//
//   stage 0 | F0 F1 .. .. B0 B1 |  33% idle
//   stage 1 | .. F0 F1 B0 B1 .. |  33% idle
std::string ScheduleChart(const SimulatedSchedule& schedule);

}  // namespace tally::parallel
