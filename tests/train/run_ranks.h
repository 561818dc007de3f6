// What the multi-rank training tests share: run a configuration on its ranks (threads)
// and collect each rank's losses, parameters, traffic and memory; compare two runs.
#pragma once

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "lab/report/report.h"
#include "core/runtime/comm/launch.h"
#include "core/runtime/comm/transport/nccl/nccl_transport.h"
#include "tests/sweep.h"
#include "core/train/measure.h"
#include "core/train/trainer.h"

namespace tally::train {

// A short, quiet run: 5 steps at a high learning rate (the runs must move), one BLAS
// thread per rank, no evaluation or sample.
inline TrainOptions ShortRun() {
  TrainOptions o;
  o.training.steps = 5;
  o.training.lr = 1e-2f;
  o.training.warmup_steps = 1;
  o.data.eval_every = 0;
  o.sampling.sample_bytes = 0;
  o.training.threads = 1;
  return o;
}

// The model the grid suites (3D, mixed precision) run: 4 layers of 16 channels, SGD
// (parameters compared: see tensor_parallel_test.cc), micro-batches of one sequence.
inline TrainOptions TinyGrid(int global_batch) {
  TrainOptions o = ShortRun();
  o.training.optimizer = OptimizerKind::kSgd;
  o.model.n_layer = 4;
  o.model.n_head = 4;
  o.model.n_embd = 16;
  o.model.seq_len = 16;
  o.training.global_batch_size = global_batch;
  o.training.micro_batch_size = 1;
  return o;
}

// The data-parallel suites' model: Φ = C·(V + T + 12C + 15) = 10·(256 + 16 + 120 + 15) =
// 4070, divisible by neither 3 nor 4; 12 sequences a step in micro-batches of one, so
// 12 / dp micro-batches a rank: accumulation everywhere.
inline TrainOptions TinyDataParallel(int dp) {
  TrainOptions o = ShortRun();
  o.model.n_layer = 1;
  o.model.n_head = 2;
  o.model.n_embd = 10;
  o.model.seq_len = 16;
  o.training.global_batch_size = 12;
  o.training.micro_batch_size = 1;
  o.parallel.dp = dp;
  return o;
}

// A test's grid of ranks, with named fields (Grid{.dp = 2, .pp = 2, .zero = 1}) and a
// printable name: the strategies' flags a test sets on its options.
struct Grid {
  int dp = 1, tp = 1, pp = 1, zero = 0;
  bool sequence_parallel = false;
  parallel::PipelineSchedule schedule = parallel::PipelineSchedule::k1F1B;
  int virtual_stages = 1;           // chunks a stage (interleaved)
  std::vector<int> pp_layers = {};  // empty: balanced
  bool recompute = false;
  bool recompute_attention = false;  // selective recompute
  bool recompute_layers = false;     // a pipeline's full recompute layer by layer
  bool pp_scatter_gather = false;
  int micro_batches = 0;  // per rank and step (0: the options' own)
  comm::Algorithm allreduce = comm::Algorithm::kRing;
  bool native_collectives = false;
  int cp = 1;  // context parallelism, with its communication and pieces
  parallel::CpComm cp_comm = parallel::CpComm::kP2p;
  parallel::CpLoadBalance cp_load_balance = parallel::CpLoadBalance::kZigzag;

