#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "core/parallel/context_parallel.h"
#include "core/parallel/pipeline_schedule.h"
#include "core/parallel/powersgd.h"
#include "lab/report/replay.h"
#include "lab/report/report.h"
#include "lab/report/rows.h"
#include "core/runtime/comm/ledger/names.h"
#include "core/runtime/json_writer.h"

namespace tally::report {

namespace {

// The training loss of each step of this run from first_step, and the evaluations'.
void WriteLosses(const ReportInputs& in, JsonWriter& w) {
  w.Key("first_step").Int(in.first_step).Key("losses").BeginArray();
  for (const float loss : in.losses) w.Double(loss);
  w.EndArray().Key("val_losses").BeginArray();
  for (const auto& [step, loss] : in.val_losses) {
    w.BeginObject().Key("step").Int(step).Key("loss").Double(loss).EndObject();
  }
  w.EndArray();
  if (in.compression_errors.empty()) return;
  w.Key("compression_errors").BeginArray();
  for (const double e : in.compression_errors) w.Double(e);
  w.EndArray();
}

// The run's configuration: "config" (the model, the grid, the links, the precision).
void WriteConfig(const ReportInputs& in, const comm::Nodes& nodes, JsonWriter& w) {
  const train::TrainOptions& o = in.options;
  w.Key("config").BeginObject();
  w.Key("n_layer").Int(o.model.n_layer).Key("n_head").Int(o.model.n_head);
  w.Key("n_embd").Int(o.model.n_embd).Key("seq_len").Int(o.model.seq_len);
  w.Key("vocab_size").Int(o.model.vocab_size);
  if (o.model.moe()) {
    w.Key("n_experts").Int(o.model.n_experts).Key("moe_top_k").Int(o.model.moe_top_k);
    w.Key("capacity_factor").Double(o.model.capacity_factor).Key("ep").Int(o.parallel.ep);
  }
  w.Key("sequence_parallel")
      .Bool(o.parallel.sequence_parallel)
      .Key("overlap")
      .Bool(o.parallel.overlap);
  w.Key("dry_run").Bool(o.dry_run);
  w.Key("global_batch_size")
      .Int(o.training.global_batch_size)
      .Key("micro_batch_size")
      .Int(o.training.micro_batch_size);
  w.Key("allreduce")
      .String(comm::Name(o.parallel.allreduce))
      .Key("bucket_mb")
      .Double(o.parallel.bucket_mb);
  w.Key("world")
      .Int(o.world())
      .Key("dp")
      .Int(o.parallel.dp)
      .Key("tp")
      .Int(o.parallel.tp)
      .Key("pp")
      .Int(o.parallel.pp);
  if (o.parallel.cp > 1) {  // context parallelism (a run without it has no such keys)
    w.Key("cp")
        .Int(o.parallel.cp)
        .Key("cp_comm")
        .String(parallel::Name(o.parallel.cp_comm))
        .Key("cp_load_balance")
        .String(parallel::Name(o.parallel.cp_load_balance));
  }
  w.Key("schedule")
      .String(parallel::Name(o.parallel.schedule))
      .Key("virtual_stages")
      .Int(o.parallel.virtual_stages);
  w.Key("recompute")
      .Bool(o.parallel.recompute)
      .Key("recompute_attention")
      .Bool(o.parallel.recompute_attention);
  w.Key("pp_scatter_gather").Bool(o.parallel.ScatterGather());
  w.Key("zero").Int(o.parallel.zero);
  // The sharding and compression variants (data_parallel.md), only where one is on.
  const train::ParallelOptions& p = o.parallel;
  if (p.ShardsByNode()) w.Key("zero_shard").String("node");
  if (p.zero == 3 && !p.zero3_reshard_after_forward) w.Key("zero3_reshard_after_forward").Bool(false);
  if (p.Hpz()) w.Key("zero_hpz").Bool(true);
  if (p.Qwz()) w.Key("zero_quantized_weights").Bool(true);
  if (p.Qgz()) {
    w.Key("zero_quantized_gradients").Bool(true).Key("zero_quant_grad_bits").Int(p.zero_quant_grad_bits);
  }
  if (p.Qwz() || p.Qgz()) w.Key("zero_quant_block").Int(p.zero_quant_block);
  if (p.PowerSgd()) {
    w.Key("grad_compression").String(parallel::Name(p.grad_compression));
    w.Key("powersgd_rank").Int(p.powersgd_rank).Key("powersgd_warmup_steps").Int(p.powersgd_warmup_steps);
  }
  if (p.OneBitAdam()) {
    w.Key("grad_compression").String(parallel::Name(p.grad_compression));
    w.Key("onebit_warmup_steps").Int(p.onebit_warmup_steps);
  }
  w.Key("order").String(parallel::Name(o.placement.order)).Key("nodes").Int(nodes.count());
  w.Key("gpus_per_node").Int(nodes.gpus_per_node());
  w.Key("link_intra_gbps").Double(o.cluster.links.intra.gbps);
  w.Key("link_intra_latency_us").Double(o.cluster.links.intra.latency_us);
  w.Key("link_intra_efficiency").Double(o.cluster.links.intra.efficiency);
  w.Key("link_inter_gbps").Double(o.cluster.links.inter.gbps);
  w.Key("link_inter_latency_us").Double(o.cluster.links.inter.latency_us);
  w.Key("link_inter_efficiency").Double(o.cluster.links.inter.efficiency);
  w.Key("precision")
      .String(train::PrecisionName(o.precision.dtype))
      .Key("fp32_grad_accum")
      .Bool(o.precision.fp32_grad_accum);
  w.Key("grad_comm_dtype").String(train::PrecisionName(o.Precision().grad_comm));
  w.Key("params").Int(o.model.NumParams());
  w.EndObject();
}

// World rank r's rows: "traffic", a row a ledger key, with its formulas' bytes.
void WriteTraffic(const ReportInputs& in, const comm::Nodes& nodes, int r, JsonWriter& w) {
  const train::TrainOptions& o = in.options;
  std::map<comm::LedgerKey, comm::TransferTotals> totals;
  for (const auto& [key_peer, t] : in.traffic[r].transfers()) {
    totals[key_peer.first].bytes_sent += t.bytes_sent;
    totals[key_peer.first].bytes_recv += t.bytes_recv;
  }
  std::map<comm::LedgerKey, comm::LinkBytes> links = SentByKey(in, nodes, r);
  std::map<comm::LedgerKey, comm::LinkSeconds> modelled =
      in.traffic[r].ModelledSeconds(nodes, o.cluster.links);
  w.Key("traffic").BeginArray();
  const comm::ExpectedCalls expected = RankExpectedCalls(in, r);
  for (const auto& [key, c] : in.traffic[r].calls()) {
    w.BeginObject();
    w.Key("group").String(key.group).Key("op").String(comm::Name(key.primitive));
    w.Key("algorithm").String(comm::Name(key.algorithm)).Key("phase").String(comm::Name(key.phase));
    w.Key("scope").String(key.label).Key("calls").Int(c.calls);
    w.Key("bytes_sent").Int(totals[key].bytes_sent).Key("bytes_recv").Int(totals[key].bytes_recv);
    w.Key("bytes_sent_intra").Int(links[key].intra).Key("bytes_sent_inter").Int(links[key].inter);
    w.Key("modelled_seconds").Double(modelled[key].total());
    w.Key("seconds").Double(c.seconds).Key("blocked_seconds").Double(c.blocked_seconds);
    w.Key("busbw_gbps").Double(BusBandwidth(o, key, c)).Key("bytes_as_ring").Bool(BytesAsRing(key));
    if (const int64_t exact = ExactSent(in, expected, key, r); exact >= 0) {
      w.Key("exact_bytes_sent").Int(exact);
    }
    if (const int64_t seed = SeedSent(in, key); seed >= 0) w.Key("seed_bytes_sent").Int(seed);
    w.EndObject();
  }
  w.EndArray();
}

// World rank r's step on the measured clock ("time", not in a dry run) and its last step
// on the modelled one ("modelled_time").
void WriteTimes(const ReportInputs& in, size_t r, const std::vector<MeasuredWaits>& measured,
                const absl::StatusOr<std::vector<ReplayedRank>>& replayed, JsonWriter& w) {
  const train::TrainOptions& o = in.options;
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
    w.Key("waited_for_rank").Int(m.waited.Most());
    const auto sent = m.p2p_sent_s.find(comm::group::kCp);
    if (sent != m.p2p_sent_s.end()) {  // the cp ring: its sends, and of them its waits
      const auto exposed = m.p2p_exposed_s.find(comm::group::kCp);
      w.Key("cp_ring_sends_ms").Double(sent->second * 1e3);
      w.Key("cp_ring_exposed_ms")
          .Double(exposed != m.p2p_exposed_s.end() ? exposed->second * 1e3 : 0.0);
    }
    w.EndObject();
  }
  if (o.parallel.cp > 1) {  // this cp rank's share of attention (ContextAttentionWork)
    w.Key("cp_attention_work")
        .Int(parallel::ContextAttentionWork(o.parallel.cp_comm, o.parallel.cp_load_balance,
                                            o.parallel.cp, o.topology().Of(int(r)).cp,
                                            o.model.seq_len, o.model.n_head / o.parallel.tp));
  }
}

// World rank r's peaks ("memory") and the formula's ("memory_formula").
void WriteMemory(const ReportInputs& in, int r, JsonWriter& w) {
  const MemoryLedger& m = in.memory[size_t(r)];
  w.Key("memory").BeginObject();
  w.Key("params").Int(m.peak(MemoryCategory::kParams)).Key("grads").Int(m.peak(MemoryCategory::kGrads));
  w.Key("optimizer").Int(m.peak(MemoryCategory::kOptimizer));
  w.Key("activations").Int(m.peak(MemoryCategory::kActivations));
  w.Key("comm").Int(m.peak(MemoryCategory::kComm)).Key("peak_total").Int(m.peak_total());
  // Evaluation and sampling, outside the training peaks (core/runtime/memory_ledger.h).
  if (m.paused_peak_total() > 0) w.Key("eval_peak_total").Int(m.paused_peak_total());
  w.EndObject();
  const MemoryFormula f = PredictedMemory(in.options, r);
  w.Key("memory_formula").BeginObject().Key("params").Int(f.params).Key("grads").Int(f.grads);
  w.Key("optimizer").Int(f.optimizer);
  if (f.activations >= 0) w.Key("activations").Int(f.activations);
  w.EndObject();
}

// With experts, "routing": per layer the tokens each expert took a step (RoutingTable's
// figures).
void WriteRouting(const ReportInputs& in, JsonWriter& w) {
  const int experts = in.options.model.n_experts;
  if (experts > 0 && in.steps > 0 &&
      in.expert_tokens.size() == size_t(in.options.model.n_layer) * experts) {
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
}

}  // namespace

std::string ReportJson(const ReportInputs& in) {
  const train::TrainOptions& o = in.options;
  const comm::Nodes nodes = NodesOf(in);
  JsonWriter w;
  w.BeginObject();
  WriteConfig(in, nodes, w);
  w.Key("steps").Int(in.steps);
  if (!o.dry_run) WriteLosses(in, w);  // a dry run computes no loss
  const absl::StatusOr<std::vector<ReplayedRank>>& replayed = ModelledRun(in);
  const std::vector<MeasuredWaits> measured = MeasuredRun(in);
  w.Key("modelled_cluster").BeginObject().Key("name").String(o.ModelledClusterName());
  w.Key("gpu").String(o.ModelledGpu().Describe());
  if (o.ModelledGpu().memory_gb > 0) w.Key("gpu_memory_gb").Double(o.ModelledGpu().memory_gb);
  w.EndObject();
  if (replayed.ok() && !replayed->empty()) {  // the seed's test, on the modelled clock
    const auto [worst, share] = WorstModelled(*replayed);
    w.Key("verdict").BeginObject().Key("clock").String("modelled");
    w.Key("bound").String(share > 0.30 ? "communication" : "compute");
    w.Key("exposed_share").Double(share).Key("rank").Int(worst);
    w.Key("waited_for_rank").Int((*replayed)[size_t(worst)].waited.Most()).EndObject();
  }
  WriteRouting(in, w);
  const std::vector<std::vector<int64_t>> peers = comm::PeerMatrix(in.traffic);
  // A rank records the same spans every step: the last step's are the last 1/steps of them.
  auto last_step = [&](const std::vector<train::Trainer::Span>& spans) {
    const size_t per_step = in.steps > 0 ? spans.size() / size_t(in.steps) : spans.size();
    return std::span<const train::Trainer::Span>(spans).last(per_step);
  };
  // The spans' time origin: the first span of the last step on any rank.
  int64_t span_origin = std::numeric_limits<int64_t>::max();
  if (in.spans != nullptr) {
    for (const std::vector<train::Trainer::Span>& spans : *in.spans) {
      for (const train::Trainer::Span& s : last_step(spans)) {
        span_origin = std::min(span_origin, s.start_nanos);
      }
    }
  }
  w.Key("ranks").BeginArray();
  for (size_t r = 0; r < in.traffic.size(); ++r) {
    const parallel::GridCoordinates at = o.topology().Of(int(r));
    w.BeginObject().Key("rank").Int(int64_t(r)).Key("dp").Int(at.dp);
    w.Key("tp").Int(at.tp).Key("pp").Int(at.pp);
    w.Key("node").Int(nodes.node(int(r)));
    WriteTraffic(in, nodes, int(r), w);
    WriteTimes(in, r, measured, replayed, w);
    WriteMemory(in, int(r), w);
    w.Key("peers").IntArray(peers[r]);
    if (in.spans != nullptr && r < in.spans->size() && !(*in.spans)[r].empty()) {
      w.Key("spans").BeginArray();
      for (const train::Trainer::Span& s : last_step((*in.spans)[r])) {
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

}  // namespace tally::report
