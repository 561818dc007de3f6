// The end-of-run report of a multi-rank run: traffic per group, primitive and phase next to
// its exact formula and the seed article's, and memory per rank next to its formula.
//
//   group op          algo phase     scope calls  bytes sent/rank   exact formula  seed formula  measured/seed
//   dp    all_reduce  ring backward  -        20       234567890      234567890     260628480          0.900
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/comm/ledger.h"
#include "runtime/memory_ledger.h"
#include "train/options.h"

namespace tally::train {

struct ReportInputs {
  const TrainOptions& options;
  int64_t steps;  // optimizer steps this run made
  const std::vector<comm::TrafficLedger>& traffic;  // by world rank
  const std::vector<MemoryLedger>& memory;          // by world rank
  // Pipeline parallelism: each rank's computing time and its schedules' time, nanoseconds.
  std::vector<int64_t> busy_nanos = {}, step_nanos = {};
  // Each rank's training steps, whole, nanoseconds.
  std::vector<int64_t> train_nanos = {};
};

std::string FormatReport(const ReportInputs& in);
// The traffic rows as CSV: group, op, algorithm, phase, scope, calls, sent_min, sent_max,
// exact_min, exact_max, seed, measured_over_seed (empty where a row has no formula), and
// the achieved bus bandwidth (nccl-tests' busbw, GB/s) min and max over the ranks.
std::string ReportCsv(const ReportInputs& in);
// The exact bytes world rank `rank` sends under `key` over the run, by the formula of the
// row (ring, naive, uneven chunks: exact_traffic.h); -1 for rows without one.
int64_t ExactSent(const ReportInputs& in, const comm::LedgerKey& key, int rank);
// Every rank's (dp, pp, tp) coordinates and the members of each of its groups.
std::string FormatTopology(const TrainOptions& options);
// Per rank, time per step: the whole step, inside communication calls (transfers and the
// waits for peers), and the rest (compute).
std::string TimeTable(const ReportInputs& in);
// Under pipeline parallelism: per stage, busy and idle time per step, the measured bubble
// and the theory's.
std::string PipelineTable(const ReportInputs& in);

// {"config": {..., "world", "dp", "tp", "pp", "zero", "params"}, "steps": S,
//  "ranks": [{"rank", "dp", "tp", "pp", "traffic": [{"group", "op", "algorithm", "phase",
//  "scope", "calls", "bytes_sent", "bytes_recv", "seconds", "busbw_gbps"}], "memory":
//  {"params", "grads", "optimizer", "activations", "comm", "peak_total"}}]}
std::string ReportJson(const ReportInputs& in);

// The peak bytes the memory formulas predict for one rank (fp32): params 4Φ, grads 4Φ,
// AdamW's m and v 8Φ (SGD's buffer 4Φ); ZeRO divides what its stage shards by p (exactly:
// the rank's shard, parallel/zero.h) and adds what it holds for a while: ZeRO-1 the
// reduced gradient shard; ZeRO-2/3 the open gradient units (the embeddings, open through
// all of backward, and the largest other unit) and one reduced chunk; ZeRO-3 the gathered
// parameter units (the same two).
struct MemoryFormula {
  int64_t params = 0, grads = 0, optimizer = 0;
};
MemoryFormula PredictedMemory(const TrainOptions& options, int world_rank);

// Bytes rank `dp_rank` of `dp` ranks sends per step to sum the gradients of `params`
// parameters in buckets of `bucket_bytes` with `algorithm` (exact_traffic.h per bucket).
int64_t GradientSyncBytesPerStep(int64_t params, int dp, int dp_rank, int64_t bucket_bytes,
                                 comm::Algorithm algorithm);

}  // namespace tally::train
