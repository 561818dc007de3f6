#include "core/parallel/pipeline_schedule.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/runtime/comm/algorithms/partition.h"
#include "core/runtime/comm/ledger/names.h"
#include "core/runtime/status_macros.h"

namespace tally::parallel {

absl::StatusOr<PipelineSchedule> ParsePipelineSchedule(const std::string& name) {
  if (name == "gpipe") return PipelineSchedule::kGPipe;
  if (name == "1f1b") return PipelineSchedule::k1F1B;
  if (name == "interleaved") return PipelineSchedule::kInterleaved;
  return absl::InvalidArgumentError(
      absl::StrCat("[flags] --schedule must be gpipe, 1f1b or interleaved, got '", name, "'"));
}

std::string BoundaryScope(int from, int to) { return absl::StrCat("stage", from, "->", to); }

std::optional<std::pair<int, int>> ParseBoundaryScope(std::string_view scope) {
  constexpr std::string_view kPrefix = "stage";
  if (scope.substr(0, kPrefix.size()) != kPrefix) return std::nullopt;
  const size_t arrow = scope.find("->");
  int from = 0, to = 0;
  if (arrow == std::string_view::npos ||
      !absl::SimpleAtoi(std::string(scope.substr(kPrefix.size(), arrow - kPrefix.size())), &from) ||
      !absl::SimpleAtoi(std::string(scope.substr(arrow + 2)), &to)) {
    return std::nullopt;
  }
  return std::make_pair(from, to);
}

bool IsPipelineBoundary(const comm::LedgerKey& key) {
  return key.group == comm::group::kPp && key.primitive == comm::Primitive::kSendRecv &&
         ParseBoundaryScope(key.label).has_value() &&
         (key.phase == comm::Phase::kForward || key.phase == comm::Phase::kBackward);
}

int64_t TiedEmbeddingValues(const model::GPTConfig& config, int tp, int tp_rank, int zero_stage,
                            int dp, int dp_rank) {
  const int64_t wte =
      model::ParameterLayout::ForGPT(config, tp, tp_rank, {{0, 1}}).specs()[0].numel;
  return zero_stage >= 2 ? comm::ChunkOf(wte, dp, dp_rank).count : wte;
}

comm::ExpectedCalls PipelineCalls(const PipelineShape& s) {
  using comm::Phase;
  comm::ExpectedCalls calls;
  const int last = s.virtual_stages * s.stages - 1;
  // A boundary this stage sends (or receives) over, and under scatter/gather the gather
  // of what it receives.
  auto boundary = [&](int from, int to, Phase phase, bool receive) {
    calls.push_back({.group = comm::group::kPp,
                     .primitive = comm::Primitive::kSendRecv,
                     .phase = phase,
                     .scope = BoundaryScope(from, to),
                     .count = s.boundary,
                     .element = s.element,
                     .calls = s.micro_batches,
                     .ranks = s.stages,
                     .rank = s.stage,
                     .receive = receive});
    if (!receive || s.gathered == 0) return;
    calls.push_back({.group = comm::group::kTp,
                     .primitive = comm::Primitive::kAllGather,
                     .phase = phase,
                     .scope = BoundaryScope(from, to),
                     .count = s.gathered,
                     .element = s.element,
                     .calls = s.micro_batches,
                     .ranks = s.tp,
                     .rank = s.tp_rank});
  };
  for (int c = 0; c < s.virtual_stages; ++c) {
    const int vs = c * s.stages + s.stage;
    if (vs < last) boundary(vs, vs + 1, Phase::kForward, false);
    if (vs > 0) boundary(vs, vs - 1, Phase::kBackward, false);
    if (vs > 0) boundary(vs - 1, vs, Phase::kForward, true);
    if (vs < last) boundary(vs + 1, vs, Phase::kBackward, true);
  }
  if (s.tied > 0 && (s.stage == 0 || s.stage == s.stages - 1)) {
    calls.push_back({.group = comm::group::kEmbedding,
                     .primitive = comm::Primitive::kAllReduce,
                     .phase = Phase::kBackward,
                     .scope = comm::scope::kTiedEmbedding,
                     .count = s.tied,
                     .element = s.grad_element,
                     .ranks = 2,
                     .rank = s.stage == 0 ? 0 : 1});
  }
  return calls;
}

const char* Name(PipelineSchedule schedule) {
  switch (schedule) {
    case PipelineSchedule::kGPipe:
      return "gpipe";
    case PipelineSchedule::k1F1B:
      return "1f1b";
    case PipelineSchedule::kInterleaved:
      return "interleaved";
  }
  return "?";
}

absl::StatusOr<std::vector<LayerRange>> StageLayers(int n_layer, int stages,
                                                   const std::vector<int>& given) {
  if (stages < 1) return absl::InvalidArgumentError(absl::StrCat("[flags] --pp must be >= 1, got ", stages));
  if (stages > n_layer) {
    return absl::InvalidArgumentError(absl::StrCat("[flags] --pp=", stages, " is more stages than the ",
                                                   n_layer, " layers (--n_layer)"));
  }
  std::vector<int> counts = given;
  if (counts.empty()) {
    for (int s = 0; s < stages; ++s) counts.push_back(n_layer / stages + (s < n_layer % stages ? 1 : 0));
  }
  if (int(counts.size()) != stages) {
    return absl::InvalidArgumentError(absl::StrCat("[flags] --pp_layers has ", counts.size(),
                                                   " entries for --pp=", stages));
  }
  int64_t sum = 0;
  for (int c : counts) {
    if (c < 1) return absl::InvalidArgumentError("[flags] --pp_layers: every stage needs a layer");
    sum += c;
  }
  if (sum != n_layer) {
    return absl::InvalidArgumentError(absl::StrCat("[flags] --pp_layers sums to ", sum,
                                                   " layers, --n_layer is ", n_layer));
  }
  std::vector<LayerRange> ranges;
  int begin = 0;
  for (int c : counts) {
    ranges.push_back({begin, begin + c});
    begin += c;
  }
  return ranges;
}

absl::StatusOr<model::ModelChunks> StageModelChunks(int n_layer, int stages, int virtual_stages,
                                          const std::vector<int>& given, int stage) {
  if (virtual_stages == 1) {
    ASSIGN_OR_RETURN(std::vector<LayerRange> ranges, StageLayers(n_layer, stages, given));
    return model::ModelChunks{ranges[size_t(stage)]};
  }
  const int64_t count = int64_t(stages) * virtual_stages;  // in 64 bits: no flag wraps it
  if (count > n_layer) {
    return absl::InvalidArgumentError(absl::StrCat(
        "[flags] --pp=", stages, " x --virtual_stages=", virtual_stages, " is ", count,
        " chunks, more than the ", n_layer, " layers (--n_layer)"));
  }
  const int all = int(count);
  if (!given.empty() && int(given.size()) != all) {
    return absl::InvalidArgumentError(absl::StrCat("[flags] --pp_layers has ", given.size(),
                                                   " entries; the interleaved schedule wants one per "
                                                   "chunk, --pp x --virtual_stages = ",
                                                   all));
  }
  ASSIGN_OR_RETURN(std::vector<LayerRange> ranges, StageLayers(n_layer, all, given));
  model::ModelChunks chunks;
  for (int c = 0; c < virtual_stages; ++c) {
    chunks.push_back(ranges[size_t(VirtualStage(c, stages, stage))]);
  }
  return chunks;
}

namespace {

// Megatron's interleaved order (schedules.py): the k-th forward of a stage runs chunk
// (k mod vN) / N of micro-batch (k / vN)·N + k mod N; the k-th backward the same
// micro-batch on the chunks in reverse.
std::vector<PipelineStep> InterleavedSteps(int stages, int stage, int m, int v) {
  using Step = PipelineStep;
  const int n = stages, total = m * v;
  auto at = [&](int k, Step::Kind kind) {
    const int chunk = (k % (n * v)) / n;
    return Step{kind, (k / (n * v)) * n + k % n, kind == Step::kForward ? chunk : v - 1 - chunk};
  };
  const int warmup = std::min(2 * (n - 1 - stage) + (v - 1) * n, total);
  std::vector<Step> steps;
  for (int k = 0; k < warmup; ++k) steps.push_back(at(k, Step::kForward));
  for (int k = 0; k < total - warmup; ++k) {
    steps.push_back(at(warmup + k, Step::kForward));
    steps.push_back(at(k, Step::kBackward));
  }
  for (int k = total - warmup; k < total; ++k) steps.push_back(at(k, Step::kBackward));
  return steps;
}

}  // namespace

std::vector<PipelineStep> StageSteps(PipelineSchedule schedule, int stages, int stage,
                                     int micro_batches, int virtual_stages) {
  using Step = PipelineStep;
  std::vector<Step> steps;
  const int m = micro_batches;
  if (schedule == PipelineSchedule::kInterleaved) {
    return InterleavedSteps(stages, stage, m, virtual_stages);
  }
  if (schedule == PipelineSchedule::kGPipe) {
    for (int i = 0; i < m; ++i) steps.push_back({Step::kForward, i});
    for (int i = 0; i < m; ++i) steps.push_back({Step::kBackward, i});
    return steps;
  }
  // 1F1B: enough forwards to fill the stages after this one, then alternate.
  const int warmup = std::min(stages - 1 - stage, m);
  for (int i = 0; i < warmup; ++i) steps.push_back({Step::kForward, i});
  for (int i = 0; i < m - warmup; ++i) {
    steps.push_back({Step::kForward, warmup + i});
    steps.push_back({Step::kBackward, i});
  }
  for (int i = m - warmup; i < m; ++i) steps.push_back({Step::kBackward, i});
  return steps;
}

int InFlight(const std::vector<PipelineStep>& steps, int chunk) {
  int now = 0, most = 0;
  for (const PipelineStep& s : steps) {
    if (s.model_chunk != chunk) continue;
    now += s.kind == PipelineStep::kForward ? 1 : -1;
    most = std::max(most, now);
  }
  return most;
}

double SimulatedSchedule::IdleFraction(int stage) const {
  int busy = 0;
  for (const Slot& s : slots) busy += s.stage == stage ? s.length : 0;
  return length > 0 ? double(length - busy) / length : 0.0;
}

SimulatedSchedule Simulate(PipelineSchedule schedule, int stages, int micro_batches,
                           int backward_slots, int virtual_stages) {
  const int m = micro_batches, v = virtual_stages, last = stages * v - 1;
  std::vector<std::vector<PipelineStep>> steps(stages);
  for (int s = 0; s < stages; ++s) steps[s] = StageSteps(schedule, stages, s, m, v);
  // End times of each virtual stage's forward and backward of each micro-batch (-1: not
  // yet).
  std::vector<std::vector<int>> forward_end(last + 1, std::vector<int>(m, -1));
  std::vector<std::vector<int>> backward_end(last + 1, std::vector<int>(m, -1));
  std::vector<size_t> next(stages, 0);
  std::vector<int> free_at(stages, 0);
  SimulatedSchedule t;
  t.stages = stages;
  t.micro_batches = m;
  t.virtual_stages = v;
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < stages; ++s) {
      while (next[s] < steps[s].size()) {
        const PipelineStep& step = steps[s][next[s]];
        const int mb = step.micro_batch, vs = VirtualStage(step.model_chunk, stages, s);
        int ready;
        if (step.kind == PipelineStep::kForward) {
          ready = vs == 0 ? 0 : forward_end[vs - 1][mb];
        } else {
          ready = vs == last ? forward_end[vs][mb] : backward_end[vs + 1][mb];
        }
        if (ready < 0) break;  // its input is not there yet
        const int length = step.kind == PipelineStep::kForward ? 1 : backward_slots;
        const int start = std::max(free_at[s], ready);
        free_at[s] = start + length;
        (step.kind == PipelineStep::kForward ? forward_end : backward_end)[vs][mb] = free_at[s];
        t.slots.push_back({s, start, length, step});
        t.length = std::max(t.length, free_at[s]);
        ++next[s];
        progress = true;
      }
    }
  }
  return t;
}

