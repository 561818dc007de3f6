// The default text report (--report=text): the traffic of a step with a layer's rows
// folded into one, then the summary. --report=full prints every table (report.cc).
#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/parallel/pipeline_schedule.h"
#include "lab/report/report.h"
#include "lab/report/rows.h"
#include "lab/report/svg.h"

namespace tally::report {
namespace {

// A number of bytes in binary units, three figures: "94.4 MiB", "480 B".
std::string Figure(double value) {
  return value >= 99.95 ? absl::StrFormat("%.0f", value)
         : value >= 9.995 ? absl::StrFormat("%.1f", value)
                          : absl::StrFormat("%.2f", value);
}
std::string Human(double bytes) {
  const svg::Unit u = svg::UnitFor(bytes);
  if (u.bytes == 1) return absl::StrFormat("%.0f B", bytes);
  return absl::StrCat(Figure(bytes / u.bytes), " ", u.name);
}
// "94.4..98.1 MiB" (in the unit of the larger), or one figure where both read the same.
std::string HumanRange(double lo, double hi) {
  if (Human(lo) == Human(hi)) return Human(hi);
  const svg::Unit u = svg::UnitFor(hi);
  if (u.bytes == 1) return absl::StrFormat("%.0f..%.0f B", lo, hi);
  return absl::StrCat(Figure(lo / u.bytes), "..", Figure(hi / u.bytes), " ", u.name);
}

// A step's phases; set-up, evaluation and checkpoints come once a run, or every so often.
bool OfAStep(comm::Phase phase) {
  return phase == comm::Phase::kForward || phase == comm::Phase::kBackward ||
         phase == comm::Phase::kOptimizer || phase == comm::Phase::kOther;
}

// "layer12.attn" -> (12, "attn"); false for a scope of no layer.
bool LayerScope(const std::string& scope, int* layer, std::string* part) {
  if (!absl::StartsWith(scope, "layer")) return false;
  const size_t dot = scope.find('.');
  if (dot == std::string::npos || dot == 5) return false;
  if (!absl::SimpleAtoi(scope.substr(5, dot - 5), layer)) return false;
  *part = scope.substr(dot + 1);
  return true;
}

// One row of the folded table: the rows of every layer under one group, op, algorithm and
// phase, or a row of no layer as it is.
struct FoldedKey {
  std::string group;
  comm::Primitive primitive;
  comm::Algorithm algorithm;
  comm::Phase phase;
  bool of_layers;      // the rows of a layer, folded
  std::string scope;   // the row's scope where it is of no layer
  auto operator<=>(const FoldedKey&) const = default;
};
struct Folded {
  std::set<int> layers;
  std::set<std::string> parts;
  std::vector<int64_t> sent, exact, calls;  // per world rank, summed over the rows folded
  std::vector<bool> made;                   // the rank made one of the calls
  bool exact_known = true, exact_equal = true;
};

std::map<FoldedKey, Folded> Fold(const ReportInputs& in) {
  const comm::Nodes nodes = NodesOf(in);
  const size_t ranks = in.traffic.size();
  std::map<FoldedKey, Folded> folded;
  for (size_t r = 0; r < ranks; ++r) {
    std::map<comm::LedgerKey, comm::LinkBytes> sent = SentByKey(in, nodes, int(r));
    const comm::ExpectedCalls expected = RankExpectedCalls(in, int(r));
    for (const auto& [key, c] : in.traffic[r].calls()) {
      const int64_t s = sent[key].total();
      // A point-to-point row is its senders' (the receivers book the same key, sending 0).
      if (key.primitive == comm::Primitive::kSendRecv && s == 0) continue;
      int layer = 0;
      std::string part;
      const bool of_layer = LayerScope(key.label, &layer, &part);
      Folded& f = folded[{key.group, key.primitive, key.algorithm, key.phase, of_layer,
                          of_layer ? "" : key.label}];
      if (f.made.empty()) {
        f.sent.assign(ranks, 0), f.exact.assign(ranks, 0), f.calls.assign(ranks, 0);
        f.made.assign(ranks, false);
      }
      if (of_layer) f.layers.insert(layer), f.parts.insert(part);
      const int64_t exact = ExactSent(in, expected, key, int(r));
      f.exact_known &= exact >= 0;
      f.exact_equal &= exact == s;
      f.sent[r] += s, f.exact[r] += exact, f.calls[r] += c.calls;
      f.made[r] = true;
    }
  }
  return folded;
}

// "layer0-3.attn,mlp", "6 layers.dispatch" where they are not one run of layers.
std::string ScopeOf(const FoldedKey& key, const Folded& f) {
  if (!key.of_layers) return key.scope.empty() ? "-" : key.scope;
  const int first = *f.layers.begin(), last = *f.layers.rbegin();
  const std::string layers =
      last - first + 1 == int(f.layers.size())
          ? (first == last ? absl::StrCat("layer", first) : absl::StrCat("layer", first, "-", last))
          : absl::StrCat(f.layers.size(), " layers");
  return absl::StrCat(layers, ".", absl::StrJoin(f.parts, ","));
}

struct Spread {
  double lo = 0, hi = 0;
  bool any = false;
  void Add(double v) {
    lo = any ? std::min(lo, v) : v, hi = any ? std::max(hi, v) : v;
    any = true;
  }
};

const char* Mark(const Folded& f) { return !f.exact_known ? "-" : f.exact_equal ? "=" : "differs"; }

std::string CallsFigure(double calls) {
  return calls == std::round(calls) ? absl::StrCat(int64_t(calls)) : absl::StrFormat("%.2f", calls);
}

// The table of a step's traffic, then one line for each phase of the run.
std::string TrafficOfAStep(const ReportInputs& in, const std::map<FoldedKey, Folded>& folded) {
  const double steps = double(std::max<int64_t>(1, in.steps));
  std::string out = absl::StrFormat(
      "traffic per step, bytes sent per rank (min..max over ranks; exact: = where the exact "
      "formula\nequals the measured bytes on every rank; a layer's rows folded into one)\n"
      "%-9s %-14s %-4s %-9s %-24s %5s %18s %5s\n",
      "group", "op", "algo", "phase", "scope", "calls", "measured", "exact");
  struct Once {
    int rows = 0;
    Spread bytes;
    bool known = true, equal = true;
  };
  std::map<comm::Phase, Once> once;
  for (const auto& [key, f] : folded) {
    if (!OfAStep(key.phase)) {
      Once& o = once[key.phase];
      ++o.rows;
      o.known &= f.exact_known, o.equal &= f.exact_equal;
      continue;
    }
    Spread bytes;
    int64_t calls = 0;
    for (size_t r = 0; r < f.made.size(); ++r) {
      if (!f.made[r]) continue;
      bytes.Add(double(f.sent[r]) / steps);
      calls = std::max(calls, f.calls[r]);
    }
    out += absl::StrFormat("%-9s %-14s %-4s %-9s %-24s %5s %18s %5s\n", key.group,
                           comm::Name(key.primitive),
                           key.algorithm == comm::Algorithm::kHierarchical ? "hier"
                                                                          : comm::Name(key.algorithm),
                           comm::Name(key.phase), ScopeOf(key, f), CallsFigure(double(calls) / steps),
                           HumanRange(bytes.lo, bytes.hi), Mark(f));
  }
  for (const auto& [key, f] : folded) {
    if (key.algorithm != comm::Algorithm::kNative) continue;
    out += "algo native: MPI's own collectives, whose bytes are booked as the ring's, not observed\n";
    break;
  }
  // A phase of the run: the bytes a rank sent in it over the whole run.
  for (auto& [phase, o] : once) {
    std::vector<int64_t> per_rank(in.traffic.size(), 0);
    std::vector<bool> made(in.traffic.size(), false);
    for (const auto& [key, f] : folded) {
      if (key.phase != phase) continue;
      for (size_t r = 0; r < f.made.size(); ++r) {
        per_rank[r] += f.sent[r];
        made[r] = made[r] || f.made[r];
      }
    }
    for (size_t r = 0; r < per_rank.size(); ++r) {
      if (made[r]) o.bytes.Add(double(per_rank[r]));
    }
    out += absl::StrFormat("%s, over the run: %s a rank in %d row(s), exact %s\n",
                           phase == comm::Phase::kEval ? "evaluation" : comm::Name(phase),
                           HumanRange(o.bytes.lo, o.bytes.hi), o.rows,
                           !o.known ? "-" : o.equal ? "=" : "differs");
  }
  return out;
}

// Per group, the bytes a rank sends a step (min..max over the ranks in it).
std::string BytesByGroup(const ReportInputs& in, const std::map<FoldedKey, Folded>& folded) {
  const double steps = double(std::max<int64_t>(1, in.steps));
  const comm::Nodes nodes = NodesOf(in);
  struct Group {
    std::vector<int64_t> sent;
    std::vector<bool> made;
    bool known = true, equal = true;
  };
  std::map<std::string, Group> groups;
  for (const auto& [key, f] : folded) {
    if (!OfAStep(key.phase)) continue;
    Group& g = groups[key.group];
    if (g.sent.empty()) g.sent.assign(f.sent.size(), 0), g.made.assign(f.sent.size(), false);
    for (size_t r = 0; r < f.sent.size(); ++r) {
      g.sent[r] += f.sent[r];
      g.made[r] = g.made[r] || f.made[r];
    }
    g.known &= f.exact_known, g.equal &= f.exact_equal;
  }
  if (groups.empty()) return "bytes sent per rank per step: none (one rank talks to nobody)\n";
  std::string out = "bytes sent per rank per step, by group (exact: = as above)\n";
  for (const auto& [name, g] : groups) {
    Spread bytes;
    for (size_t r = 0; r < g.sent.size(); ++r) {
      if (g.made[r]) bytes.Add(double(g.sent[r]) / steps);
    }
    std::string across;
    if (nodes.count() > 1) {
      int64_t inter = 0, all = 0;
      for (size_t r = 0; r < in.traffic.size(); ++r) {
        const comm::LinkBytes b = in.traffic[r].SentByLink(
            nodes, [&](const comm::LedgerKey& k) { return k.group == name && OfAStep(k.phase); });
        inter += b.inter, all += b.total();
      }
      across = absl::StrFormat(", %.0f%% across nodes", all > 0 ? 100.0 * double(inter) / double(all) : 0.0);
    }
    out += absl::StrFormat("  %-9s %18s  exact %s%s\n", name, HumanRange(bytes.lo, bytes.hi),
                           !g.known ? "-" : g.equal ? "=" : "differs", across);
  }
  return out;
}

// The peaks by category over the ranks, the fullest rank, and whether the formula holds.
std::string MemoryLines(const ReportInputs& in) {
  if (in.memory.empty()) return "";
  const train::TrainOptions& o = in.options;
  const MemoryCategory categories[] = {MemoryCategory::kParams, MemoryCategory::kGrads,
                                       MemoryCategory::kOptimizer, MemoryCategory::kActivations,
                                       MemoryCategory::kComm};
  const char* names[] = {"params", "grads", "optimizer", "activations", "comm"};
  Spread spread[5];
  size_t most = 0;
  int differs = -1;
  for (size_t r = 0; r < in.memory.size(); ++r) {
    const MemoryLedger& m = in.memory[r];
    for (int c = 0; c < 5; ++c) spread[c].Add(double(m.peak(categories[c])));
    if (m.peak_total() > in.memory[most].peak_total()) most = r;
    const MemoryFormula f = PredictedMemory(o, int(r));
    const bool equal = f.params == m.peak(MemoryCategory::kParams) &&
                       f.grads == m.peak(MemoryCategory::kGrads) &&
                       f.optimizer == m.peak(MemoryCategory::kOptimizer) &&
                       (f.activations < 0 || f.activations == m.peak(MemoryCategory::kActivations));
    if (!equal && differs < 0) differs = int(r);
  }
  std::vector<std::string> parts;
  for (int c = 0; c < 5; ++c) {
    parts.push_back(absl::StrCat(names[c], " ", HumanRange(spread[c].lo, spread[c].hi)));
  }
  const double largest = double(in.memory[most].peak_total());
  std::string out = absl::StrFormat(
      "peak memory per rank (min..max over ranks; rank %d holds the most, %s)\n  %s\n  %s\n",
      most, Human(largest), absl::StrJoin(parts.begin(), parts.begin() + 3, ", "),
      absl::StrJoin(parts.begin() + 3, parts.end(), ", "));
  out += differs < 0 ? "  the memory formula equals the ledger's peaks on every rank\n"
                     : absl::StrFormat("  the memory formula differs from the ledger on rank %d "
                                       "(--report=full shows both)\n",
                                       differs);
  const train::GpuModel gpu = o.ModelledGpu();
  if (gpu.memory_gb > 0 && (!gpu.Holds(largest) || o.cluster.given() || o.dry_run)) {
    int over = 0;
    for (const MemoryLedger& m : in.memory) over += gpu.Holds(double(m.peak_total())) ? 0 : 1;
    const std::string cluster =
        o.cluster.given() ? o.cluster.name
                          : absl::StrCat(train::ClusterOptions::kDefaultCluster, " (the default)");
    out += absl::StrFormat("  rank %d %s; %d rank(s) over it\n", most, gpu.Fits(largest, cluster), over);
  }
  return out;
}

// The pipeline's bubble: the theory's, and the idlest stage's on each clock it has.
std::string BubbleLine(const ReportInputs& in, const std::vector<ReplayedRank>* modelled,
                       bool measured) {
  const train::TrainOptions& o = in.options;
  const bool interleaved = o.parallel.schedule == parallel::PipelineSchedule::kInterleaved;
  std::string line =
      absl::StrFormat("pipeline bubble (%s, pp=%d, m=%d; the idlest stage): theory %.3f",
                      parallel::Name(o.parallel.schedule), o.parallel.pp, o.accumulation_steps(),
                      parallel::TheoreticalBubble(o.parallel.pp, o.accumulation_steps(),
                                                  interleaved ? o.parallel.virtual_stages : 1));
  if (modelled != nullptr) {
    double most = 0;
    for (const ReplayedRank& r : *modelled) most = std::max(most, r.seconds > 0 ? r.idle_s / r.seconds : 0);
    absl::StrAppendFormat(&line, ", modelled %.3f", most);
  }
  if (measured && in.step_nanos.size() == in.traffic.size()) {
    double most = 0;
    for (size_t r = 0; r < in.step_nanos.size(); ++r) {
      if (in.step_nanos[r] > 0) {
        most = std::max(most, 1.0 - double(in.busy_nanos[r]) / double(in.step_nanos[r]));
      }
    }
    absl::StrAppendFormat(&line, ", measured %.3f", most);
  }
  return line + "\n";
}

// The step split of the slowest rank on both clocks, the bubble and the verdict.
std::string TimeLines(const ReportInputs& in) {
  const train::TrainOptions& o = in.options;
  std::string out;
  const absl::StatusOr<std::vector<ReplayedRank>>& modelled = ModelledRun(in);
  const bool replayed = modelled.ok() && !modelled->empty();
  if (replayed) {
    size_t slow = 0;
    for (size_t r = 0; r < modelled->size(); ++r) {
      if ((*modelled)[r].seconds > (*modelled)[slow].seconds) slow = r;
    }
    const ReplayedRank& t = (*modelled)[slow];
    out += absl::StrFormat(
        "step, modelled: %.4g ms on rank %zu = compute %.4g + exposed %.4g + idle %.4g\n",
        t.seconds * 1e3, slow, t.compute_s * 1e3, t.exposed_s * 1e3, t.idle_s * 1e3);
  }
  const bool measured = !o.dry_run && in.train_nanos.size() == in.traffic.size() && !in.traffic.empty();
  int worst = 0;
  double share = 0;
  if (measured) {
    int slow = 0;
    for (size_t r = 0; r < in.traffic.size(); ++r) {
      const RankTime t = TimeOf(in, int(r));
      if (t.step_ms > TimeOf(in, slow).step_ms) slow = int(r);
      const double s = t.step_ms > 0 ? t.exposed_ms / t.step_ms : 0;
      if (s > share) share = s, worst = int(r);
    }
    const RankTime t = TimeOf(in, slow);
    out += absl::StrFormat(
        "step, measured on this host: %.1f ms on rank %d = compute %.1f + exposed %.1f + idle "
        "%.1f\n",
        t.step_ms, slow, t.compute_ms, t.exposed_ms, t.idle_ms);
  }
  if (o.parallel.pp > 1) out += BubbleLine(in, replayed ? &*modelled : nullptr, measured);
  if (replayed) {
    const auto [rank, exposed] = WorstModelled(*modelled);
    out += absl::StrFormat(
        "verdict: %s on the modelled clock, %.0f%% of rank %d's step exposed (%s 30%%)\n"
        "  the cluster: %s\n",
        exposed > 0.30 ? "communication-bound" : "compute-bound", 100 * exposed, rank,
        exposed > 0.30 ? ">" : "<=", o.ModelledClusterName());
  }
  if (measured && in.traffic.size() > 1) {
    out += absl::StrFormat(
        "  measured on this host (its load moves it): %.0f%% exposed at most, on rank %d\n",
        100 * share, worst);
  }
  return out + SlowRankLine(in);
}

// With experts: the most loaded expert against the mean, over the layers.
std::string RoutingLine(const ReportInputs& in) {
  const int experts = in.options.model.n_experts;
  if (experts == 0 || in.steps == 0 ||
      in.expert_tokens.size() != size_t(in.options.model.n_layer) * experts) {
    return "";
  }
  double worst = 0;
  int at = 0;
  for (int l = 0; l < in.options.model.n_layer; ++l) {
    const auto first = in.expert_tokens.begin() + ptrdiff_t(l) * experts;
    double all = 0;
    for (int e = 0; e < experts; ++e) all += first[e];
    const double ratio = all > 0 ? *std::max_element(first, first + experts) * experts / all : 0;
    if (ratio > worst) worst = ratio, at = l;
  }
  return absl::StrFormat("routing: the busiest expert took %.3f x the mean (layer %d)\n", worst, at);
}

}  // namespace

namespace {

// With compression: how far it moved what the steps sent (train::StepStats's
// compression_error), its first, last and mean over the run's steps.
std::string CompressionLine(const ReportInputs& in) {
  const std::vector<double>& e = in.compression_errors;
  if (e.empty()) return "";
  double sum = 0;
  for (double x : e) sum += x;
  return absl::StrFormat(
      "compression error (sent against had, relative; each step's in --metrics_json): "
      "step %d %.3e, last %.3e, mean %.3e\n",
      in.first_step, e.front(), e.back(), sum / double(e.size()));
}

}  // namespace

std::string FormatSummaryReport(const ReportInputs& in) {
  const train::TrainOptions& o = in.options;
  const std::map<FoldedKey, Folded> folded = Fold(in);
  std::string out;
  if (!folded.empty()) out += TrafficOfAStep(in, folded) + "\n";
  if (o.cluster.given()) out += ModelledTable(in);
  const double params = double(o.model.NumParams());
  out +=
      absl::StrFormat("summary of %d step%s: dp=%d%s x tp=%d x pp=%d, zero=%d, %s, %s parameters\n",
                      in.steps, in.steps == 1 ? "" : "s", o.parallel.dp, o.CpWords(), o.parallel.tp,
                      o.parallel.pp, o.parallel.zero, train::PrecisionName(o.Precision().params),
                      params >= 1e9   ? absl::StrFormat("%.4g B", params / 1e9)
                      : params >= 1e6 ? absl::StrFormat("%.4g M", params / 1e6)
                                      : absl::StrCat(o.model.NumParams()));
  out += BytesByGroup(in, folded);
  out += CompressionLine(in);
  out += MemoryLines(in);
  out += TimeLines(in);
  out += ContextLines(in);
  out += RoutingLine(in);
  out += "--report=full prints every table; --traffic_json and --report=csv the exact bytes\n";
  return out;
}

}  // namespace tally::report
