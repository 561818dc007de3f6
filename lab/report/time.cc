// The report's time on its two clocks: measured (each rank's step split into compute,
// exposed and hidden communication and the pipeline bubble; the pipeline's stages) and
// modelled (the last step replayed on a cluster); who waited for whom on both; the seed's
// verdict, from the model.
#include "lab/report/report.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/parallel/context_parallel.h"
#include "core/parallel/pipeline_schedule.h"
#include "core/runtime/comm/ledger/names.h"

namespace tally::report {

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

const absl::StatusOr<std::vector<ReplayedRank>>& ModelledRun(const ReportInputs& in) {
  if (in.modelled == nullptr) {
    std::vector<const Timeline*> timelines;
    for (const comm::TrafficLedger& ledger : in.traffic) timelines.push_back(&ledger.timeline());
    in.modelled = std::make_shared<const absl::StatusOr<std::vector<ReplayedRank>>>(
        Replay(timelines, NodesOf(in), in.options.cluster.links, in.options.ModelledGpu()));
  }
  return *in.modelled;
}

std::vector<MeasuredWaits> MeasuredRun(const ReportInputs& in) {
  const train::TrainOptions& o = in.options;
  if (o.dry_run || (o.placement.backend != train::Backend::kThreads && NodesOf(in).count() > 1)) {
    return {};
  }
  std::vector<const Timeline*> timelines;
  for (const comm::TrafficLedger& ledger : in.traffic) timelines.push_back(&ledger.timeline());
  return MeasureWaits(timelines);
}

std::pair<int, double> WorstModelled(const std::vector<ReplayedRank>& ranks) {
  int worst = 0;
  double share = 0;
  for (size_t r = 0; r < ranks.size(); ++r) {
    const double s = ranks[r].seconds > 0 ? ranks[r].exposed_s / ranks[r].seconds : 0;
    if (s > share) share = s, worst = int(r);
  }
  return {worst, share};
}

RunTimes TimesOf(const ReportInputs& in) {
  RunTimes t;
  for (size_t r = 0; r < in.train_nanos.size(); ++r) {
    const RankTime rank = TimeOf(in, int(r));
    t.measured_step_ms = std::max(t.measured_step_ms, rank.step_ms);
    if (rank.step_ms > 0) t.measured_exposed = std::max(t.measured_exposed, rank.exposed_ms / rank.step_ms);
  }
  const absl::StatusOr<std::vector<ReplayedRank>>& modelled = ModelledRun(in);
  if (!modelled.ok() || modelled->empty()) {
    t.modelled_step_ms = t.modelled_exposed = std::nan("");
    return t;
  }
  for (const ReplayedRank& rank : *modelled) {
    t.modelled_step_ms = std::max(t.modelled_step_ms, rank.seconds * 1e3);
  }
  t.modelled_exposed = WorstModelled(*modelled).second;
  return t;
}

std::string RepeatsTable(const train::TrainOptions& o, const std::vector<RunTimes>& runs) {
  std::string out = absl::StrFormat(
      "\n--repeat=%d: the same run %d times; min, median and max over them (the bytes and the "
      "modelled clock are the run's own, the same every time; the measured clock is this host's "
      "and varies)\n%-44s %10s %10s %10s\n",
      o.output.repeat, int(runs.size()), "", "min", "median", "max");
  // Measured figures to two significant figures (the host's noise is larger than that),
  // modelled ones to `decimals`.
  auto row = [&](const std::string& what, double RunTimes::*field, double scale, bool measured,
                 int decimals) {
    std::vector<double> v;
    for (const RunTimes& t : runs) v.push_back(t.*field * scale);
    if (v.empty() || std::isnan(v[0])) return;
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    const double median = n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
    auto shown = [measured, decimals](double x) {
      if (!measured || x == 0) return absl::StrFormat("%.*f", measured ? 0 : decimals, x);
      const int magnitude = int(std::floor(std::log10(std::abs(x))));
      const double unit = std::pow(10.0, magnitude - 1);
      return absl::StrFormat("%.*f", std::max(0, 1 - magnitude), std::round(x / unit) * unit);
    };
    out += absl::StrFormat("%-44s %10s %10s %10s\n", what, shown(v.front()), shown(median),
                           shown(v.back()));
  };
  row("measured step ms (this host, slowest rank)", &RunTimes::measured_step_ms, 1, true, 0);
  row("measured exposed % (worst rank)", &RunTimes::measured_exposed, 100, true, 0);
  const std::string cluster = absl::StrCat("(", o.ModelledClusterName(), ")");
  row(absl::StrCat("modelled step ms ", o.cluster.given() ? cluster : "(the default cluster)"),
      &RunTimes::modelled_step_ms, 1, false, 4);
  row("modelled exposed % (worst rank)", &RunTimes::modelled_exposed, 100, false, 1);
  return out;
}

bool Oversubscribed(const ReportInputs& in) { return in.cores > 0 && in.ranks_here > in.cores; }

std::string TimeTable(const ReportInputs& in) {
  const bool cpu = Oversubscribed(in) && in.cpu_nanos.size() == in.train_nanos.size();
  std::string out = absl::StrFormat(
      "\nmeasured on this host (wall clock), ms per step: the step; communication exposed (the "
      "rank waited in a collective, or for a send or receive) and hidden (a transfer that ran "
      "while the rank computed, within compute); idle at a pipeline stage boundary, waiting for "
      "the neighbour stage (the bubble); the rest, compute%s\n"
      "%-6s %10s %10s %10s %10s %10s %10s %8s%s\n",
      cpu ? absl::StrFormat("; %d ranks on %d cores: a rank also waits for a core, and cpu is "
                            "its thread's CPU time (step - cpu: waiting for a core or a peer)",
                            in.ranks_here, in.cores)
          : "",
      "rank", "step", "compute", "exposed", "hidden", "idle", "exposed %", "idle %",
      cpu ? absl::StrFormat(" %10s", "cpu") : "");
  const double steps = double(std::max<int64_t>(1, in.steps));
  for (size_t r = 0; r < in.train_nanos.size(); ++r) {
    const RankTime t = TimeOf(in, int(r));
    auto share = [&](double ms) { return t.step_ms > 0 ? 100 * ms / t.step_ms : 0.0; };
    out += absl::StrFormat("%-6d %10.1f %10.1f %10.1f %10.1f %10.1f %9.0f%% %7.0f%%%s\n", r,
                           t.step_ms, t.compute_ms, t.exposed_ms, t.hidden_ms, t.idle_ms,
                           share(t.exposed_ms), share(t.idle_ms),
                           cpu ? absl::StrFormat(" %10.1f", double(in.cpu_nanos[r]) / 1e6 / steps)
                               : "");
  }
  return out;
}

namespace {

// Whether a per-rank table shows rank r of `ranks`: every rank of a small run; of a large
// one `named` (the slowest, the worst) and the first of each stage.
bool Shown(const train::TrainOptions& o, size_t ranks, int r, int named) {
  const parallel::GridCoordinates at = o.topology().Of(r);
  return ranks <= 16 || r == named || (at.dp == 0 && at.tp == 0);
}

}  // namespace

std::string ReplayTable(const ReportInputs& in) {
  const train::TrainOptions& o = in.options;
  const absl::StatusOr<std::vector<ReplayedRank>>& replayed = ModelledRun(in);
  if (!replayed.ok()) return absl::StrCat("\n", replayed.status().message(), "\n");
  const comm::Nodes nodes = NodesOf(in);
  std::string out = absl::StrFormat(
      "\nmodelled on the cluster %s: %s a GPU, %d GPUs a node; inside %s, across %s. "
      "ms of the last step, every rank's timeline replayed (compute; exposed: waiting in a "
      "collective or a send; idle: waiting for a pipeline neighbour)\n"
      "%-8s %12s %12s %12s %12s %10s\n",
      o.ModelledClusterName(), o.ModelledGpu().Describe(), nodes.gpus_per_node(),
      comm::Describe(o.cluster.links.intra), comm::Describe(o.cluster.links.inter), "rank", "step",
      "compute", "exposed", "idle", "exposed %");
  double slowest = 0;
  int slowest_rank = 0;
  for (size_t r = 0; r < replayed->size(); ++r) {
    const ReplayedRank& x = (*replayed)[r];
    if (x.seconds > slowest) slowest = x.seconds, slowest_rank = int(r);
  }
  for (size_t r = 0; r < replayed->size(); ++r) {
    const ReplayedRank& x = (*replayed)[r];
    if (!Shown(o, replayed->size(), int(r), slowest_rank)) continue;
    out += absl::StrFormat("%-8d %12.3f %12.3f %12.3f %12.3f %9.0f%%\n", r, x.seconds * 1e3,
                           x.compute_s * 1e3, x.exposed_s * 1e3, x.idle_s * 1e3,
                           x.seconds > 0 ? 100 * x.exposed_s / x.seconds : 0.0);
  }
  out += absl::StrFormat("predicted step: %.3f ms (rank %d, the slowest)\n", slowest * 1e3,
                         slowest_rank);
  return out;
}

namespace {

// The peer waited for longest, "-" for none.
std::string PeerWords(const WaitedFor& w) {
  const int peer = w.Most();
  return peer < 0 ? "-" : absl::StrCat(peer);
}

// What `w` waited for `peer`.
double WaitedOn(const WaitedFor& w, int peer) {
  const auto it = w.by_peer.find(peer);
  return it != w.by_peer.end() ? it->second : 0.0;
}

}  // namespace

std::string WaitsTable(const ReportInputs& in) {
  const train::TrainOptions& o = in.options;
  const absl::StatusOr<std::vector<ReplayedRank>>& modelled = ModelledRun(in);
  if (!modelled.ok()) return "";
  const std::vector<MeasuredWaits> measured = MeasuredRun(in);
  const bool both = measured.size() == modelled->size();
  std::string out = absl::StrFormat(
      "\nwho waited for whom in the last step, ms: exposed communication = waiting for the peer "
      "that arrived last at the call + moving bytes; 'for': the peer waited for longest\n"
      "%-8s %12s %12s %6s%s\n",
      "rank", "modelled exp", "waiting", "for",
      both ? absl::StrFormat(" %12s %12s %6s", "measured exp", "waiting", "for") : "");
  const int worst = WorstModelled(*modelled).first;
  for (size_t r = 0; r < modelled->size(); ++r) {
    if (!Shown(o, modelled->size(), int(r), worst) && int(r) != o.cluster.slow_rank) continue;
    const ReplayedRank& m = (*modelled)[r];
    out += absl::StrFormat("%-8d %12.4f %12.4f %6s", r, m.exposed_s * 1e3, m.waited.seconds * 1e3,
                           PeerWords(m.waited));
    if (both) {
      out += absl::StrFormat(" %12.3f %12.3f %6s", measured[r].exposed_s * 1e3,
                             measured[r].waited.seconds * 1e3, PeerWords(measured[r].waited));
    }
    out += "\n";
  }
  return out + SlowRankLine(in);
}

std::string SlowRankLine(const ReportInputs& in) {
  const train::TrainOptions& o = in.options;
  const absl::StatusOr<std::vector<ReplayedRank>>& modelled = ModelledRun(in);
  if (!modelled.ok() || o.cluster.slow_rank < 0 || size_t(o.cluster.slow_rank) >= modelled->size()) {
    return "";
  }
  const std::vector<MeasuredWaits> measured = MeasuredRun(in);
  const bool both = measured.size() == modelled->size();
  // What the other ranks waited for the slow one, summed over them.
  double on_model = 0, on_host = 0;
  for (size_t r = 0; r < modelled->size(); ++r) {
    on_model += WaitedOn((*modelled)[r].waited, o.cluster.slow_rank);
    if (both) on_host += WaitedOn(measured[r].waited, o.cluster.slow_rank);
  }
  return absl::StrFormat(
      "--slow_rank=%d:%g: the other ranks waited %.4f ms for rank %d on the modelled clock%s\n",
      o.cluster.slow_rank, o.cluster.slow_ms, on_model * 1e3, o.cluster.slow_rank,
      both ? absl::StrFormat(", %.3f ms on the measured one", on_host * 1e3) : "");
}

std::string Verdict(const ReportInputs& in) {
  const absl::StatusOr<std::vector<ReplayedRank>>& modelled = ModelledRun(in);
  if (!modelled.ok() || modelled->empty()) return "";
  const auto [worst, share] = WorstModelled(*modelled);
  const ReplayedRank& rank = (*modelled)[size_t(worst)];
  const double percent = 100 * share;
  const std::string clock = absl::StrCat("on the modelled clock, ", in.options.ModelledClusterName());
  std::string out;
  if (share <= 0.30) {
    out = absl::StrFormat(
        "compute-bound %s: communication exposed %.0f%% of the step at most (rank %d; the seed's "
        "test: more than 30%% is communication-bound)\n",
        clock, percent, worst);
  } else {
    // That rank's largest exposed calls.
    std::map<std::string, double> calls;
    for (const ReplaySpan& span : rank.spans) {
      if (!span.compute && !span.idle) calls[span.name] += span.end - span.start;
    }
    std::vector<std::pair<double, std::string>> rows;
    for (const auto& [name, s] : calls) {
      if (s > 0) rows.push_back({s, name});
    }
    std::sort(rows.rbegin(), rows.rend());
    std::vector<std::string> largest;
    for (size_t i = 0; i < rows.size() && i < 3; ++i) {
      largest.push_back(absl::StrFormat("%s (%.4f ms)", rows[i].second, rows[i].first * 1e3));
    }
    const int peer = rank.waited.Most();
    out = absl::StrFormat(
        "communication-bound %s: communication exposed %.0f%% of the step on rank %d (> 30%%, the "
        "seed's test): %.4f ms waiting for %s, %.4f ms moving bytes; its largest exposed calls: "
        "%s\n",
        clock, percent, worst, rank.waited.seconds * 1e3,
        peer >= 0 ? absl::StrCat("late peers (most for rank ", peer, ")") : "late peers",
        (rank.exposed_s - rank.waited.seconds) * 1e3, absl::StrJoin(largest, ", "));
  }
  return out + MeasuredVerdict(in);
}

std::string MeasuredVerdict(const ReportInputs& in) {
  if (in.options.dry_run || in.train_nanos.size() != in.traffic.size() || in.traffic.empty()) {
    return "";
  }
  // The rank with the largest share of its step exposed.
  int worst = 0;
  double share = 0;
  for (size_t r = 0; r < in.traffic.size(); ++r) {
    const RankTime t = TimeOf(in, int(r));
    const double s = t.step_ms > 0 ? t.exposed_ms / t.step_ms : 0;
    if (s > share) share = s, worst = int(r);
  }
  const std::string cores =
      Oversubscribed(in) ? absl::StrFormat(", %d ranks on %d cores", in.ranks_here, in.cores) : "";
  std::string out = absl::StrFormat(
      "measured on this host (its load moves it; the verdict is the model's): communication "
      "exposed %.0f%% of the step %s rank %d%s",
      100 * share, share > 0.30 ? "on" : "at most, on", worst, cores);
  if (share <= 0.30) return out + "\n";
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
  return absl::StrCat(out, "; its largest exposed rows per step: ", absl::StrJoin(largest, ", "),
                      "\n");
}

std::string PipelineTable(const ReportInputs& in) {
  const train::TrainOptions& o = in.options;
  const int m = o.accumulation_steps(), v = o.parallel.virtual_stages;
  const bool interleaved = o.parallel.schedule == parallel::PipelineSchedule::kInterleaved;
  // Each stage's layers, "0-1", or its chunks' under the interleaved schedule, "0-0,2-2".
  std::vector<std::string> layers(size_t(o.parallel.pp));
  size_t width = 8;
  for (int s = 0; s < o.parallel.pp; ++s) {
    std::vector<std::string> chunks;
    for (const model::LayerRange& chunk : o.StageModelChunks(s)) {
      chunks.push_back(absl::StrCat(chunk.begin, "-", chunk.end - 1));
    }
    layers[size_t(s)] = absl::StrJoin(chunks, ",");
    width = std::max(width, layers[size_t(s)].size());
  }
  std::string out = absl::StrFormat(
      "\npipeline (%s, %d stages%s, %d micro-batches of %d%s): time per step; the bubble is the "
      "idle share of the schedule's time, theory %s = %.3f\n%-6s %-*s %10s %10s %8s\n",
      parallel::Name(o.parallel.schedule), o.parallel.pp,
      interleaved ? absl::StrCat(" x ", v, " chunks") : "", m, o.training.micro_batch_size,
      o.parallel.recompute ? ", recompute" : "", interleaved ? "(N-1)/(v*m+N-1)" : "(N-1)/(m+N-1)",
      parallel::TheoreticalBubble(o.parallel.pp, m, interleaved ? v : 1), "stage", int(width),
      "layers", "busy ms", "idle ms", "bubble");
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

// Context parallelism: each cp rank's share of attention's work (its pieces' visible
// (query, key) pairs, ContextAttentionWork) against the least, so that zigzag's balance
// shows; each rank's compute on the modelled clock; and of the ring's sends the share its
// blocks hid.
std::string ContextLines(const ReportInputs& in) {
  const train::TrainOptions& o = in.options;
  const int cp = o.parallel.cp;
  if (cp <= 1) return "";
  const int heads = o.model.n_head / o.parallel.tp;
  std::vector<int64_t> work;
  for (int r = 0; r < cp; ++r) {
    work.push_back(parallel::ContextAttentionWork(o.parallel.cp_comm, o.parallel.cp_load_balance,
                                                  cp, r, o.model.seq_len, heads));
  }
  const double least = double(*std::min_element(work.begin(), work.end()));
  std::string shares;
  for (int r = 0; r < cp && r < 8; ++r) {
    absl::StrAppendFormat(&shares, "%s%.2f", r > 0 ? " " : "", double(work[size_t(r)]) / least);
  }
  if (cp > 8) absl::StrAppendFormat(&shares, " .. %.2f", double(work.back()) / least);
  std::string out = absl::StrFormat("cp attention work by cp rank (%s, %s), x the least: %s\n",
                                    parallel::Name(o.parallel.cp_comm),
                                    parallel::Name(o.parallel.cp_load_balance), shares);
  const absl::StatusOr<std::vector<ReplayedRank>>& modelled = ModelledRun(in);
  if (!modelled.ok() || modelled->empty()) return out;
  double lo = 1e300, hi = 0, sent = 0, exposed = 0;
  for (const ReplayedRank& r : *modelled) {
    lo = std::min(lo, r.compute_s);
    hi = std::max(hi, r.compute_s);
    const auto s = r.p2p_sent_s.find(comm::group::kCp);
    const auto x = r.p2p_exposed_s.find(comm::group::kCp);
    if (s != r.p2p_sent_s.end() && s->second > sent) {
      sent = s->second;
      exposed = x != r.p2p_exposed_s.end() ? x->second : 0;
    }
  }
  absl::StrAppendFormat(&out, "  modelled: compute %.4g..%.4g ms a rank", lo * 1e3, hi * 1e3);
  if (sent > 0) {  // the ring: its sends against the waits on them, on the busiest sender
    absl::StrAppendFormat(&out, "; ring sends %.4g ms, %.0f%% hidden by blocks", sent * 1e3,
                          100 * std::clamp(1 - exposed / sent, 0.0, 1.0));
  }
  return out + "\n";
}

}  // namespace tally::report
