#include "train/report.h"

#include <algorithm>
#include <limits>
#include <map>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "model/parameters.h"
#include "parallel/data_parallel.h"
#include "parallel/pipeline_schedule.h"
#include "parallel/zero.h"
#include "runtime/comm/exact_traffic.h"
#include "runtime/json_writer.h"

namespace tally::train {
namespace {

int64_t BucketBytes(const TrainOptions& o) { return int64_t(o.bucket_mb * (1 << 20)); }

// The parameters world rank `rank` holds: its tensor-parallel part of its stage's layers.
model::ParameterLayout StageLayout(const TrainOptions& o, int rank) {
  const parallel::LayerRange layers =
      parallel::StageLayers(o.model.n_layer, o.pp, o.pp_layers).value()[o.pp_rank(rank)];
  return model::ParameterLayout::ForGPT(o.model, o.tp, o.tp_rank(rank), layers.begin, layers.end);
}

// The per-token replicas' elements in the gradients the optimizer of world rank `rank`
// sees: its part of the model, or its ZeRO shard of that.
int64_t PerTokenElements(const TrainOptions& o, int rank) {
  const model::ParameterLayout layout = StageLayout(o, rank);
  std::vector<optim::Segment> segments = model::OptimizerSegments(layout);
  if (o.zero >= 1) {
    const parallel::Sharding shard(parallel::ZeroUnits(layout, o.zero), o.dp, o.dp_rank(rank));
    std::vector<optim::Segment> mine;
    for (const parallel::Sharding::Piece& p : shard.pieces()) {
      for (const optim::Segment& s : parallel::SegmentsInRange(segments, p.own.offset, p.own.end())) {
        mine.push_back(s);
      }
    }
    segments = mine;
  }
  int64_t count = 0;
  for (const optim::Segment& s : segments) count += s.per_token ? s.end - s.begin : 0;
  return count;
}

// Bytes a pipeline boundary carries each way in a step: every micro-batch's
// (b·s, h) activations forward and their gradients backward, b·s·h·4 for the dp rank's
// share of the global batch, whatever the micro-batch count; under sequence parallelism
// each tensor-parallel rank sends its part of the sequence, 1/tp of it.
int64_t BoundaryBytesPerStep(const TrainOptions& o) {
  const int64_t bsh = int64_t(o.global_batch_size / o.dp) * o.model.seq_len * o.model.n_embd;
  return bsh * 4 / (o.sequence_parallel ? o.tp : 1);
}

bool IsBoundary(const comm::LedgerKey& key) {
  return key.group == "pp" && key.primitive == comm::Primitive::kSendRecv &&
         key.label.rfind("stage", 0) == 0 &&
         (key.phase == comm::Phase::kForward || key.phase == comm::Phase::kBackward);
}

// ZeRO's calls per step and unit of the row's primitive in the row's phase (0: not ZeRO's).
int ZeroCalls(const TrainOptions& o, const comm::LedgerKey& key) {
  return parallel::ZeroCallsPerStep(o.zero, o.accumulation_steps(), key.primitive, key.phase,
                                    o.recompute);
}

// A row's all-reduce as the step makes it: calls per step, elements and bytes each.
struct AllReducePattern {
  int64_t calls = 0, count = 0;
  size_t element = 4;
};

// The tensor-parallel collectives of one micro-batch by scope (tensor_parallel.h), over
// its (micro_batch_size·seq_len, n_embd) activations: forward, each layer's attention and
// MLP, and the embedding; backward, each layer's two and the LM head — each an
// all-reduce, or under sequence parallelism an all-gather and a reduce-scatter (the
// embedding's reduce-scatter forward and all-gather backward, the LM head's the other way
// round); and forward, cross-entropy's three all-reduces of one float per row.
struct ScopeCollective {
  const char* scope;  // "layer" for every layer's attn and mlp
  comm::Primitive primitive;
  bool per_row;  // one float per row (cross-entropy), else the activations
};

std::vector<ScopeCollective> MicroBatchCollectives(bool sequence_parallel, bool forward) {
  using comm::Primitive;
  const Primitive ar = Primitive::kAllReduce, ag = Primitive::kAllGather;
  const Primitive rs = Primitive::kReduceScatter;
  if (!sequence_parallel) {
    if (forward) {
      return {{"layer", ar, false}, {"embedding", ar, false}, {"cross_entropy", ar, true},
              {"cross_entropy", ar, true}, {"cross_entropy", ar, true}};
    }
    return {{"layer", ar, false}, {"lm_head", ar, false}};
  }
  if (forward) {
    return {{"layer", ag, false},        {"layer", rs, false},         {"embedding", rs, false},
            {"lm_head", ag, false},      {"cross_entropy", ar, true},  {"cross_entropy", ar, true},
            {"cross_entropy", ar, true}};
  }
  return {{"layer", ag, false}, {"layer", rs, false}, {"embedding", ag, false}, {"lm_head", rs, false}};
}

// The tensor-parallel collectives of a training step under the row's scope and phase:
// m micro-batches of the lists above — with pipeline recompute the forward's again in
// backward — and once a step the gradient norm and, under sequence parallelism, the
// per-token replicas' sum (over the buffer the optimizer sees: the rank's part, or its
// ZeRO shard of it).
std::optional<AllReducePattern> TensorParallelPattern(const TrainOptions& o,
                                                      const comm::LedgerKey& key, int rank) {
  using comm::Phase;
  const int64_t m = o.accumulation_steps(), rows = int64_t(o.micro_batch_size) * o.model.seq_len;
  if (key.primitive == comm::Primitive::kAllReduce) {
    if (key.label == "grad_norm" && key.phase == Phase::kOptimizer) return AllReducePattern{1, 1, 8};
    if (key.label == "sequence_parallel" && key.phase == Phase::kBackward) {
      return AllReducePattern{1, PerTokenElements(o, rank)};
    }
  }
  const bool forward = key.phase == Phase::kForward, backward = key.phase == Phase::kBackward;
  if (!forward && !backward) return std::nullopt;
  const std::string scope = key.label.rfind("layer", 0) == 0 ? "layer" : key.label;
  int64_t calls = 0;
  bool per_row = false;
  auto count = [&](bool forward_list) {
    for (const ScopeCollective& c : MicroBatchCollectives(o.sequence_parallel, forward_list)) {
      if (c.scope == scope && c.primitive == key.primitive) {
        calls += m;
        per_row = c.per_row;
      }
    }
  };
  if (forward || (o.recompute && o.pp > 1)) count(/*forward_list=*/true);
  if (backward) count(/*forward_list=*/false);
  if (calls == 0) return std::nullopt;
  return AllReducePattern{calls, per_row ? rows : rows * o.model.n_embd};
}

}  // namespace

int64_t ExactSent(const ReportInputs& in, const comm::LedgerKey& key, int rank) {
  const TrainOptions& o = in.options;
  const int dp_rank = o.dp_rank(rank), tp_rank = o.tp_rank(rank), pp_rank = o.pp_rank(rank);
  auto scalar = [&](int group_size, int group_rank, size_t element) {  // one value a step
    return in.steps * comm::ExactTraffic(comm::Primitive::kAllReduce, key.algorithm, group_size,
                                         group_rank, -1, 1, element).sent;
  };
  if (key.group == "pp") {
    if (IsBoundary(key)) return in.steps * BoundaryBytesPerStep(o);
    if (key.primitive != comm::Primitive::kAllReduce) return -1;
    if (key.label == "loss" && key.phase == comm::Phase::kOther) return scalar(o.pp, pp_rank, 4);
    if (key.label == "grad_norm" && key.phase == comm::Phase::kOptimizer) return scalar(o.pp, pp_rank, 8);
    return -1;
  }
  if (key.group == "embedding" && key.label == "tied_embedding" &&
      key.primitive == comm::Primitive::kAllReduce) {
    // wte's gradient between the first stage (rank 0 of the group) and the last; under
    // ZeRO-2/3 the dp rank's chunk of it.
    int64_t wte = model::ParameterLayout::ForGPT(o.model, o.tp, tp_rank).specs()[0].numel;
    if (o.zero >= 2) wte = comm::ChunkOf(wte, o.dp, o.dp_rank(rank)).count;
    return in.steps * comm::ExactTraffic(comm::Primitive::kAllReduce, key.algorithm, 2,
                                         pp_rank == 0 ? 0 : 1, -1, wte, 4).sent;
  }
  if (key.group == "tp") {
    std::optional<AllReducePattern> p = TensorParallelPattern(o, key, rank);
    if (!p) return -1;
    return in.steps * p->calls *
           comm::ExactTraffic(key.primitive, key.algorithm, o.tp, tp_rank, -1, p->count, p->element).sent;
  }
  if (key.group != "dp") return -1;
  // This rank's part of the model: the buffer the dp group reduces or shards.
  const model::ParameterLayout layout = StageLayout(o, rank);
  auto per_step = [&](comm::Primitive p, int64_t count, size_t element) {
    return in.steps * comm::ExactTraffic(p, key.algorithm, o.dp, dp_rank, -1, count, element).sent;
  };
  switch (key.primitive) {
    case comm::Primitive::kAllReduce:
      if (key.phase == comm::Phase::kBackward) {  // data parallelism's gradient buckets
        return in.steps * GradientSyncBytesPerStep(layout.total(), o.dp, dp_rank, BucketBytes(o),
                                                   key.algorithm);
      }
      if (key.label == "loss") return per_step(key.primitive, 1, 4);       // one float
      if (key.label == "grad_norm") return per_step(key.primitive, 1, 8);  // ZeRO: one double
      return -1;
    case comm::Primitive::kReduceScatter:  // ZeRO: the gradients
    case comm::Primitive::kAllGather:      // ZeRO: the parameters
      if (ZeroCalls(o, key) == 0) return -1;
      return in.steps * parallel::ZeroBytesPerStep(layout, o.zero, o.dp, dp_rank,
                                                   o.accumulation_steps(), key.algorithm,
                                                   key.primitive, key.phase, o.recompute);
    default:
      return -1;
  }
}

namespace {

// The seed article's figure for the row: an all-reduce of M bytes moves 2M; so 2Φ·4/tp
// per step for the gradient all-reduce, and 2·b·s·h·4 for each tensor-parallel
// all-reduce of the activations (8bsh per layer and step; b·s·h·4 for each all-gather
// and reduce-scatter of sequence parallelism); Φ·4/tp for each pass of
// ZeRO's reduce-scatter and all-gather over the buffer (2Φ together for ZeRO-1/2, 3Φ for
// ZeRO-3, with one micro-batch).
int64_t SeedSent(const ReportInputs& in, const comm::LedgerKey& key) {
  const TrainOptions& o = in.options;
  const int64_t part_bytes = in.steps * o.model.NumParams() * 4 / (o.tp * o.pp);
  if (key.group == "tp") {
    std::optional<AllReducePattern> p = TensorParallelPattern(o, key, 0);
    if (!p || key.label == "cross_entropy" || key.label == "grad_norm" ||
        key.label == "sequence_parallel") {
      return -1;
    }
    // An all-reduce of M bytes is 2M; an all-gather or reduce-scatter, its half, M.
    const int64_t passes = key.primitive == comm::Primitive::kAllReduce ? 2 : 1;
    return in.steps * p->calls * passes * p->count * int64_t(p->element);
  }
  if (IsBoundary(key)) return in.steps * BoundaryBytesPerStep(o);  // the seed's bsh each way
  if (key.group != "dp") return -1;
  if (key.primitive == comm::Primitive::kAllReduce && key.phase == comm::Phase::kBackward) {
    return 2 * part_bytes;
  }
  // The seed's passes (it knows no recompute).
  int calls = parallel::ZeroCallsPerStep(o.zero, o.accumulation_steps(), key.primitive, key.phase);
  return calls > 0 ? calls * part_bytes : -1;
}

struct Row {
  int64_t calls = 0;
  int64_t sent_min = std::numeric_limits<int64_t>::max(), sent_max = 0;
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

}  // namespace

std::string FormatTopology(const TrainOptions& o) {
  std::string out = absl::StrFormat(
      "topology: world %d = dp %d x pp %d x tp %d (tp varies fastest, then dp, then pp)\n",
      o.world(), o.dp, o.pp, o.tp);
  // The members of a group: the ranks `same` accepts (those that differ from the rank
  // only along the group's dimension).
  auto members = [&](auto same) {
    std::vector<std::string> ranks;
    for (int q = 0; q < o.world(); ++q) {
      if (same(q)) ranks.push_back(absl::StrCat(q));
    }
    return absl::StrCat("[", absl::StrJoin(ranks, " "), "]");
  };
  for (int r = 0; r < o.world(); ++r) {
    const int dp = o.dp_rank(r), pp = o.pp_rank(r), tp = o.tp_rank(r);
    out += absl::StrFormat(
        "rank %d: dp %d pp %d tp %d | dp group %s | tp group %s | pp group %s\n", r, dp, pp, tp,
        members([&](int q) { return o.pp_rank(q) == pp && o.tp_rank(q) == tp; }),
        members([&](int q) { return o.pp_rank(q) == pp && o.dp_rank(q) == dp; }),
        members([&](int q) { return o.dp_rank(q) == dp && o.tp_rank(q) == tp; }));
  }
  return out;
}

std::string TimeTable(const ReportInputs& in) {
  const double steps = double(std::max<int64_t>(1, in.steps));
  std::string out = absl::StrFormat(
      "\ntime per step, ms: the step; held up in communication calls (collectives, and waits "
      "for sends and receives); idle at a pipeline stage boundary, waiting for the neighbour "
      "stage (the bubble); the rest, compute\n%-6s %10s %10s %10s %10s %8s %8s\n",
      "rank", "step", "compute", "comm", "idle", "comm %", "idle %");
  for (size_t r = 0; r < in.train_nanos.size(); ++r) {
    double comm_seconds = 0, idle_seconds = 0;
    for (const auto& [key, c] : in.traffic[r].calls()) {
      const comm::Phase p = key.phase;
      const bool training = p == comm::Phase::kForward || p == comm::Phase::kBackward ||
                            p == comm::Phase::kOptimizer || p == comm::Phase::kOther;
      if (!training) continue;
      (IsBoundary(key) ? idle_seconds : comm_seconds) += c.blocked_seconds;
    }
    const double step_ms = double(in.train_nanos[r]) / 1e6 / steps;
    const double idle_ms = std::min(step_ms, idle_seconds * 1e3 / steps);
    const double comm_ms = std::min(step_ms - idle_ms, comm_seconds * 1e3 / steps);
    auto share = [&](double ms) { return step_ms > 0 ? 100 * ms / step_ms : 0.0; };
    out += absl::StrFormat("%-6d %10.1f %10.1f %10.1f %10.1f %7.0f%% %7.0f%%\n", r, step_ms,
                           step_ms - comm_ms - idle_ms, comm_ms, idle_ms, share(comm_ms),
                           share(idle_ms));
  }
  return out;
}

std::string PipelineTable(const ReportInputs& in) {
  const TrainOptions& o = in.options;
  const int m = o.accumulation_steps();
  const std::vector<parallel::LayerRange> stages =
      parallel::StageLayers(o.model.n_layer, o.pp, o.pp_layers).value();
  std::string out = absl::StrFormat(
      "\npipeline (%s, %d stages, %d micro-batches of %d%s): time per step; the bubble is the idle "
      "share of the schedule's time, theory (N-1)/(m+N-1) = %.3f\n%-6s %-8s %10s %10s %8s\n",
      o.schedule, o.pp, m, o.micro_batch_size, o.recompute ? ", recompute" : "",
      parallel::TheoreticalBubble(o.pp, m), "stage", "layers", "busy ms", "idle ms", "bubble");
  const double steps = double(std::max<int64_t>(1, in.steps));
  for (int r = 0; r < int(in.step_nanos.size()); ++r) {
    if (o.dp_rank(r) != 0 || o.tp_rank(r) != 0) continue;  // one row per stage
    const parallel::LayerRange layers = stages[o.pp_rank(r)];
    const double step_ms = double(in.step_nanos[r]) / 1e6 / steps;
    const double busy_ms = double(in.busy_nanos[r]) / 1e6 / steps;
    out += absl::StrFormat("%-6d %-8s %10.1f %10.1f %8.3f\n", o.pp_rank(r),
                           absl::StrCat(layers.begin, "-", layers.end - 1), busy_ms,
                           step_ms - busy_ms, step_ms > 0 ? 1.0 - busy_ms / step_ms : 0.0);
  }
  return out;
}

int64_t GradientSyncBytesPerStep(int64_t params, int dp, int dp_rank, int64_t bucket_bytes,
                                 comm::Algorithm algorithm) {
  int64_t sent = 0;
  for (const comm::Chunk& bucket : parallel::GradientBuckets(params, bucket_bytes / 4)) {
    sent += comm::ExactTraffic(comm::Primitive::kAllReduce, algorithm, dp, dp_rank, -1,
                               bucket.count, 4).sent;
  }
  return sent;
}

MemoryFormula PredictedMemory(const TrainOptions& o, int rank) {
  const int dp_rank = o.dp_rank(rank);
  const model::ParameterLayout layout = StageLayout(o, rank);
  const int64_t phi = layout.total();
  const int64_t state_per_element = o.optimizer == "adamw" ? 8 : 4;
  MemoryFormula f;
  if (o.zero == 0) return {4 * phi, 4 * phi, state_per_element * phi};
  const parallel::Sharding sharding(parallel::ZeroUnits(layout, o.zero), o.dp, dp_rank);
  int64_t largest_chunk = 0;
  for (const parallel::Sharding::Piece& p : sharding.pieces()) {
    largest_chunk = std::max(largest_chunk, p.own.count);
  }
  // The units open at once (gpt.cc): the embeddings stay open on a first stage from the
  // lookup through its layers' forwards, and their gradients on a single stage from the LM
  // head through every backward; otherwise one unit at a time.
  int64_t largest_other = 0;
  for (size_t u = 1; u < layout.units().size(); ++u) {
    largest_other = std::max(largest_other, layout.units()[u].count());
  }
  const int64_t embeddings = layout.units()[model::ParameterLayout::kEmbeddings].count();
  auto open = [&](bool embeddings_held) {
    return embeddings_held ? embeddings + largest_other : std::max(embeddings, largest_other);
  };
  const bool first = layout.first_stage(), last = layout.last_stage();
  const int64_t shard = sharding.size();
  f.params = 4 * (o.zero == 3 ? shard + open(first) : phi);
  f.grads = 4 * (o.zero == 1 ? phi + shard : shard + largest_chunk + open(first && last));
  f.optimizer = state_per_element * shard;
  return f;
}

namespace {

// The report's rows: per key, calls and bytes sent per rank (min..max over the ranks that
// made the call), the formula's.
std::map<comm::LedgerKey, Row> Rows(const ReportInputs& in) {
  std::map<comm::LedgerKey, Row> rows;
  for (size_t r = 0; r < in.traffic.size(); ++r) {
    std::map<comm::LedgerKey, int64_t> sent;
    for (const auto& [key_peer, t] : in.traffic[r].transfers()) sent[key_peer.first] += t.bytes_sent;
    for (const auto& [key, c] : in.traffic[r].calls()) {
      Row& row = rows[key];
      row.calls = std::max(row.calls, c.calls);
      int64_t s = sent[key];
      // A point-to-point row is its senders' (the receivers book the same key, sending 0).
      if (key.primitive == comm::Primitive::kSendRecv && s == 0) continue;
      row.sent_min = std::min(row.sent_min, s);
      row.sent_max = std::max(row.sent_max, s);
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
      "group,op,algorithm,phase,scope,calls,sent_min,sent_max,exact_min,exact_max,seed,"
      "measured_over_seed,busbw_gbps_min,busbw_gbps_max,modelled\n";
  for (const auto& [key, row] : Rows(in)) {
    const int64_t seed = SeedSent(in, key);
    out += absl::StrFormat("%s,%s,%s,%s,%s,%d,%d,%d,%s,%s,%s,%s,%.4f,%.4f,%d\n", key.group,
                           comm::Name(key.primitive), comm::Name(key.algorithm),
                           comm::Name(key.phase), key.label, row.calls, row.sent_min, row.sent_max,
                           row.exact_known ? absl::StrCat(row.exact_min) : "",
                           row.exact_known ? absl::StrCat(row.exact_max) : "",
                           seed >= 0 ? absl::StrCat(seed) : "",
                           seed > 0 ? absl::StrFormat("%.6f", double(row.sent_max) / double(seed)) : "",
                           row.busbw_min, row.busbw_max, Modelled(key) ? 1 : 0);
  }
  return out;
}

std::string FormatReport(const ReportInputs& in) {
  const std::map<comm::LedgerKey, Row> rows = Rows(in);
  const TrainOptions& o = in.options;
  std::string out = absl::StrFormat(
      "traffic over %d steps (dp=%d x tp=%d x pp=%d, Φ = %d parameters, 4 bytes each; bytes sent "
      "per rank, min..max over ranks)\n"
      "%-9s %-15s %-6s %-10s %-17s %6s %22s %22s %14s %14s %14s\n",
      in.steps, o.dp, o.tp, o.pp, o.model.NumParams(), "group", "op", "algo", "phase", "scope", "calls",
      "measured", "exact formula", "seed formula", "measured/seed", "busbw GB/s");
  for (const auto& [key, row] : rows) {
    int64_t seed = SeedSent(in, key);
    out += absl::StrFormat(
        "%-9s %-15s %-6s %-10s %-17s %6d %22s %22s %14s %14s %14s\n", key.group,
        comm::Name(key.primitive), comm::Name(key.algorithm), comm::Name(key.phase),
        key.label.empty() ? "-" : key.label, row.calls, Range(row.sent_min, row.sent_max),
        row.exact_known ? Range(row.exact_min, row.exact_max) : "-",
        seed >= 0 ? absl::StrCat(seed) : "-",
        seed > 0 ? absl::StrFormat("%.3f", double(row.sent_max) / double(seed)) : "-",
        BandwidthRange(row));
  }
  for (const auto& [key, row] : rows) {
    if (!Modelled(key)) continue;
    out += "algo native: MPI's own collectives (--native_collectives); MPI does not tell what "
           "they move, so their bytes are modelled as the ring's, not observed\n";
    break;
  }
  if (in.train_nanos.size() == in.traffic.size()) out += TimeTable(in);
  if (o.pp > 1 && in.step_nanos.size() == in.traffic.size()) out += PipelineTable(in);
  const char* formulas[] = {
      "params 4Φ, grads 4Φ, optimizer state 8Φ (adamw) or 4Φ (sgd)",
      "params 4Φ, grads 4Φ + the reduced shard 4Φ/p, optimizer state on the shard",
      "params 4Φ, grads: the shard + the open units + one reduced chunk, optimizer state on the shard",
      "params: the shard + the gathered units, grads: the shard + the open units + one reduced "
      "chunk, optimizer state on the shard"};
  // The seed's Q6 form for fp16 mixed precision, which ZeRO-1 over dp and the split over
  // tp·pp give: 2Φ/(tp·pp) + 2Φ/(tp·pp) + 12Φ/(dp·tp·pp) (this run's fp32 counterpart is
  // the formula rows: 4 + 4 + 8 bytes a value, divided as the stage divides them).
  const double phi = double(o.model.NumParams()), split = double(o.tp) * o.pp;
  out += absl::StrFormat(
      "\nmemory per rank, peak bytes (zero=%d: %s)\nthe seed's fp16 model states per GPU, "
      "2Φ/(tp·pp) + 2Φ/(tp·pp) + 12Φ/(dp·tp·pp): %.0f bytes\n%-12s %12s %12s %12s %12s %12s %12s\n",
      o.zero, formulas[std::clamp(o.zero, 0, 3)],
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
                           f.optimizer, "-", "-", "-");
  }
  return out;
}

std::string ReportJson(const ReportInputs& in) {
  const TrainOptions& o = in.options;
  JsonWriter w;
  w.BeginObject().Key("config").BeginObject();
  w.Key("n_layer").Int(o.model.n_layer).Key("n_head").Int(o.model.n_head);
  w.Key("n_embd").Int(o.model.n_embd).Key("seq_len").Int(o.model.seq_len);
  w.Key("global_batch_size").Int(o.global_batch_size).Key("micro_batch_size").Int(o.micro_batch_size);
  w.Key("allreduce").String(o.allreduce).Key("bucket_mb").Double(o.bucket_mb);
  w.Key("world").Int(o.world()).Key("dp").Int(o.dp).Key("tp").Int(o.tp).Key("pp").Int(o.pp);
  w.Key("schedule").String(o.schedule).Key("recompute").Bool(o.recompute);
  w.Key("zero").Int(o.zero);
  w.Key("params").Int(o.model.NumParams());
  w.EndObject();
  w.Key("steps").Int(in.steps);
  w.Key("ranks").BeginArray();
  for (size_t r = 0; r < in.traffic.size(); ++r) {
    w.BeginObject().Key("rank").Int(int64_t(r)).Key("dp").Int(o.dp_rank(int(r)));
    w.Key("tp").Int(o.tp_rank(int(r))).Key("pp").Int(o.pp_rank(int(r)));
    std::map<comm::LedgerKey, comm::TransferTotals> totals;
    for (const auto& [key_peer, t] : in.traffic[r].transfers()) {
      totals[key_peer.first].bytes_sent += t.bytes_sent;
      totals[key_peer.first].bytes_recv += t.bytes_recv;
    }
    w.Key("traffic").BeginArray();
    for (const auto& [key, c] : in.traffic[r].calls()) {
      w.BeginObject();
      w.Key("group").String(key.group).Key("op").String(comm::Name(key.primitive));
      w.Key("algorithm").String(comm::Name(key.algorithm)).Key("phase").String(comm::Name(key.phase));
      w.Key("scope").String(key.label).Key("calls").Int(c.calls);
      w.Key("bytes_sent").Int(totals[key].bytes_sent).Key("bytes_recv").Int(totals[key].bytes_recv);
      w.Key("seconds").Double(c.seconds).Key("blocked_seconds").Double(c.blocked_seconds);
      w.Key("busbw_gbps").Double(BusBandwidth(o, key, c)).Key("modelled").Bool(Modelled(key));
      w.EndObject();
    }
    w.EndArray();
    const MemoryLedger& m = in.memory[r];
    w.Key("memory").BeginObject();
    w.Key("params").Int(m.peak(MemoryCategory::kParams)).Key("grads").Int(m.peak(MemoryCategory::kGrads));
    w.Key("optimizer").Int(m.peak(MemoryCategory::kOptimizer));
    w.Key("activations").Int(m.peak(MemoryCategory::kActivations));
    w.Key("comm").Int(m.peak(MemoryCategory::kComm)).Key("peak_total").Int(m.peak_total());
    w.EndObject().EndObject();
  }
  w.EndArray().EndObject();
  return w.str();
}

}  // namespace tally::train
