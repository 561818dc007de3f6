// Selective recompute (--recompute_granularity=selective): no layer keeps attention's
// probabilities, and backward makes them again from the kept qkv. On every layout it
// trains bit for bit as the same layout without it (losses, parameters, every traffic
// row), and every rank's activation peak equals the closed form (model/activations.h):
// at pp = 1, L·b·(nh/tp)·T² fp32 kept less, one b·(nh/tp)·T² scratch more.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/train/run_ranks.h"
#include "train/plan.h"
#include "train/report.h"

namespace tally::train {
namespace {

constexpr parallel::PipelineSchedule kInterleaved = parallel::PipelineSchedule::kInterleaved;

struct Case {
  Grid grid;
  DType precision = DType::kF32;
  int experts = 0;
};

TrainOptions On(const Case& c, bool selective) {
  Grid g = c.grid;
  g.recompute_attention = selective;
  TrainOptions o = g.On(TinyGrid(4 * g.dp));
  o.precision = c.precision;
  o.model.n_experts = c.experts;
  o.bucket_mb = 20000.0 / (1 << 20);
  return o;
}

// The same bits: losses, parameters, and every rank's traffic (bytes and calls, by key
// and peer).
void ExpectIdentical(const RunResult& a, const RunResult& b) {
  ASSERT_EQ(a.losses.size(), b.losses.size());
  EXPECT_EQ(0, std::memcmp(a.losses.data(), b.losses.data(), sizeof(float) * a.losses.size()));
  ASSERT_EQ(a.params.size(), b.params.size());
  EXPECT_EQ(0, std::memcmp(a.params.data(), b.params.data(), sizeof(float) * a.params.size()));
  ASSERT_EQ(a.traffic.size(), b.traffic.size());
  for (size_t r = 0; r < a.traffic.size(); ++r) {
    const auto& ta = a.traffic[r].transfers();
    const auto& tb = b.traffic[r].transfers();
    ASSERT_EQ(ta.size(), tb.size()) << "rank " << r;
    for (auto i = ta.begin(), j = tb.begin(); i != ta.end(); ++i, ++j) {
      EXPECT_TRUE(i->first == j->first) << "rank " << r;
      EXPECT_EQ(i->second.bytes_sent, j->second.bytes_sent) << "rank " << r;
      EXPECT_EQ(i->second.bytes_recv, j->second.bytes_recv) << "rank " << r;
    }
    const auto& ca = a.traffic[r].calls();
    const auto& cb = b.traffic[r].calls();
    ASSERT_EQ(ca.size(), cb.size()) << "rank " << r;
    for (auto i = ca.begin(), j = cb.begin(); i != ca.end(); ++i, ++j) {
      EXPECT_TRUE(i->first == j->first) << "rank " << r;
      EXPECT_EQ(i->second.calls, j->second.calls) << "rank " << r;
      EXPECT_EQ(i->second.payload_bytes, j->second.payload_bytes) << "rank " << r;
    }
  }
}

class SelectiveRecomputeTest : public ::testing::TestWithParam<Case> {};

TEST_P(SelectiveRecomputeTest, TrainsBitForBitWithExactActivationMemory) {
  const Case& c = GetParam();
  const TrainOptions plain = On(c, false), selective = On(c, true);
  ASSERT_TRUE(selective.Validate().ok()) << selective.Validate();
  const RunResult without = RunRanks(plain), with = RunRanks(selective);
  ExpectIdentical(with, without);
  if (selective.world() == 1 && selective.zero == 0) return;  // the serial run keeps no ledger
  ExpectMemoryFormulaExact(selective, with);
  ExpectReportRowsExact(selective, with);
  const model::GPTConfig& g = selective.model;
  const int64_t probabilities =
      4 * int64_t(selective.micro_batch_size) * (g.n_head / c.grid.tp) * g.seq_len * g.seq_len;
  for (int r = 0; r < selective.world(); ++r) {
    const int64_t kept = without.memory[r].peak(MemoryCategory::kActivations);
    const int64_t now = with.memory[r].peak(MemoryCategory::kActivations);
    EXPECT_LT(now, kept) << "rank " << r;
    if (c.grid.pp == 1) {
      EXPECT_EQ(kept - now, (g.n_layer - 1) * probabilities) << "rank " << r;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Grids, SelectiveRecomputeTest,
    ::testing::Values(Case{Grid{}}, Case{Grid{.zero = 1}}, Case{Grid{.dp = 2, .zero = 3}},
                      Case{Grid{.tp = 2, .sequence_parallel = true}},
                      Case{Grid{.dp = 2, .tp = 2, .pp = 2, .zero = 1}},
                      Case{Grid{.pp = 2, .schedule = kInterleaved, .virtual_stages = 2}},
                      Case{Grid{.dp = 2, .tp = 2}, DType::kBF16}, Case{Grid{.dp = 2}, DType::kF32, 4}),
    [](const ::testing::TestParamInfo<Case>& param) {
      std::string name = param.param.grid.Name();
      if (param.param.precision == DType::kBF16) name += "_bf16";
      if (param.param.experts > 0) name += "_experts";
      return name;
    });

// The planner: attention's core forward once more a layer (4·s·h FLOPs a token; in the
// paper's count 4·B·s²·l·h a step), no byte more, and the activations of a dry run.
TEST(SelectiveRecompute, ThePlannerCountsTheForwardAgainAndTheMemoryKept) {
  model::GPTConfig c;
  c.n_layer = 4;
  c.n_head = 8;
  c.n_embd = 64;
  c.seq_len = 32;
  PlanInput in{GptShape(c)};
  in.seq_len = c.seq_len;
  in.dp = 2;
  in.tp = 2;
  in.batch = 4;
  in.micro_batches = 2;
  in.tflops = 100;
  PlanInput selective = in;
  selective.recompute_attention = true;
  const StepTime plain = PredictStep(in), again = PredictStep(selective);
  const double tokens = double(in.batch) * in.seq_len;
  const double more = 4.0 * c.n_layer * c.n_embd * c.seq_len * tokens / in.tp / (in.tflops * 1e12);
  EXPECT_NEAR(again.compute_s - plain.compute_s, more, 1e-9 * more);
  EXPECT_EQ(again.comm_s, plain.comm_s);
  const double B = double(in.batch) * in.dp, s = in.seq_len;
  EXPECT_NEAR(MegatronStepFlops(selective) - MegatronStepFlops(in), 4 * B * s * s * c.n_layer * c.n_embd,
              1e-6 * MegatronStepFlops(in));
  // Per micro-batch of 2 sequences: 4 layers' probabilities less, one more in the scratch.
  const int64_t probabilities = 4 * 2 * (c.n_head / in.tp) * int64_t(c.seq_len) * c.seq_len;
  EXPECT_EQ(PlanActivationsPerGpu(in).bytes_per_gpu - PlanActivationsPerGpu(selective).bytes_per_gpu,
            (c.n_layer - 1) * probabilities);
  TrainOptions o = PlanAsTrainOptions(selective);
  o.dry_run = true;
  o.steps = 1;
  o = o.Resolved();
  ASSERT_TRUE(o.Validate().ok()) << o.Validate();
  int64_t activations = 0;
  for (const MemoryLedger& m : RunSteps(o).memory) {
    activations = std::max(activations, m.peak(MemoryCategory::kActivations));
  }
  EXPECT_EQ(PlanActivationsPerGpu(selective).bytes_per_gpu, activations);
}

TEST(SelectiveRecompute, FullAndSelectiveAreOneChoice) {
  TrainOptions o = On(Case{Grid{.pp = 2}}, true);
  o.recompute = true;
  EXPECT_NE(o.Validate().message().find("full or selective"), std::string_view::npos)
      << o.Validate();
}

}  // namespace
}  // namespace tally::train
