// tally_plan's rows for experts: the dp, edp and ep rows of a run with experts over ep of the
// dp ranks are the bytes that run measures.
#include <algorithm>
#include <cstdint>
#include <functional>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "lab/plan/plan.h"
#include "tests/plan/small_plan.h"
#include "tests/train/run_ranks.h"

namespace tally::plan {
namespace {

// SmallPlan's model with 4 experts, top 2, in fp32, over dp 4 of which ep 2.
PlanInput ExpertPlan() {
  PlanInput in = SmallPlan();
  in.model = WithExperts(in.model, 4, 2);
  in.n_experts = 4;
  in.precision = DType::kF32;
  in.bytes_per_value = 4;
  in.dp = 4;
  in.ep = 2;
  return in;
}

// Experts over ep of the dp ranks: the dp and edp rows are what a run measures, the
// all-to-all row the balanced formula, and a GPU holds E/ep of the experts.
TEST(PlanExperts, DpAndEdpRowsAreTheMeasuredOnesAndTheAllToAllIsBalanced) {
  const PlanInput in = ExpertPlan();
  EXPECT_EQ(in.model.params, in.model.config.NumParams());
  const train::RunResult run = RunPlan(in);
  int compared = 0;
  for (const PlanRow& row : Plan(in)) {
    std::function<bool(const comm::LedgerKey&)> rows;
    if (row.strategy == "dp all-reduce") {
      rows = [](const comm::LedgerKey& k) { return k.group == "dp" && k.label.empty(); };
    } else if (row.strategy == "edp all-reduce (experts)") {
      rows = [](const comm::LedgerKey& k) { return k.group == "edp"; };
    } else if (row.strategy == "ep all-to-all") {
      // b·s·k rows of h fp32 values a layer, four times, half of them leaving; the counts.
      const double values = 2.0 * 16 * 2 * 16;
      EXPECT_EQ(row.exact_bytes_per_gpu, 4 * 4 * values / 2 * 4 + 4 * (4 / 2) * 8);
      ++compared;
      continue;
    } else {
      continue;
    }
    const int64_t most = BusiestSent(run.traffic, rows);
    EXPECT_EQ(double(most), row.exact_bytes_per_gpu) << row.strategy;
    ++compared;
  }
  EXPECT_EQ(compared, 3);
  // fp32 model states: 16 bytes a value of the non-expert part and half the experts.
  const double h = 16, experts = 4 * 4 * (8 * h * h + 5 * h);
  EXPECT_DOUBLE_EQ(PlanMemoryPerGpu(in)[0].bytes_per_gpu,
                   16 * (double(in.model.params) - experts / 2));
}

// ZeRO under expert parallelism: the dense part sharded over dp, the experts over edp;
// the zero-N row is a run's reduce-scatters and all-gathers over both groups.
TEST(PlanExperts, ZeroRowsAreTheMeasuredDpAndEdpPasses) {
  for (int zero : {1, 2, 3}) {
    PlanInput in = ExpertPlan();
    in.zero = zero;
    const train::RunResult run = RunPlan(in);
    int64_t most = 0, edp = 0;
    for (const comm::TrafficLedger& ledger : run.traffic) {
      most = std::max(most, ledger.Sum([](const comm::LedgerKey& k) {
        return (k.group == "dp" || k.group == "edp") && k.primitive != comm::Primitive::kAllReduce;
      }).bytes_sent);
      edp += ledger.Sum([](const comm::LedgerKey& k) { return k.group == "edp"; }).bytes_sent;
    }
    EXPECT_GT(edp, 0) << zero;
    int compared = 0;
    for (const PlanRow& row : Plan(in)) {
      if (row.strategy != absl::StrCat("zero-", zero)) continue;
      EXPECT_EQ(double(most), row.exact_bytes_per_gpu) << row.strategy;
      ++compared;
    }
    EXPECT_EQ(compared, 1) << zero;
    // fp32 model states: what the run's busiest rank held, to the byte; its optimizer
    // state a GPU's half of the experts sharded over its 2 edp ranks, the rest over the 4
    // dp ranks.
    int64_t states = 0;
    for (const MemoryLedger& m : run.memory) {
      states = std::max(states, m.peak(MemoryCategory::kParams) + m.peak(MemoryCategory::kGrads) +
                                    m.peak(MemoryCategory::kOptimizer));
    }
    EXPECT_DOUBLE_EQ(PlanMemoryPerGpu(in)[0].bytes_per_gpu, double(states)) << zero;
    const double h = 16, experts = 4 * 4 * (8 * h * h + 5 * h) / 2, dense = double(in.model.params) - 2 * experts;
    const report::MemoryFormula f = report::PredictedMemory(PlanAsTrainOptions(in), 0);
    EXPECT_NEAR(double(f.optimizer), 8 * (dense / 4 + experts / 2), 8.0 * 40) << zero;  // uneven chunks
  }
}

}  // namespace
}  // namespace tally::plan
