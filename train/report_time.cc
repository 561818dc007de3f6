// The report's time: each rank's step split into compute, exposed and hidden
// communication and the pipeline bubble; the seed's verdict; the pipeline's stages.
#include "train/report.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "parallel/pipeline_schedule.h"

namespace tally::train {

RankTime TimeOf(const ReportInputs& in, int r) {
  const double steps = double(std::max<int64_t>(1, in.steps));
  double exposed = 0, hidden = 0, idle = 0;
  for (const auto& [key, c] : in.traffic[r].calls()) {
    const comm::Phase p = key.phase;
    const bool training = p == comm::Phase::kForward || p == comm::Phase::kBackward ||
                          p == comm::Phase::kOptimizer || p == comm::Phase::kOther;
    if (!training) continue;
    // A call's wait is exposed (or, at a pipeline boundary, the bubble); the rest of its
    // time it ran while the rank computed.
    (parallel::IsPipelineBoundary(key) ? idle : exposed) += c.blocked_seconds;
    hidden += std::max(0.0, c.seconds - c.blocked_seconds);
  }
  RankTime t;
  t.step_ms = double(in.train_nanos[size_t(r)]) / 1e6 / steps;
  t.idle_ms = std::min(t.step_ms, idle * 1e3 / steps);
  t.exposed_ms = std::min(t.step_ms - t.idle_ms, exposed * 1e3 / steps);
  t.compute_ms = t.step_ms - t.exposed_ms - t.idle_ms;
  t.hidden_ms = std::min(t.compute_ms, hidden * 1e3 / steps);
  return t;
}

std::string TimeTable(const ReportInputs& in) {
  std::string out = absl::StrFormat(
      "\ntime per step, ms: the step; communication exposed (the rank waited in a collective, "
      "or for a send or receive) and hidden (a transfer that ran while the rank computed, "
      "within compute); idle at a pipeline stage boundary, waiting for the neighbour stage "
      "(the bubble); the rest, compute\n%-6s %10s %10s %10s %10s %10s %10s %8s\n",
      "rank", "step", "compute", "exposed", "hidden", "idle", "exposed %", "idle %");
  for (size_t r = 0; r < in.train_nanos.size(); ++r) {
    const RankTime t = TimeOf(in, int(r));
    auto share = [&](double ms) { return t.step_ms > 0 ? 100 * ms / t.step_ms : 0.0; };
    out += absl::StrFormat("%-6d %10.1f %10.1f %10.1f %10.1f %10.1f %9.0f%% %7.0f%%\n", r,
                           t.step_ms, t.compute_ms, t.exposed_ms, t.hidden_ms, t.idle_ms,
                           share(t.exposed_ms), share(t.idle_ms));
  }
  return out + Verdict(in);
}

std::string Verdict(const ReportInputs& in) {
  if (in.train_nanos.size() != in.traffic.size() || in.traffic.empty()) return "";
  // The rank with the largest share of its step exposed.
  int worst = 0;
  double share = 0;
  for (size_t r = 0; r < in.traffic.size(); ++r) {
    const RankTime t = TimeOf(in, int(r));
    const double s = t.step_ms > 0 ? t.exposed_ms / t.step_ms : 0;
    if (s > share) {
      share = s;
      worst = int(r);
    }
  }
  const double percent = 100 * share;
  if (share <= 0.30) {
    return absl::StrFormat("compute-bound: communication exposed %.0f%% of the step at most "
                           "(rank %d; the seed's test: more than 30%% is communication-bound)\n",
                           percent, worst);
  }
  // That rank's largest exposed rows.
  std::vector<std::pair<double, std::string>> rows;
  for (const auto& [key, c] : in.traffic[size_t(worst)].calls()) {
    if (parallel::IsPipelineBoundary(key) || key.phase == comm::Phase::kSetup ||
        key.phase == comm::Phase::kEval || key.phase == comm::Phase::kCheckpoint) {
      continue;
    }
    rows.push_back({c.blocked_seconds, absl::StrCat(key.group, " ", comm::Name(key.primitive), " ",
                                                    comm::Name(key.phase),
                                                    key.label.empty() ? "" : " " + key.label)});
  }
  std::sort(rows.rbegin(), rows.rend());
  std::vector<std::string> largest;
  const double steps = double(std::max<int64_t>(1, in.steps));
  for (size_t i = 0; i < rows.size() && i < 3; ++i) {
    largest.push_back(absl::StrFormat("%s (%.1f ms)", rows[i].second, rows[i].first * 1e3 / steps));
  }
  return absl::StrFormat("communication-bound: communication exposed %.0f%% of the step on rank %d "
                         "(> 30%%, the seed's test); its largest exposed rows per step: %s\n",
                         percent, worst, absl::StrJoin(largest, ", "));
}

std::string PipelineTable(const ReportInputs& in) {
  const TrainOptions& o = in.options;
  const int m = o.accumulation_steps(), v = o.virtual_stages;
  const bool interleaved = o.schedule == parallel::PipelineSchedule::kInterleaved;
  // Each stage's layers, "0-1", or its chunks' under the interleaved schedule, "0-0,2-2".
  std::vector<std::string> layers(size_t(o.pp));
  size_t width = 8;
  for (int s = 0; s < o.pp; ++s) {
    std::vector<std::string> chunks;
    for (const model::LayerRange& chunk : o.StageChunks(s)) {
      chunks.push_back(absl::StrCat(chunk.begin, "-", chunk.end - 1));
    }
    layers[size_t(s)] = absl::StrJoin(chunks, ",");
    width = std::max(width, layers[size_t(s)].size());
  }
  std::string out = absl::StrFormat(
      "\npipeline (%s, %d stages%s, %d micro-batches of %d%s): time per step; the bubble is the "
      "idle share of the schedule's time, theory %s = %.3f\n%-6s %-*s %10s %10s %8s\n",
      parallel::Name(o.schedule), o.pp, interleaved ? absl::StrCat(" x ", v, " chunks") : "", m,
      o.micro_batch_size, o.recompute ? ", recompute" : "",
      interleaved ? "(N-1)/(v*m+N-1)" : "(N-1)/(m+N-1)",
      parallel::TheoreticalBubble(o.pp, m, interleaved ? v : 1), "stage", int(width), "layers",
      "busy ms", "idle ms", "bubble");
  const double steps = double(std::max<int64_t>(1, in.steps));
  for (int r = 0; r < int(in.step_nanos.size()); ++r) {
    const parallel::GridCoordinates at = o.topology().Of(r);
    if (at.dp != 0 || at.tp != 0) continue;  // one row per stage
    const double step_ms = double(in.step_nanos[r]) / 1e6 / steps;
    const double busy_ms = double(in.busy_nanos[r]) / 1e6 / steps;
    out += absl::StrFormat("%-6d %-*s %10.1f %10.1f %8.3f\n", at.pp, int(width),
                           layers[size_t(at.pp)], busy_ms, step_ms - busy_ms,
                           step_ms > 0 ? 1.0 - busy_ms / step_ms : 0.0);
  }
  return out;
}

}  // namespace tally::train
