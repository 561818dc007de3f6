#include "lab/report/report.h"

#include <algorithm>
#include <limits>
#include <map>
#include <span>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/parallel/pipeline_schedule.h"
#include "lab/report/replay.h"
#include "lab/report/rows.h"
#include "core/runtime/comm/ledger/exact_traffic.h"

namespace tally::report {

int GroupSize(const train::TrainOptions& o, const std::string& group) {
  if (group == "dp") return o.parallel.dp * o.parallel.cp;
  if (group == "cp") return o.parallel.cp;
  if (group == "tp") return o.parallel.tp;
  if (group == "pp") return o.parallel.pp;
  if (group == "embedding") return 2;
  return o.world();
}

double BusBandwidth(const train::TrainOptions& o, const comm::LedgerKey& key,
                    const comm::CallTotals& c) {
  if (c.seconds <= 0 || key.primitive == comm::Primitive::kSendRecv) return 0;
  return double(c.payload_bytes) / c.seconds / 1e9 * comm::BusFactor(key.primitive, GroupSize(o, key.group));
}

bool BytesAsRing(const comm::LedgerKey& key) { return key.algorithm == comm::Algorithm::kNative; }

std::string Range(int64_t lo, int64_t hi) {
  return lo == hi ? absl::StrCat(lo) : absl::StrCat(lo, "..", hi);
}

const char* AlgoColumn(comm::Algorithm a) {
  return a == comm::Algorithm::kHierarchical ? "hier" : comm::Name(a);
}

std::map<comm::LedgerKey, comm::LinkBytes> SentByKey(const ReportInputs& in, const comm::Nodes& nodes,
                                                     int r) {
  std::map<comm::LedgerKey, comm::LinkBytes> sent;
  for (const auto& [key_peer, t] : in.traffic[r].transfers()) {
    sent[key_peer.first] += nodes.Split(r, key_peer.second, t.bytes_sent);
  }
  return sent;
}

comm::Nodes NodesOf(const ReportInputs& in) {
  return in.nodes != nullptr ? *in.nodes : comm::Nodes::One(int(in.traffic.size()));
}

std::map<comm::LedgerKey, Row> Rows(const ReportInputs& in) {
  std::map<comm::LedgerKey, Row> rows;
  const comm::Nodes nodes = NodesOf(in);
  for (size_t r = 0; r < in.traffic.size(); ++r) {
    std::map<comm::LedgerKey, comm::LinkBytes> sent = SentByKey(in, nodes, int(r));
    const comm::ExpectedCalls expected = RankExpectedCalls(in, int(r));
    for (const auto& [key, c] : in.traffic[r].calls()) {
      Row& row = rows[key];
      row.calls = std::max(row.calls, c.calls);
      int64_t s = sent[key].total();
      // A point-to-point row is its senders' (the receivers book the same key, sending 0).
      if (key.primitive == comm::Primitive::kSendRecv && s == 0) continue;
      row.sent_min = std::min(row.sent_min, s);
      row.sent_max = std::max(row.sent_max, s);
      row.inter_min = std::min(row.inter_min, sent[key].inter);
      row.inter_max = std::max(row.inter_max, sent[key].inter);
      int64_t exact = ExactSent(in, expected, key, int(r));
      row.exact_known &= exact >= 0;
      row.exact_min = std::min(row.exact_min, exact);
      row.exact_max = std::max(row.exact_max, exact);
      const double busbw = BusBandwidth(in.options, key, c);
      row.busbw_min = std::min(row.busbw_min, busbw);
      row.busbw_max = std::max(row.busbw_max, busbw);
    }
  }
  return rows;
}

std::string BandwidthRange(const Row& row) {
  if (row.busbw_max <= 0) return "-";
  const std::string lo = absl::StrFormat("%.2f", row.busbw_min), hi = absl::StrFormat("%.2f", row.busbw_max);
  return lo == hi ? lo : absl::StrCat(lo, "..", hi);
}

std::string ReportCsv(const ReportInputs& in) {
  std::string out =
      "group,op,algorithm,phase,scope,calls,sent_min,sent_max,sent_inter_min,sent_inter_max,"
      "exact_min,exact_max,seed,measured_over_seed,busbw_gbps_min,busbw_gbps_max,bytes_as_ring\n";
  for (const auto& [key, row] : Rows(in)) {
    const int64_t seed = SeedSent(in, key);
    out += absl::StrFormat("%s,%s,%s,%s,%s,%d,%d,%d,%d,%d,%s,%s,%s,%s,%.4f,%.4f,%d\n", key.group,
                           comm::Name(key.primitive), comm::Name(key.algorithm),
                           comm::Name(key.phase), key.label, row.calls, row.sent_min, row.sent_max,
                           row.inter_min, row.inter_max,
                           row.exact_known ? absl::StrCat(row.exact_min) : "",
                           row.exact_known ? absl::StrCat(row.exact_max) : "",
                           seed >= 0 ? absl::StrCat(seed) : "",
                           seed > 0 ? absl::StrFormat("%.6f", double(row.sent_max) / double(seed)) : "",
                           row.busbw_min, row.busbw_max, BytesAsRing(key) ? 1 : 0);
  }
  return out;
}

namespace {

// "fp32", "bf16 (fp32 master weights)", and the gradients' types where they differ.
std::string PrecisionWords(const train::TrainOptions& o) {
  const model::Precision p = o.Precision();
  std::string words = train::PrecisionName(p.params);
  if (p.master_weights()) words += " (fp32 master weights)";
  if (p.grads != p.params) absl::StrAppend(&words, ", gradients ", train::PrecisionName(p.grads));
  if (p.grad_comm != p.grads) {
    absl::StrAppend(&words, ", reduced as ", train::PrecisionName(p.grad_comm));
  }
  return words;
}

}  // namespace

std::string LinkTable(const ReportInputs& in) {
  const comm::Nodes nodes = NodesOf(in);
  std::string out = absl::StrFormat(
      "bytes sent per rank by link (%d nodes: %s)\n%-6s %5s %22s %22s %8s\n", nodes.count(),
      nodes.Describe(), "rank", "node", "intra-node", "inter-node", "inter %");
  for (size_t r = 0; r < in.traffic.size(); ++r) {
    const comm::LinkBytes b =
        in.traffic[r].SentByLink(nodes, [](const comm::LedgerKey&) { return true; });
    out += absl::StrFormat("%-6d %5d %22d %22d %7.0f%%\n", r, nodes.node(int(r)), b.intra, b.inter,
                           b.total() > 0 ? 100.0 * double(b.inter) / double(b.total()) : 0.0);
  }
  return out;
}

std::string ModelledTable(const ReportInputs& in) {
  const train::TrainOptions& o = in.options;
  const comm::Nodes nodes = NodesOf(in);
  const double steps = double(std::max<int64_t>(1, in.steps));
  // Per row, the busiest rank's time (a collective ends when its slowest rank does).
  std::map<comm::LedgerKey, comm::LinkSeconds> rows;
  for (size_t r = 0; r < in.traffic.size(); ++r) {
    for (const auto& [key, s] : in.traffic[r].ModelledSeconds(nodes, o.cluster.links)) {
      if (key.phase == comm::Phase::kSetup) continue;  // once a run, not a step's
      if (s.total() > rows[key].total()) rows[key] = s;
    }
  }
  std::string out = absl::StrFormat(
      "time on a modelled cluster, ms per step (the busiest rank of each row; per message: "
      "inside a node %s, across nodes %s)\n%-9s %-15s %-10s %-17s %12s %12s\n",
      comm::Describe(o.cluster.links.intra), comm::Describe(o.cluster.links.inter), "group", "op",
      "phase", "scope", "modelled", "across nodes");
  std::map<std::string, comm::LinkSeconds> groups;
  for (const auto& [key, s] : rows) {
    if (s.total() <= 0) continue;
    out += absl::StrFormat("%-9s %-15s %-10s %-17s %12.4f %11.0f%%\n", key.group,
                           comm::Name(key.primitive), comm::Name(key.phase),
                           key.label.empty() ? "-" : key.label, 1e3 * s.total() / steps,
                           100 * s.inter / s.total());
    comm::LinkSeconds& g = groups[key.group];
    g.intra += s.intra;
    g.inter += s.inter;
  }
  for (const auto& [group, s] : groups) {
    out += absl::StrFormat("%s: %.4f ms per step on the modelled cluster, %.0f%% of it across nodes\n",
                           group, 1e3 * s.total() / steps, 100 * s.inter / s.total());
  }
  return out;
}

std::string RoutingTable(const ReportInputs& in) {
  const train::TrainOptions& o = in.options;
  const int experts = o.model.n_experts;
  if (experts == 0 || in.steps == 0 ||
      in.expert_tokens.size() != size_t(o.model.n_layer) * experts) {
    return "";
  }
  std::string out = absl::StrFormat(
      "\nrouting per step, over %d steps (E = %d, top %d; tokens an expert took (within capacity), "
      "summed over the ranks; dropped: the layer's choices past capacity%s)\n"
      "%-6s %10s %10s %10s %9s %8s%s\n",
      in.steps, experts, o.model.moe_top_k,
      o.parallel.ep > 1 ? "; ep dispatch: bytes a rank sent, min..max over ranks" : "", "layer",
      "min", "mean", "max", "max/mean", "dropped",
      o.parallel.ep > 1 ? absl::StrFormat(" %22s", "ep dispatch") : "");
  const double steps = double(in.steps);
  const double choices = double(o.training.global_batch_size) * o.model.seq_len * o.model.moe_top_k;
  for (int l = 0; l < o.model.n_layer; ++l) {
    const auto first = in.expert_tokens.begin() + ptrdiff_t(l) * experts;
    const double lo = *std::min_element(first, first + experts) / steps;
    const double hi = *std::max_element(first, first + experts) / steps;
    double all = 0;
    for (int e = 0; e < experts; ++e) all += first[e];
    const double mean = all / experts / steps;
    std::string dispatch;
    if (o.parallel.ep > 1) {
      const std::string scope = absl::StrCat("layer", l, ".dispatch");
      int64_t most = 0, least = -1;
      for (const comm::TrafficLedger& ledger : in.traffic) {
        const comm::TransferTotals t = ledger.Sum([&](const comm::LedgerKey& k) {
          return k.group == "ep" && k.primitive == comm::Primitive::kAllToAllV &&
                 k.phase == comm::Phase::kForward && k.label == scope;
        });
        if (t.messages_sent + t.messages_recv == 0) continue;  // another stage's layer
        most = std::max(most, t.bytes_sent / in.steps);
        least = least < 0 ? t.bytes_sent / in.steps : std::min(least, t.bytes_sent / in.steps);
      }
      dispatch = absl::StrFormat(" %22s", Range(std::max<int64_t>(least, 0), most));
    }
    out += absl::StrFormat("%-6d %10.1f %10.1f %10.1f %9.3f %7.1f%%%s\n", l, lo, mean, hi,
                           mean > 0 ? hi / mean : 0.0, 100 * (1 - all / steps / choices), dispatch);
  }
  return out;
}

// What the stage's memory formula is, in words: each category's bytes per parameter.
std::string StageFormula(const train::TrainOptions& o) {
  const model::Precision precision = o.Precision();
  const int64_t p = int64_t(SizeOf(precision.params)), g = int64_t(SizeOf(precision.grads));
  const int64_t master = precision.master_weights() ? 4 : 0;
  const std::string state = absl::StrCat("optimizer state ", 8 + master, "Φ (adamw) or ", 4 + master,
                                         "Φ (sgd)", master > 0 ? " with the fp32 master weights" : "");
  const std::string formulas[] = {
      absl::StrCat("params ", p, "Φ, grads ", g, "Φ, ", state),
      absl::StrCat("params ", p, "Φ, grads ", g, "Φ (the reduced shard at its front), ", state,
                   ", on the shard"),
      absl::StrCat("params ", p, "Φ, grads: the shard + the open units + one reduced chunk, ",
                   state, ", on the shard"),
      absl::StrCat("params: the shard + the gathered units",
                   o.parallel.overlap && o.parallel.pp == 1 ? " (and one prefetched)" : "",
                   ", grads: the shard + the open units + one reduced chunk, ", state,
                   ", on the shard")};
  return formulas[std::clamp(o.parallel.zero, 0, 3)];
}

// Memory per rank next to its formula: the peaks by category, the formula's, the seed's
// fp16 figure, a rank over the modelled GPU, and what evaluation and sampling held.
std::string MemoryTable(const ReportInputs& in) {
  const train::TrainOptions& o = in.options;
  std::string out;
  // The seed's Q6 form for fp16 mixed precision, which ZeRO-1 over dp and the split over
  // tp·pp give: 2Φ/(tp·pp) + 2Φ/(tp·pp) + 12Φ/(dp·tp·pp) (the formula rows are this run's:
  // with --precision=bf16 and --zero=1 they are the seed's, to the byte where the split
  // divides evenly).
  const double phi = double(o.model.NumParams()), split = double(o.parallel.tp) * o.parallel.pp;
  out += absl::StrFormat(
      "\nmemory per rank, peak bytes (zero=%d: %s)\nthe seed's fp16 model states per GPU, "
      "2Φ/(tp·pp) + 2Φ/(tp·pp) + 12Φ/(dp·tp·pp): %.0f bytes\n%-12s %12s %12s %12s %12s %12s %12s\n",
      o.parallel.zero, StageFormula(o),
      4 * phi / split + 12 * phi / (double(o.parallel.dp) * split), "rank", "params", "grads",
      "optimizer", "activations", "comm", "peak total");
  // A rank over the modelled GPU's memory is marked on its row.
  const train::GpuModel gpu = o.ModelledGpu();
  size_t most = 0;
  for (size_t r = 0; r < in.memory.size(); ++r) {
    const MemoryLedger& m = in.memory[r];
    if (m.peak_total() > in.memory[most].peak_total()) most = r;
    out += absl::StrFormat("%-12d %12d %12d %12d %12d %12d %12d%s\n", r,
                           m.peak(MemoryCategory::kParams), m.peak(MemoryCategory::kGrads),
                           m.peak(MemoryCategory::kOptimizer), m.peak(MemoryCategory::kActivations),
                           m.peak(MemoryCategory::kComm), m.peak_total(),
                           gpu.Holds(double(m.peak_total())) ? "" : "  over the GPU");
    MemoryFormula f = PredictedMemory(o, int(r));
    out += absl::StrFormat("%-12s %12d %12d %12d %12s %12s %12s\n", "  formula", f.params, f.grads,
                           f.optimizer, f.activations >= 0 ? absl::StrCat(f.activations) : "-",
                           "-", "-");
  }
  // Said when it matters: a rank over the GPU, a chosen cluster, or a dry run's real sizes.
  const double largest = in.memory.empty() ? 0 : double(in.memory[most].peak_total());
  if (gpu.memory_gb > 0 && (!gpu.Holds(largest) || o.cluster.given() || o.dry_run)) {
    out += absl::StrFormat("the most a rank holds, rank %d's %.4g GB, %s\n", most, largest / 1e9,
                           gpu.Fits(largest, o.ModelledClusterName()));
  }
  // Evaluation and sampling hold buffers of their own between the steps.
  int64_t eval_peak = 0;
  size_t eval_rank = 0;
  for (size_t r = 0; r < in.memory.size(); ++r) {
    if (in.memory[r].paused_peak_total() > eval_peak) {
      eval_peak = in.memory[r].paused_peak_total();
      eval_rank = r;
    }
  }
  if (eval_peak > 0) {
    out += absl::StrFormat("evaluation and sampling: at most %d bytes held in all (rank %d); the "
                           "peaks above are the training steps'\n",
                           eval_peak, eval_rank);
  }
  return out;
}

std::string FormatReport(const ReportInputs& in) {
  const std::map<comm::LedgerKey, Row> rows = Rows(in);
  const train::TrainOptions& o = in.options;
  // With more than one node, the bytes of each row that crossed one.
  const bool nodes = NodesOf(in).count() > 1;
  std::string out = absl::StrFormat(
      "traffic over %d steps (dp=%d%s x tp=%d x pp=%d, Φ = %d parameters, precision %s; bytes sent "
      "per rank, min..max over ranks%s)\n"
      "%-9s %-15s %-6s %-10s %-17s %6s %22s%s %22s %14s %14s %14s\n",
      in.steps, o.parallel.dp, o.CpWords(), o.parallel.tp, o.parallel.pp, o.model.NumParams(),
      PrecisionWords(o),
      nodes ? "; inter-node: the part that crossed a node" : "", "group", "op", "algo", "phase",
      "scope", "calls", "measured", nodes ? absl::StrFormat(" %22s", "inter-node") : "",
      "exact formula", "seed formula", "measured/seed", "busbw GB/s");
  for (const auto& [key, row] : rows) {
    int64_t seed = SeedSent(in, key);
    out += absl::StrFormat(
        "%-9s %-15s %-6s %-10s %-17s %6d %22s%s %22s %14s %14s %14s\n", key.group,
        comm::Name(key.primitive), AlgoColumn(key.algorithm), comm::Name(key.phase),
        key.label.empty() ? "-" : key.label, row.calls, Range(row.sent_min, row.sent_max),
        nodes ? absl::StrFormat(" %22s", Range(row.inter_min, row.inter_max)) : "",
        row.exact_known ? Range(row.exact_min, row.exact_max) : "-",
        seed >= 0 ? absl::StrCat(seed) : "-",
        seed > 0 ? absl::StrFormat("%.3f", double(row.sent_max) / double(seed)) : "-",
        o.dry_run ? "-" : BandwidthRange(row));  // a dry run moves no payload
  }
  if (nodes) out += LinkTable(in);
  out += ModelledTable(in);
  for (const auto& [key, row] : rows) {
    if (!BytesAsRing(key)) continue;
    out += "algo native: MPI's own collectives (--native_collectives); MPI does not tell what "
           "they move, so their bytes are booked as the ring's, not observed\n";
    break;
  }
  // The two clocks: measured (none for a dry run, whose code computes nothing), then
  // modelled, who waited for whom in both, and the verdict, which is the modelled clock's.
  if (!o.dry_run && in.train_nanos.size() == in.traffic.size()) out += TimeTable(in);
  if (!o.dry_run && o.parallel.pp > 1 && in.step_nanos.size() == in.traffic.size()) {
    out += PipelineTable(in);
  }
  out += ReplayTable(in);
  out += ContextLines(in);
  out += WaitsTable(in);
  out += Verdict(in);
  out += RoutingTable(in);
  out += MemoryTable(in);
  return out;
}

}  // namespace tally::report