  // `o` with the grid's flags; with micro_batches, micro-batches of global / (dp·m).
  TrainOptions On(TrainOptions o) const {
    o.parallel.dp = dp;
    o.parallel.tp = tp;
    o.parallel.pp = pp;
    o.parallel.zero = zero;
    o.parallel.sequence_parallel = sequence_parallel;
    o.parallel.schedule = schedule;
    o.parallel.virtual_stages = virtual_stages;
    o.parallel.pp_layers = pp_layers;
    o.parallel.recompute = recompute;
    o.parallel.recompute_attention = recompute_attention;
    o.parallel.recompute_layers = recompute_layers;
    o.parallel.pp_scatter_gather = pp_scatter_gather;
    if (micro_batches > 0) {
      o.training.micro_batch_size = o.training.global_batch_size / (dp * micro_batches);
    }
    o.parallel.allreduce = allreduce;
    o.placement.native_collectives = native_collectives;
    o.parallel.cp = cp;
    o.parallel.cp_comm = cp_comm;
    o.parallel.cp_load_balance = cp_load_balance;
    return o;
  }
  // "dp2_tp1_pp2_zero3", then what is set: "_sp", the schedule (pp > 1, or gpipe) and its
  // chunks ("_interleaved_v2"), "_m4",
  // "_uneven", "_recompute", "_selective", "_layers", "_naive", "_native", "_cp2_p2p_zigzag".
  std::string Name() const {
    std::string name = "dp" + std::to_string(dp) + "_tp" + std::to_string(tp) + "_pp" +
                       std::to_string(pp) + "_zero" + std::to_string(zero);
    if (sequence_parallel) name += "_sp";
    if (pp > 1 || schedule != parallel::PipelineSchedule::k1F1B) {
      name += std::string("_") + parallel::Name(schedule);
    }
    if (virtual_stages > 1) name += "_v" + std::to_string(virtual_stages);
    if (micro_batches > 0) name += "_m" + std::to_string(micro_batches);
    if (!pp_layers.empty()) name += "_uneven";
    if (recompute) name += "_recompute";
    if (recompute_attention) name += "_selective";
    if (recompute_layers) name += "_layers";
    if (pp_scatter_gather) name += "_scatter";
    if (allreduce == comm::Algorithm::kNaive) name += "_naive";
    if (native_collectives) name += "_native";
    if (cp > 1) {
      name += "_cp" + std::to_string(cp) + "_" + parallel::Name(cp_comm) + "_" +
              parallel::Name(cp_load_balance);
    }
    return name;
  }
};

inline std::string GridName(const ::testing::TestParamInfo<Grid>& info) { return info.param.Name(); }
inline void PrintTo(const Grid& g, std::ostream* os) { *os << g.Name(); }

struct RunResult {
  std::vector<float> losses;
  std::vector<double> compression_errors;  // each step's (with compression)
  std::vector<float> params;
  std::vector<comm::TrafficLedger> traffic;
  std::vector<MemoryLedger> memory;
};

inline RunResult RunRanks(const TrainOptions& o) {
  RunResult result;
  result.traffic.resize(o.world());
  result.memory.resize(o.world());
  comm::LaunchOptions launch;
  launch.world_size = o.world();
  launch.comm.native_collectives = o.placement.native_collectives;
  launch.comm.nodes = o.PlacedNodes();
  if (o.placement.backend == Backend::kNccl) launch.world_transport = comm::nccl::WorldTransport;
  SetIntraOpThreads(o, o.world());
  // One rank without ZeRO is the serial run; ZeRO runs its stage even over one rank, and
  // NCCL makes its communicators even for one.
  const bool communicate =
      o.world() > 1 || o.parallel.zero > 0 || o.placement.backend == Backend::kNccl;
  absl::Status status = comm::RunThreadRanks(launch, [&](comm::Communicator& world) -> absl::Status {
    ASSIGN_OR_RETURN(auto trainer, Trainer::Create(o, communicate ? &world : nullptr));
    world.ledger().Clear();  // count the steps only
    for (int64_t k = 0; k < o.training.steps; ++k) {
      ASSIGN_OR_RETURN(StepStats s, trainer->TrainStep(k));
      if (world.rank() == 0) {
        result.losses.push_back(s.loss);
        result.compression_errors.push_back(s.compression_error);
      }
    }
    result.traffic[world.rank()] = world.ledger();
    result.memory[world.rank()] = world.memory();
    ASSIGN_OR_RETURN(Tensor params, trainer->Parameters());  // whole: gathered from the parts
    if (world.rank() == 0) {
      result.params.assign(params.data<float>(), params.data<float>() + params.numel());
    }
    if (!o.checkpoint.save.empty()) {
      RETURN_IF_ERROR(trainer->Save(o.checkpoint.save, o.training.steps));
    }
    return absl::OkStatus();
  });
  EXPECT_TRUE(status.ok()) << status;
  return result;
}

// Every rank's ledgers over `o`'s steps on thread ranks (core/train/measure.h).
inline RankLedgers RunSteps(const TrainOptions& o,
                            const std::function<void(int rank, Trainer&)>& after = {}) {
  absl::StatusOr<RankLedgers> run = MeasureSteps(o, after);
  EXPECT_TRUE(run.ok()) << run.status();
  if (run.ok()) return *std::move(run);
  return RankLedgers{std::vector<comm::TrafficLedger>(size_t(o.world())),
                     std::vector<MemoryLedger>(size_t(o.world()))};
}

// Whether a test holds its grid to the single-rank run. The small form, which the
// ThreadSanitizer pass runs, leaves the single-rank runs out: one rank on one thread gives
// the sanitizer nothing to watch (they were two fifths of its time), and the full form,
// the Release pass, compares every grid.
inline constexpr bool kCompareWithSerial = !kSmallForm;

inline void ExpectSameLosses(const RunResult& a, const RunResult& b) {
  ASSERT_EQ(a.losses.size(), b.losses.size());
  for (size_t k = 0; k < a.losses.size(); ++k) {
    EXPECT_NEAR(a.losses[k], b.losses[k], 1e-5 * std::abs(b.losses[k])) << "step " << k;
  }
}

// The same losses, and final parameters within 1e-5.
inline void ExpectSameRun(const RunResult& a, const RunResult& b) {
  ExpectSameLosses(a, b);
  ASSERT_EQ(a.params.size(), b.params.size());
  for (size_t i = 0; i < a.params.size(); ++i) {
    ASSERT_NEAR(a.params[i], b.params[i], 1e-5 * std::max(1.0f, std::abs(b.params[i]))) << i;
  }
}

// Every row of every rank that the report has a formula for: measured == formula (a
// point-to-point receiver's row too: it sends nothing).
inline void ExpectReportRowsExact(const TrainOptions& o, const RunResult& run) {
  report::ReportInputs in{o,  o.training.steps, run.traffic, run.memory, {}, {},
                          {}, o.PlacedNodes()};
  int checked = 0;
  for (int r = 0; r < o.world(); ++r) {
    std::map<comm::LedgerKey, int64_t> sent;
    for (const auto& [key_peer, t] : run.traffic[r].transfers()) sent[key_peer.first] += t.bytes_sent;
    const comm::ExpectedCalls expected = report::RankExpectedCalls(in, r);
    for (const auto& [key, calls] : run.traffic[r].calls()) {
      const int64_t exact = report::ExactSent(in, expected, key, r);
      if (exact < 0) continue;
      EXPECT_EQ(sent[key], exact) << "rank " << r << ": " << key.group << " " << comm::Name(key.primitive)
                                  << " " << comm::Name(key.phase) << " " << key.label;
      ++checked;
    }
  }
  EXPECT_GT(checked, 0);
}

// Every rank's model-state peaks (parameters, gradients, optimizer state) == the formula.
inline void ExpectMemoryFormulaExact(const TrainOptions& o, const RunResult& run) {
  for (int r = 0; r < o.world(); ++r) {
    const report::MemoryFormula f = report::PredictedMemory(o, r);
    EXPECT_EQ(run.memory[r].peak(MemoryCategory::kParams), f.params) << "rank " << r;
    EXPECT_EQ(run.memory[r].peak(MemoryCategory::kGrads), f.grads) << "rank " << r;
    EXPECT_EQ(run.memory[r].peak(MemoryCategory::kOptimizer), f.optimizer) << "rank " << r;
    if (f.activations >= 0) {
      EXPECT_EQ(run.memory[r].peak(MemoryCategory::kActivations), f.activations) << "rank " << r;
    }
  }
}

// `o` on its ranks reproduces `serial` (one rank, the same micro-batches; in the full
// form), and every report row and model-state memory formula of its ranks is exact.
inline void ExpectGridMatchesSerial(const TrainOptions& o, const TrainOptions& serial) {
  const RunResult run = RunRanks(o);
  if (kCompareWithSerial) ExpectSameRun(run, RunRanks(serial));
  ExpectReportRowsExact(o, run);
  ExpectMemoryFormulaExact(o, run);
}

// Every rank's timeline of the last training step of `o` on its ranks (Trainer::Run
// records it; core/runtime/timeline.h), placed on o's nodes.
inline std::vector<Timeline> LastStepTimelines(const TrainOptions& o) {
  std::vector<Timeline> timelines(size_t(o.world()));
  comm::LaunchOptions launch;
  launch.world_size = o.world();
  launch.comm.nodes = o.PlacedNodes();
  absl::Status status = comm::RunThreadRanks(launch, [&](comm::Communicator& world) -> absl::Status {
    ASSIGN_OR_RETURN(auto trainer, Trainer::Create(o, &world));
    std::ostream null(nullptr);
    RETURN_IF_ERROR(trainer->Run(null));
    timelines[size_t(world.rank())] = world.ledger().timeline();
    return absl::OkStatus();
  });
  EXPECT_TRUE(status.ok()) << status;
  return timelines;
}

// Trains the first `steps` steps of `o` on its ranks and saves at `path`.
inline void TrainAndSave(TrainOptions o, int64_t steps, const std::string& path) {
  comm::LaunchOptions launch;
  launch.world_size = o.world();
  absl::Status status =
      comm::RunThreadRanks(launch, [&](comm::Communicator& world) -> absl::Status {
        ASSIGN_OR_RETURN(
            auto trainer,
            Trainer::Create(o, o.world() > 1 || o.parallel.zero > 0 ? &world : nullptr));
        for (int64_t k = 0; k < steps; ++k) RETURN_IF_ERROR(trainer->TrainStep(k).status());
        return trainer->Save(path, steps);
      });
  ASSERT_TRUE(status.ok()) << status;
}

// Resumes `o` from o.checkpoint.load and returns the losses of the remaining steps.
inline std::vector<float> Resume(const TrainOptions& o) {
  comm::LaunchOptions launch;
  launch.world_size = o.world();
  std::vector<float> losses;
  absl::Status status =
      comm::RunThreadRanks(launch, [&](comm::Communicator& world) -> absl::Status {
        ASSIGN_OR_RETURN(
            auto t, Trainer::Create(o, o.world() > 1 || o.parallel.zero > 0 ? &world : nullptr));
        for (int64_t k = t->start_step(); k < o.training.steps; ++k) {
          ASSIGN_OR_RETURN(StepStats s, t->TrainStep(k));
          if (world.rank() == 0) losses.push_back(s.loss);
        }
        return absl::OkStatus();
      });
  EXPECT_TRUE(status.ok()) << status;
  return losses;
}

}  // namespace tally::train