double TheoreticalBubble(int stages, int micro_batches, int virtual_stages) {
  return double(stages - 1) / double(virtual_stages * micro_batches + stages - 1);
}

std::string ScheduleChart(const SimulatedSchedule& schedule) {
  const bool chunks = schedule.virtual_stages > 1;
  const int width =
      1 + int(absl::StrCat(std::max(0, schedule.micro_batches - 1)).size()) + (chunks ? 1 : 0);
  std::string out;
  for (int s = 0; s < schedule.stages; ++s) {
    std::vector<std::string> cells(schedule.length, std::string(width, '.'));
    for (const SimulatedSchedule::Slot& slot : schedule.slots) {
      if (slot.stage != s) continue;
      std::string cell = absl::StrCat(slot.step.kind == PipelineStep::kForward ? "F" : "B",
                                      slot.step.micro_batch);
      if (chunks) cell += char('a' + slot.step.model_chunk);
      cell.resize(width, ' ');
      for (int k = 0; k < slot.length; ++k) cells[slot.start + k] = cell;
    }
    out += absl::StrFormat("stage %d |", s);
    for (const std::string& cell : cells) out += " " + cell;
    out += absl::StrFormat(" | %3.0f%% idle\n", 100.0 * schedule.IdleFraction(s));
  }
  return out;
}

}  // namespace tally::parallel
