// The plan tests' small model (4 layers of 16 channels, 2 heads), one step of the run a
// plan describes on thread ranks, the ledger rows each planned strategy's bytes are, and
// the check of a plan against a dry run.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

#include "core/parallel/pipeline_schedule.h"
#include "lab/plan/measured.h"
#include "lab/plan/plan.h"
#include "core/runtime/comm/ledger/ledger.h"
#include "tests/train/run_ranks.h"

namespace tally::plan {

// One of a few values, drawn at random from a fixed seed (the random sweeps of shapes and
// grids: the same seed draws the same sweep on every machine).
class Pick {
 public:
  explicit Pick(uint32_t seed) : random_(seed) {}
  int operator()(std::initializer_list<int> values) {
    const size_t i = std::uniform_int_distribution<size_t>(0, values.size() - 1)(random_);
    return *(values.begin() + i);
  }

 private:
  std::mt19937 random_;
};

// A 4-layer GPT of 16 channels and 2 heads, b = 2, s = 16.
inline PlanInput SmallPlan() {
  PlanModel model{"small", 0, 0, 0, true, {}};
  model.config.n_layer = 4;
  model.config.n_head = 2;
  model.config.n_embd = 16;
  model.config.seq_len = 16;
  model.params = model.config.NumParams();
  model.layers = 4;
  model.hidden = 16;
  PlanInput in{model};
  in.batch = 2;
  in.seq_len = 16;
  return in;
}

// One step of the run the plan describes.
inline train::RunResult RunPlan(const PlanInput& in, parallel::PipelineSchedule schedule = {}) {
  train::TrainOptions o = plan::PlanAsTrainOptions(in);
  o.training.steps = 1;
  o.data.eval_every = 0;
  o.sampling.sample_bytes = 0;
  o.training.threads = 1;
  o.parallel.schedule = schedule;
  return RunRanks(o);
}

// The most bytes any rank sent in `rows`.
inline int64_t BusiestSent(const std::vector<comm::TrafficLedger>& traffic, const LedgerRows& rows) {
  return MostSent(traffic, rows);
}

// The ledger rows a planned strategy's bytes are (lab/plan/measured.h).
inline LedgerRows RowsOf(const std::string& strategy, int zero) {
  return PlanLedgerRows(strategy, zero);
}

// A dry run of `o` (the options `in` describes) against the plan: every strategy's exact
// bytes of the busiest GPU (and tp's of one layer), the model states at the precision and
// the activations equal the run's ledgers (a dry run's ledgers are a real run's:
// dry_run_test.cc). Returns the strategies compared.
inline int ExpectPlanIsTheDryRun(const PlanInput& in, const train::TrainOptions& o) {
  const train::RankLedgers run = train::RunSteps(o);
  int compared = 0;
  for (const PlanRow& row : Plan(in)) {
    const auto rows = RowsOf(row.strategy, in.zero);
    if (!rows) continue;
    ++compared;
    const int64_t most = BusiestSent(run.traffic, rows);
    EXPECT_EQ(double(most), row.exact_bytes_per_gpu) << row.strategy;
    if (row.exact_bytes_per_layer > 0) {  // tp: every layer's rows, layer 0's here
      EXPECT_EQ(double(BusiestSent(run.traffic, [](const comm::LedgerKey& k) {
                  return k.group == "tp" && k.label.rfind("layer0.", 0) == 0 &&
                         !k.label.ends_with(".experts");
                })),
                row.exact_bytes_per_layer);
    }
  }
  int64_t states = 0, activations = 0;
  for (const MemoryLedger& m : run.memory) {
    states = std::max(states, m.peak(MemoryCategory::kParams) + m.peak(MemoryCategory::kGrads) +
                                  m.peak(MemoryCategory::kOptimizer));
    activations = std::max(activations, m.peak(MemoryCategory::kActivations));
  }
  EXPECT_DOUBLE_EQ(PlanMemoryPerGpu(in)[in.precision == DType::kF32 ? 0 : 1].bytes_per_gpu,
                   double(states));
  EXPECT_EQ(PlanActivationsPerGpu(in).bytes_per_gpu, activations);
  return compared;
}

}  // namespace tally::plan
