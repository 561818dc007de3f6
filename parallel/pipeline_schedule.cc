#include "parallel/pipeline_schedule.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tally::parallel {

absl::StatusOr<PipelineSchedule> ParsePipelineSchedule(const std::string& name) {
  if (name == "gpipe") return PipelineSchedule::kGPipe;
  if (name == "1f1b") return PipelineSchedule::k1F1B;
  return absl::InvalidArgumentError(
      absl::StrCat("[flags] --schedule must be gpipe or 1f1b, got '", name, "'"));
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
  return key.group == "pp" && key.primitive == comm::Primitive::kSendRecv &&
         ParseBoundaryScope(key.label).has_value() &&
         (key.phase == comm::Phase::kForward || key.phase == comm::Phase::kBackward);
}

int64_t BoundaryBytesPerStep(int64_t replica_sequences, int seq_len, int n_embd, int sequence_split,
                             int64_t element) {
  return replica_sequences * seq_len * n_embd * element / sequence_split;
}

const char* Name(PipelineSchedule schedule) {
  return schedule == PipelineSchedule::kGPipe ? "gpipe" : "1f1b";
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

std::vector<PipelineStep> StageSteps(PipelineSchedule schedule, int stages, int stage,
                                     int micro_batches) {
  using Step = PipelineStep;
  std::vector<Step> steps;
  const int m = micro_batches;
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

double Timeline::IdleFraction(int stage) const {
  int busy = 0;
  for (const Slot& s : slots) busy += s.stage == stage ? s.length : 0;
  return length > 0 ? double(length - busy) / length : 0.0;
}

Timeline Simulate(PipelineSchedule schedule, int stages, int micro_batches, int backward_slots) {
  const int m = micro_batches;
  std::vector<std::vector<PipelineStep>> steps(stages);
  for (int s = 0; s < stages; ++s) steps[s] = StageSteps(schedule, stages, s, m);
  // End times of each stage's forward and backward of each micro-batch (-1: not yet).
  std::vector<std::vector<int>> forward_end(stages, std::vector<int>(m, -1));
  std::vector<std::vector<int>> backward_end(stages, std::vector<int>(m, -1));
  std::vector<size_t> next(stages, 0);
  std::vector<int> free_at(stages, 0);
  Timeline t;
  t.stages = stages;
  t.micro_batches = m;
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < stages; ++s) {
      while (next[s] < steps[s].size()) {
        const PipelineStep& step = steps[s][next[s]];
        const int mb = step.micro_batch;
        int ready;
        if (step.kind == PipelineStep::kForward) {
          ready = s == 0 ? 0 : forward_end[s - 1][mb];
        } else {
          ready = s == stages - 1 ? forward_end[s][mb] : backward_end[s + 1][mb];
        }
        if (ready < 0) break;  // its input is not there yet
        const int length = step.kind == PipelineStep::kForward ? 1 : backward_slots;
        const int start = std::max(free_at[s], ready);
        free_at[s] = start + length;
        (step.kind == PipelineStep::kForward ? forward_end : backward_end)[s][mb] = free_at[s];
        t.slots.push_back({s, start, length, step});
        t.length = std::max(t.length, free_at[s]);
        ++next[s];
        progress = true;
      }
    }
  }
  return t;
}

double TheoreticalBubble(int stages, int micro_batches) {
  return double(stages - 1) / double(micro_batches + stages - 1);
}

std::string ScheduleChart(const Timeline& timeline) {
  const int width = 1 + int(absl::StrCat(std::max(0, timeline.micro_batches - 1)).size());
  std::string out;
  for (int s = 0; s < timeline.stages; ++s) {
    std::vector<std::string> cells(timeline.length, std::string(width, '.'));
    for (const Timeline::Slot& slot : timeline.slots) {
      if (slot.stage != s) continue;
      std::string cell = absl::StrCat(slot.step.kind == PipelineStep::kForward ? "F" : "B",
                                      slot.step.micro_batch);
      cell.resize(width, ' ');
      for (int k = 0; k < slot.length; ++k) cells[slot.start + k] = cell;
    }
    out += absl::StrFormat("stage %d |", s);
    for (const std::string& cell : cells) out += " " + cell;
    out += absl::StrFormat(" | %3.0f%% idle\n", 100.0 * timeline.IdleFraction(s));
  }
  return out;
}

}  // namespace tally::parallel
