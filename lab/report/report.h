// The end-of-run report of a multi-rank run: traffic per group, primitive and phase next to
// its exact formula and the seed article's, time per rank, and memory per rank next to its
// formula. The tables, CSV and JSON are report.cc; the time per rank and the verdict
// lab/report/time.cc; the formulas, from the options alone, lab/report/formulas.cc.
//
//   group op          algo phase     scope calls  bytes sent/rank   exact formula  seed formula  measured/seed
//   dp    all_reduce  ring backward  -        20       234567890      234567890     260628480          0.900
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "lab/report/replay.h"
#include "core/runtime/comm/ledger/expected_calls.h"
#include "core/runtime/comm/ledger/ledger.h"
#include "core/runtime/memory_ledger.h"
#include "core/train/options.h"
#include "core/train/trainer.h"

namespace tally::report {

struct ReportInputs {
  const train::TrainOptions& options;
  int64_t steps;  // optimizer steps this run made
  const std::vector<comm::TrafficLedger>& traffic;  // by world rank
  const std::vector<MemoryLedger>& memory;          // by world rank
  // Pipeline parallelism: each rank's computing time and its schedules' time, nanoseconds.
  std::vector<int64_t> busy_nanos = {}, step_nanos = {};
  // Each rank's training steps, whole, nanoseconds.
  std::vector<int64_t> train_nanos = {};
  // Where the ranks ran (null: one node).
  std::shared_ptr<const comm::Nodes> nodes = nullptr;
  // With experts: the choices each expert of each layer received over the run, summed
  // over the ranks, [l·E + e] (train::Trainer::expert_tokens).
  std::vector<double> expert_tokens = {};
  // Each rank's forward and backward spans (recorded with --trace or --report_html).
  const std::vector<std::vector<train::Trainer::Span>>* spans = nullptr;
  // Each rank's own thread's CPU time in its training steps, nanoseconds.
  std::vector<int64_t> cpu_nanos = {};
  // The ranks that ran on rank 0's machine, and its cores (0: not known).
  int ranks_here = 0, cores = 0;
  // Rank 0's loss of each step of this run (from step first_step), and its validation
  // losses with their steps.
  int64_t first_step = 1;
  std::vector<float> losses = {};
  std::vector<std::pair<int64_t, float>> val_losses = {};
  // With compression (qwZ, PowerSGD): rank 0's compression_error of each step
  // (train::StepStats), from first_step.
  std::vector<double> compression_errors = {};
  // ModelledRun's replay, made once.
  mutable std::shared_ptr<const absl::StatusOr<std::vector<ReplayedRank>>> modelled = nullptr;
};

// Where the ranks ran: the report's nodes, or one node.
comm::Nodes NodesOf(const ReportInputs& in);

// The two clocks. Measured: this host's wall clock (the ledger's call times, the step's
// time, the timeline's stamps), which a shared host or more ranks than cores makes noisy.
// Modelled: each rank's timeline of the last step (its FLOPs, its calls and their bytes)
// replayed on options.ModelledTflops() and the run's links and nodes (lab/report/replay.h):
// the same figures on every run and every host.
const absl::StatusOr<std::vector<ReplayedRank>>& ModelledRun(const ReportInputs& in);
// The last step's waits on the measured clock (MeasureWaits); empty for a dry run (its
// code computes nothing) and for MPI ranks on several machines (their clocks differ).
std::vector<MeasuredWaits> MeasuredRun(const ReportInputs& in);
// The rank with the largest share of its step exposed, and that share (the verdict's).
std::pair<int, double> WorstModelled(const std::vector<ReplayedRank>& ranks);
// Whether thread ranks outnumber the cores of rank 0's machine.
bool Oversubscribed(const ReportInputs& in);

// --report=full: every table (the traffic rows, by link, on the modelled cluster, both
// clocks, who waited for whom, the verdict, routing, memory per rank next to its formula).
std::string FormatReport(const ReportInputs& in);
// --report=text, the default (lab/report/summary.cc): the traffic of a step, bytes in binary
// units, a layer's rows folded into one row per group, op, algorithm and phase, and
// set-up, evaluation and checkpoints one line each; the modelled-cluster table only with
// --cluster; then the summary, at most 25 lines of at most 100 characters: per group the
// bytes a rank sends a step, the peak memory per rank by category and whether the formula
// holds, the slowest rank's step split on both clocks, the pipeline bubble, the verdict.
std::string FormatSummaryReport(const ReportInputs& in);
// The traffic rows as CSV: group, op, algorithm, phase, scope, calls, sent_min, sent_max,
// sent_inter_min, sent_inter_max (the part that crossed a node), exact_min, exact_max, seed, measured_over_seed (empty where a row has no formula), the
// achieved bus bandwidth (nccl-tests' busbw, GB/s) min and max over the ranks, and
// bytes_as_ring (1: a transport's own collective, the ring's bytes booked for it).
std::string ReportCsv(const ReportInputs& in);
// The calls world rank `rank` makes in a step, as each strategy declares them
// (core/runtime/comm/ledger/expected_calls.h): the tensor-parallel layers', the pipeline's,
// the gradients' (buckets or ZeRO's, dense and experts'), the routing counts' and the
// step end's.
comm::ExpectedCalls RankExpectedCalls(const ReportInputs& in, int rank);
// The exact bytes world rank `rank` sends under `key` over the run: the join of its
// `calls` (RankExpectedCalls) with the row (ring, naive, uneven chunks: exact_traffic.h),
// or for the experts' all-to-all-v what its counts said; -1 for rows without one.
int64_t ExactSent(const ReportInputs& in, std::span<const comm::ExpectedCall> calls,
                  const comm::LedgerKey& key, int rank);
// The seed article's figure for the row over the run (its 2M per all-reduce of M bytes,
// M per all-gather or reduce-scatter); -1 where it has none.
int64_t SeedSent(const ReportInputs& in, const comm::LedgerKey& key);

// Per rank, the bytes it sent inside its node and across nodes, over the run.
std::string LinkTable(const ReportInputs& in);
// Per rank, the peak bytes by category next to the formula's (PredictedMemory), the seed's
// fp16 model states for the grid, the fullest rank against the modelled GPU, and what
// evaluation and sampling held outside the training peaks.
std::string MemoryTable(const ReportInputs& in);
// Per row, the time its messages would take on the options' modelled cluster (the α-β
// model per link class, core/runtime/comm/nodes.h) on the busiest rank, and per group the sum.
std::string ModelledTable(const ReportInputs& in);
// A rank's time per step, ms: the step; communication exposed (waited in a call, pipeline
// boundaries apart) and hidden (a call that ran while the rank computed: its time past
// the wait, within compute); idle at a pipeline boundary; the rest, compute.
struct RankTime {
  double step_ms = 0, compute_ms = 0, exposed_ms = 0, hidden_ms = 0, idle_ms = 0;
};
RankTime TimeOf(const ReportInputs& in, int rank);
// One run's times, for --repeat: on the measured clock the slowest rank's step and the
// largest exposed share of any rank; on the modelled clock (ModelledRun) the slowest
// rank's step and the verdict's share (NaN where a clock has no figure: a dry run's
// measured clock, a replay that failed).
struct RunTimes {
  double measured_step_ms = 0, measured_exposed = 0;
  double modelled_step_ms = 0, modelled_exposed = 0;
};
RunTimes TimesOf(const ReportInputs& in);
// --repeat's table: each clock's step and exposed share over the runs, min, median (the
// middle one, or the mean of the middle two) and max; measured figures to two
// significant figures.
std::string RepeatsTable(const train::TrainOptions& o, const std::vector<RunTimes>& runs);
// The seed's test on the modelled clock, one line: "communication-bound ...: communication
// exposed X% of the step on rank r ... waiting for rank q ... its largest exposed calls"
// above 30% on the worst rank, "compute-bound: ..." otherwise; then the measured clock's
// share, labelled as measured.
std::string Verdict(const ReportInputs& in);
// The measured clock's share, one line: "measured on this host ...: communication exposed
// X% of the step on rank r ...; its largest exposed rows per step: ..." (the rows above
// 30%), for a run that is not dry.
std::string MeasuredVerdict(const ReportInputs& in);
// Per rank, time per step on the measured clock: the whole step; held up in
// communication calls (collectives, and the waits of sends and receives); idle at a
// pipeline boundary (the bubble); the rest, compute; with more ranks than cores, the
// rank's CPU time beside it.
std::string TimeTable(const ReportInputs& in);
// Who waited for whom in the last step, in both clocks: per rank its exposed time, the
// part of it spent waiting for the peer that arrived last, and that peer.
std::string WaitsTable(const ReportInputs& in);
// Under --slow_rank, one line: what the other ranks waited for it, on both clocks.
std::string SlowRankLine(const ReportInputs& in);
// Under pipeline parallelism: per stage, busy and idle time per step, the measured bubble
// and the theory's.
std::string PipelineTable(const ReportInputs& in);
// With context parallelism, two lines: each cp rank's attention work against the least's
// (its pieces' visible pairs: zigzag evens them), each rank's compute on the modelled
// clock, and of the ring's sends (p2p) the share its blocks hid on the busiest sender.
std::string ContextLines(const ReportInputs& in);
// The modelled clock (ModelledRun): per rank the predicted step, its compute, exposed
// communication and pipeline idle, and the predicted step of the run (its slowest rank).
std::string ReplayTable(const ReportInputs& in);
// With experts: per layer, the choices an expert received per step (fewest, mean, most,
// and most / mean, the imbalance), and under --ep the bytes a rank's forward dispatch
// all-to-all-v of the layer sent per step (min..max over the ranks that ran it): uneven
// routing is uneven bytes.
std::string RoutingTable(const ReportInputs& in);

// {"config": {"n_layer", "n_head", "n_embd", "seq_len", "vocab_size", with experts
//  "n_experts", "moe_top_k", "capacity_factor" and "ep", "sequence_parallel", "overlap",
//  "dry_run", ..., "world", "dp", "tp", "pp", "zero" (and the sharding and compression
//  flags where one is on: "zero_shard", ..., "powersgd_warmup_steps", "onebit_warmup_steps"), "order", "nodes", "gpus_per_node",
//  "link_intra_gbps", "link_intra_latency_us", "link_inter_gbps", "link_inter_latency_us",
//  "params"}, "steps": S, "first_step", "losses": [rank 0's loss of each step from
//  first_step], "val_losses": [{"step", "loss"}] (these three not in a dry run; with
//  compression also "compression_errors": [rank 0's error of each step]), with
//  experts "routing": [{"layer", "expert_tokens_per_step": [E]}],
//  "ranks": [{"rank", "dp", "tp", "pp", "node", "traffic": [{"group", "op", "algorithm",
//  "phase", "scope", "calls", "bytes_sent", "bytes_recv", "bytes_sent_intra",
//  "bytes_sent_inter", "seconds", "blocked_seconds", "busbw_gbps", "bytes_as_ring",
//  "modelled_seconds", and where the row has them "exact_bytes_sent" and
//  "seed_bytes_sent"}], "time": {"step_ms", "compute_ms", "comm_exposed_ms",
//  "comm_hidden_ms", "idle_ms"}, "memory":
//  {"params", "grads", "optimizer", "activations", "comm", "peak_total"},
//  "memory_formula": {"params", "grads", "optimizer", and where it has one "activations"},
//  "peers": [bytes sent to each world rank over the run], and where spans were recorded
//  "spans": [{"name", "start_ms", "end_ms"}]: the last step's forwards and backwards, in
//  ms from the first span of that step on any rank}]}
std::string ReportJson(const ReportInputs& in);

// The peak bytes the memory formulas predict for one rank (fp32): params 4Φ, grads 4Φ,
// AdamW's m and v 8Φ (SGD's buffer 4Φ); ZeRO divides what its stage shards by p (exactly:
// the rank's shard, core/parallel/zero/zero.h) and adds what it holds for a while: ZeRO-1 the
// reduced gradient shard; ZeRO-2/3 the open gradient units and one reduced chunk; ZeRO-3
// the gathered parameter units. Open at once: the embeddings with the largest other unit
// where the stage holds the embeddings across its layers (parameters: a first stage;
// gradients: a single stage), else the larger of the two.
//
// The activations (core/model/activations.h's closed forms): the sets of the micro-batches a
// stage holds at once — one without a pipeline; on a pipeline stage, for each of its
// chunks, as many as the schedule has in flight there (parallel::InFlight), or with
// --recompute one whole set, the stage input it recomputes from and the ids and input of
// the others — plus the scratch, the loss's 3n floats and, under mixed precision, the
// fp32 working copies of the units in use; -1 for bf16 gradients under ZeRO-2/3 with
// --overlap (no closed form yet).
struct MemoryFormula {
  int64_t params = 0, grads = 0, optimizer = 0;
  int64_t activations = 0;
};
MemoryFormula PredictedMemory(const train::TrainOptions& options, int world_rank);

}  // namespace tally::report
