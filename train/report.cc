#include "train/report.h"
#include "train/replay.h"

#include <algorithm>
#include <limits>
#include <map>
#include <span>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "parallel/pipeline_schedule.h"
#include "runtime/comm/ledger/exact_traffic.h"
#include "runtime/json_writer.h"

namespace tally::train {
namespace {

struct Row {
  int64_t calls = 0;
  int64_t sent_min = std::numeric_limits<int64_t>::max(), sent_max = 0;
  int64_t inter_min = std::numeric_limits<int64_t>::max(), inter_max = 0;  // across nodes
  int64_t exact_min = std::numeric_limits<int64_t>::max(), exact_max = 0;
  bool exact_known = true;
  double busbw_min = std::numeric_limits<double>::max(), busbw_max = 0;  // GB/s
};

// The ranks of a group, by its name.
int GroupSize(const TrainOptions& o, const std::string& group) {
  if (group == "dp") return o.dp;
  if (group == "tp") return o.tp;
  if (group == "pp") return o.pp;
  if (group == "embedding") return 2;
  return o.world();
}

// nccl-tests' bus bandwidth of a rank's calls under a key, GB/s (0 when they took no
// time, and for point-to-point rows: a non-blocking transfer's time overlaps compute).
double BusBandwidth(const TrainOptions& o, const comm::LedgerKey& key, const comm::CallTotals& c) {
  if (c.seconds <= 0 || key.primitive == comm::Primitive::kSendRecv) return 0;
  return double(c.payload_bytes) / c.seconds / 1e9 * comm::BusFactor(key.primitive, GroupSize(o, key.group));
}

// The transport's own collectives: the ledger books the ring's bytes for them.
bool Modelled(const comm::LedgerKey& key) { return key.algorithm == comm::Algorithm::kNative; }

std::string Range(int64_t lo, int64_t hi) {
  return lo == hi ? absl::StrCat(lo) : absl::StrCat(lo, "..", hi);
}

// The algorithm in the text table's 6-wide column ("hier": hierarchical).
const char* AlgoColumn(comm::Algorithm a) {
  return a == comm::Algorithm::kHierarchical ? "hier" : comm::Name(a);
}


// Rank r's bytes sent under each key, by link class.
std::map<comm::LedgerKey, comm::LinkBytes> SentByKey(const ReportInputs& in, const comm::Nodes& nodes,
                                                     int r) {
  std::map<comm::LedgerKey, comm::LinkBytes> sent;
  for (const auto& [key_peer, t] : in.traffic[r].transfers()) {
    sent[key_peer.first] += nodes.Split(r, key_peer.second, t.bytes_sent);
  }
  return sent;
}

}  // namespace

comm::Nodes NodesOf(const ReportInputs& in) {
  return in.nodes != nullptr ? *in.nodes : comm::Nodes::One(int(in.traffic.size()));
}

namespace {

// The report's rows: per key, calls and bytes sent per rank (min..max over the ranks that
// made the call), the formula's.
std::map<comm::LedgerKey, Row> Rows(const ReportInputs& in) {
  std::map<comm::LedgerKey, Row> rows;
  const comm::Nodes nodes = NodesOf(in);
  for (size_t r = 0; r < in.traffic.size(); ++r) {
    std::map<comm::LedgerKey, comm::LinkBytes> sent = SentByKey(in, nodes, int(r));
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
      int64_t exact = ExactSent(in, key, int(r));
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

// The row's busbw over its ranks, GB/s ("-" when no call took measurable time).
std::string BandwidthRange(const Row& row) {
  if (row.busbw_max <= 0) return "-";
  const std::string lo = absl::StrFormat("%.2f", row.busbw_min), hi = absl::StrFormat("%.2f", row.busbw_max);
  return lo == hi ? lo : absl::StrCat(lo, "..", hi);
}

}  // namespace

std::string ReportCsv(const ReportInputs& in) {
  std::string out =
      "group,op,algorithm,phase,scope,calls,sent_min,sent_max,sent_inter_min,sent_inter_max,"
      "exact_min,exact_max,seed,measured_over_seed,busbw_gbps_min,busbw_gbps_max,modelled\n";
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
                           row.busbw_min, row.busbw_max, Modelled(key) ? 1 : 0);
  }
  return out;
}

namespace {

// "fp32", "bf16 (fp32 master weights)", and the gradients' types where they differ.
std::string PrecisionWords(const TrainOptions& o) {
  const model::Precision p = o.Precision();
  std::string words = PrecisionName(p.params);
  if (p.master_weights()) words += " (fp32 master weights)";
  if (p.grads != p.params) absl::StrAppend(&words, ", gradients ", PrecisionName(p.grads));
  if (p.grad_comm != p.grads) absl::StrAppend(&words, ", reduced as ", PrecisionName(p.grad_comm));
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
  const TrainOptions& o = in.options;
  const comm::Nodes nodes = NodesOf(in);
  const double steps = double(std::max<int64_t>(1, in.steps));
  // Per row, the busiest rank's time (a collective ends when its slowest rank does).
  std::map<comm::LedgerKey, comm::LinkSeconds> rows;
  for (size_t r = 0; r < in.traffic.size(); ++r) {
    for (const auto& [key, s] : in.traffic[r].ModelledSeconds(nodes, o.cluster)) {
      if (key.phase == comm::Phase::kSetup) continue;  // once a run, not a step's
      if (s.total() > rows[key].total()) rows[key] = s;
    }
  }
  std::string out = absl::StrFormat(
      "time on a modelled cluster, ms per step (the busiest rank of each row; per message: "
      "inside a node %s, across nodes %s)\n%-9s %-15s %-10s %-17s %12s %12s\n",
      comm::Describe(o.cluster.intra), comm::Describe(o.cluster.inter), "group", "op", "phase",
      "scope", "modelled", "across nodes");
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
  const TrainOptions& o = in.options;
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
      o.ep > 1 ? "; ep dispatch: bytes a rank sent, min..max over ranks" : "", "layer", "min",
      "mean", "max", "max/mean", "dropped",
      o.ep > 1 ? absl::StrFormat(" %22s", "ep dispatch") : "");
  const double steps = double(in.steps);
  const double choices = double(o.global_batch_size) * o.model.seq_len * o.model.moe_top_k;
  for (int l = 0; l < o.model.n_layer; ++l) {
    const auto first = in.expert_tokens.begin() + ptrdiff_t(l) * experts;
    const double lo = *std::min_element(first, first + experts) / steps;
    const double hi = *std::max_element(first, first + experts) / steps;
    double all = 0;
    for (int e = 0; e < experts; ++e) all += first[e];
    const double mean = all / experts / steps;
    std::string dispatch;
    if (o.ep > 1) {
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

std::string FormatReport(const ReportInputs& in) {
  const std::map<comm::LedgerKey, Row> rows = Rows(in);
  const TrainOptions& o = in.options;
  // With more than one node, the bytes of each row that crossed one.
  const bool nodes = NodesOf(in).count() > 1;
  std::string out = absl::StrFormat(
      "traffic over %d steps (dp=%d x tp=%d x pp=%d, Φ = %d parameters, precision %s; bytes sent "
      "per rank, min..max over ranks%s)\n"
      "%-9s %-15s %-6s %-10s %-17s %6s %22s%s %22s %14s %14s %14s\n",
      in.steps, o.dp, o.tp, o.pp, o.model.NumParams(), PrecisionWords(o),
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
    if (!Modelled(key)) continue;
    out += "algo native: MPI's own collectives (--native_collectives); MPI does not tell what "
           "they move, so their bytes are modelled as the ring's, not observed\n";
    break;
  }
  // The two clocks: measured (none for a dry run, whose code computes nothing), then
  // modelled, who waited for whom in both, and the verdict, which is the modelled clock's.
  if (!o.dry_run && in.train_nanos.size() == in.traffic.size()) out += TimeTable(in);
  if (!o.dry_run && o.pp > 1 && in.step_nanos.size() == in.traffic.size()) out += PipelineTable(in);
  out += ReplayTable(in);
  out += WaitsTable(in);
  out += Verdict(in);
  out += RoutingTable(in);
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
                   o.overlap && o.pp == 1 ? " (and one prefetched)" : "",
                   ", grads: the shard + the open units + one reduced chunk, ", state,
                   ", on the shard")};
  // The seed's Q6 form for fp16 mixed precision, which ZeRO-1 over dp and the split over
  // tp·pp give: 2Φ/(tp·pp) + 2Φ/(tp·pp) + 12Φ/(dp·tp·pp) (the formula rows are this run's:
  // with --precision=bf16 and --zero=1 they are the seed's, to the byte where the split
  // divides evenly).
  const double phi = double(o.model.NumParams()), split = double(o.tp) * o.pp;
  out += absl::StrFormat(
      "\nmemory per rank, peak bytes (zero=%d: %s)\nthe seed's fp16 model states per GPU, "
      "2Φ/(tp·pp) + 2Φ/(tp·pp) + 12Φ/(dp·tp·pp): %.0f bytes\n%-12s %12s %12s %12s %12s %12s %12s\n",
      o.zero, formulas[std::clamp(o.zero, 0, 3)].c_str(),
      4 * phi / split + 12 * phi / (double(o.dp) * split), "rank", "params", "grads", "optimizer",
      "activations", "comm", "peak total");
  for (size_t r = 0; r < in.memory.size(); ++r) {
    const MemoryLedger& m = in.memory[r];
    out += absl::StrFormat("%-12d %12d %12d %12d %12d %12d %12d\n", r,
                           m.peak(MemoryCategory::kParams), m.peak(MemoryCategory::kGrads),
                           m.peak(MemoryCategory::kOptimizer), m.peak(MemoryCategory::kActivations),
                           m.peak(MemoryCategory::kComm), m.peak_total());
    MemoryFormula f = PredictedMemory(o, int(r));
    out += absl::StrFormat("%-12s %12d %12d %12d %12s %12s %12s\n", "  formula", f.params, f.grads,
                           f.optimizer, f.activations >= 0 ? absl::StrCat(f.activations) : "-",
                           "-", "-");
  }
  return out;
}

std::string ReportJson(const ReportInputs& in) {
  const TrainOptions& o = in.options;
  const comm::Nodes nodes = NodesOf(in);
  JsonWriter w;
  w.BeginObject().Key("config").BeginObject();
  w.Key("n_layer").Int(o.model.n_layer).Key("n_head").Int(o.model.n_head);
  w.Key("n_embd").Int(o.model.n_embd).Key("seq_len").Int(o.model.seq_len);
  w.Key("vocab_size").Int(o.model.vocab_size);
  if (o.model.moe()) {
    w.Key("n_experts").Int(o.model.n_experts).Key("moe_top_k").Int(o.model.moe_top_k);
    w.Key("capacity_factor").Double(o.model.capacity_factor).Key("ep").Int(o.ep);
  }
  w.Key("sequence_parallel").Bool(o.sequence_parallel).Key("overlap").Bool(o.overlap);
  w.Key("dry_run").Bool(o.dry_run);
  w.Key("global_batch_size").Int(o.global_batch_size).Key("micro_batch_size").Int(o.micro_batch_size);
  w.Key("allreduce").String(comm::Name(o.allreduce)).Key("bucket_mb").Double(o.bucket_mb);
  w.Key("world").Int(o.world()).Key("dp").Int(o.dp).Key("tp").Int(o.tp).Key("pp").Int(o.pp);
  w.Key("schedule").String(parallel::Name(o.schedule)).Key("virtual_stages").Int(o.virtual_stages);
  w.Key("recompute").Bool(o.recompute).Key("recompute_attention").Bool(o.recompute_attention);
  w.Key("pp_scatter_gather").Bool(o.ScatterGather());
  w.Key("zero").Int(o.zero);
  w.Key("order").String(parallel::Name(o.order)).Key("nodes").Int(nodes.count());
  w.Key("gpus_per_node").Int(nodes.gpus_per_node());
  w.Key("link_intra_gbps").Double(o.cluster.intra.gbps);
  w.Key("link_intra_latency_us").Double(o.cluster.intra.latency_us);
  w.Key("link_intra_efficiency").Double(o.cluster.intra.efficiency);
  w.Key("link_inter_gbps").Double(o.cluster.inter.gbps);
  w.Key("link_inter_latency_us").Double(o.cluster.inter.latency_us);
  w.Key("link_inter_efficiency").Double(o.cluster.inter.efficiency);
  w.Key("precision").String(PrecisionName(o.precision)).Key("fp32_grad_accum").Bool(o.fp32_grad_accum);
  w.Key("grad_comm_dtype").String(PrecisionName(o.Precision().grad_comm));
  w.Key("params").Int(o.model.NumParams());
  w.EndObject();
  w.Key("steps").Int(in.steps);
  const absl::StatusOr<std::vector<ReplayedRank>>& replayed = ModelledRun(in);
  const std::vector<MeasuredWaits> measured = MeasuredRun(in);
  w.Key("modelled_cluster").BeginObject().Key("name").String(o.ModelledClusterName());
  w.Key("gpu").String(o.ModelledGpu().Describe()).EndObject();
  if (replayed.ok() && !replayed->empty()) {  // the seed's test, on the modelled clock
    const auto [worst, share] = WorstModelled(*replayed);
    w.Key("verdict").BeginObject().Key("clock").String("modelled");
    w.Key("bound").String(share > 0.30 ? "communication" : "compute");
    w.Key("exposed_share").Double(share).Key("rank").Int(worst);
    w.Key("waited_for_rank").Int((*replayed)[size_t(worst)].waited.Most()).EndObject();
  }
  const int experts = in.options.model.n_experts;
  if (experts > 0 && in.steps > 0 &&
      in.expert_tokens.size() == size_t(in.options.model.n_layer) * experts) {
    // Per layer, the tokens each expert took per step (RoutingTable's figures).
    w.Key("routing").BeginArray();
    for (int l = 0; l < in.options.model.n_layer; ++l) {
      w.BeginObject();
      w.Key("layer").Int(l);
      w.Key("expert_tokens_per_step").BeginArray();
      for (int e = 0; e < experts; ++e) {
        w.Double(in.expert_tokens[size_t(l) * experts + e] / double(in.steps));
      }
      w.EndArray();
      w.EndObject();
    }
    w.EndArray();
  }
  const std::vector<std::vector<int64_t>> peers = comm::PeerMatrix(in.traffic);
  // A rank records the same spans every step: the last step's are the last 1/steps of them.
  auto last_step = [&](const std::vector<Trainer::Span>& spans) {
    const size_t per_step = in.steps > 0 ? spans.size() / size_t(in.steps) : spans.size();
    return std::span<const Trainer::Span>(spans).last(per_step);
  };
  // The spans' time origin: the first span of the last step on any rank.
  int64_t span_origin = std::numeric_limits<int64_t>::max();
  if (in.spans != nullptr) {
    for (const std::vector<Trainer::Span>& spans : *in.spans) {
      for (const Trainer::Span& s : last_step(spans)) span_origin = std::min(span_origin, s.start_nanos);
    }
  }
  w.Key("ranks").BeginArray();
  for (size_t r = 0; r < in.traffic.size(); ++r) {
    const parallel::GridCoordinates at = o.topology().Of(int(r));
    w.BeginObject().Key("rank").Int(int64_t(r)).Key("dp").Int(at.dp);
    w.Key("tp").Int(at.tp).Key("pp").Int(at.pp);
    std::map<comm::LedgerKey, comm::TransferTotals> totals;
    for (const auto& [key_peer, t] : in.traffic[r].transfers()) {
      totals[key_peer.first].bytes_sent += t.bytes_sent;
      totals[key_peer.first].bytes_recv += t.bytes_recv;
    }
    std::map<comm::LedgerKey, comm::LinkBytes> links = SentByKey(in, nodes, int(r));
    std::map<comm::LedgerKey, comm::LinkSeconds> modelled =
        in.traffic[r].ModelledSeconds(nodes, o.cluster);
    w.Key("node").Int(nodes.node(int(r)));
    w.Key("traffic").BeginArray();
    for (const auto& [key, c] : in.traffic[r].calls()) {
      w.BeginObject();
      w.Key("group").String(key.group).Key("op").String(comm::Name(key.primitive));
      w.Key("algorithm").String(comm::Name(key.algorithm)).Key("phase").String(comm::Name(key.phase));
      w.Key("scope").String(key.label).Key("calls").Int(c.calls);
      w.Key("bytes_sent").Int(totals[key].bytes_sent).Key("bytes_recv").Int(totals[key].bytes_recv);
      w.Key("bytes_sent_intra").Int(links[key].intra).Key("bytes_sent_inter").Int(links[key].inter);
      w.Key("modelled_seconds").Double(modelled[key].total());
      w.Key("seconds").Double(c.seconds).Key("blocked_seconds").Double(c.blocked_seconds);
      w.Key("busbw_gbps").Double(BusBandwidth(o, key, c)).Key("modelled").Bool(Modelled(key));
      if (const int64_t exact = ExactSent(in, key, int(r)); exact >= 0) {
        w.Key("exact_bytes_sent").Int(exact);
      }
      if (const int64_t seed = SeedSent(in, key); seed >= 0) w.Key("seed_bytes_sent").Int(seed);
      w.EndObject();
    }
    w.EndArray();
    if (!o.dry_run && in.train_nanos.size() == in.traffic.size()) {  // the measured clock
      const RankTime t = TimeOf(in, int(r));
      w.Key("time").BeginObject().Key("clock").String("measured").Key("step_ms").Double(t.step_ms);
      w.Key("compute_ms").Double(t.compute_ms).Key("comm_exposed_ms").Double(t.exposed_ms);
      w.Key("comm_hidden_ms").Double(t.hidden_ms).Key("idle_ms").Double(t.idle_ms);
      if (in.cpu_nanos.size() == in.train_nanos.size()) {
        w.Key("cpu_ms").Double(double(in.cpu_nanos[r]) / 1e6 / double(std::max<int64_t>(1, in.steps)));
      }
      if (r < measured.size()) {
        w.Key("last_step").BeginObject();
        w.Key("comm_exposed_ms").Double(measured[r].exposed_s * 1e3);
        w.Key("comm_waiting_ms").Double(measured[r].waited.seconds * 1e3);
        w.Key("waited_for_rank").Int(measured[r].waited.Most()).EndObject();
      }
      w.EndObject();
    }
    if (replayed.ok() && r < replayed->size()) {  // the modelled clock, the last step
      const ReplayedRank& m = (*replayed)[r];
      w.Key("modelled_time").BeginObject().Key("clock").String("modelled");
      w.Key("step_ms").Double(m.seconds * 1e3).Key("compute_ms").Double(m.compute_s * 1e3);
      w.Key("comm_exposed_ms").Double(m.exposed_s * 1e3).Key("idle_ms").Double(m.idle_s * 1e3);
      w.Key("comm_waiting_ms").Double(m.waited.seconds * 1e3);
      w.Key("waited_for_rank").Int(m.waited.Most()).EndObject();
    }
    const MemoryLedger& m = in.memory[r];
    w.Key("memory").BeginObject();
    w.Key("params").Int(m.peak(MemoryCategory::kParams)).Key("grads").Int(m.peak(MemoryCategory::kGrads));
    w.Key("optimizer").Int(m.peak(MemoryCategory::kOptimizer));
    w.Key("activations").Int(m.peak(MemoryCategory::kActivations));
    w.Key("comm").Int(m.peak(MemoryCategory::kComm)).Key("peak_total").Int(m.peak_total());
    w.EndObject();
    const MemoryFormula f = PredictedMemory(o, int(r));
    w.Key("memory_formula").BeginObject().Key("params").Int(f.params).Key("grads").Int(f.grads);
    w.Key("optimizer").Int(f.optimizer);
    if (f.activations >= 0) w.Key("activations").Int(f.activations);
    w.EndObject();
    w.Key("peers").IntArray(peers[r]);
    if (in.spans != nullptr && r < in.spans->size() && !(*in.spans)[r].empty()) {
      w.Key("spans").BeginArray();
      for (const Trainer::Span& s : last_step((*in.spans)[r])) {
        w.BeginObject().Key("name").String(s.name);
        w.Key("start_ms").Double(double(s.start_nanos - span_origin) / 1e6);
        w.Key("end_ms").Double(double(s.end_nanos - span_origin) / 1e6).EndObject();
      }
      w.EndArray();
    }
    w.EndObject();
  }
  w.EndArray().EndObject();
  return w.str();
}

}  // namespace tally::train
