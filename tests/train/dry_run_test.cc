// A dry run (--dry_run: meta tensors, no values, no payload) is the real run's ledgers:
// for every strategy, every rank's traffic rows (calls, bytes and messages each way, per
// peer) and memory peaks of every category equal those of the same run with values.
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "tests/sweep.h"
#include "tests/train/run_ranks.h"

namespace tally::train {
namespace {

void ExpectSameLedgers(const RankLedgers& dry, const RankLedgers& real) {
  ASSERT_EQ(dry.traffic.size(), real.traffic.size());
  for (size_t r = 0; r < real.traffic.size(); ++r) {
    const auto& want = real.traffic[r].transfers();
    const auto& got = dry.traffic[r].transfers();
    ASSERT_EQ(got.size(), want.size()) << "rank " << r;
    for (const auto& [key_peer, t] : want) {
      const auto it = got.find(key_peer);
      ASSERT_NE(it, got.end()) << "rank " << r << ": " << key_peer.first.group << " "
                               << comm::Name(key_peer.first.primitive) << " " << key_peer.first.label;
      const std::string row = absl::StrCat("rank ", r, ": ", key_peer.first.group, " ",
                                           comm::Name(key_peer.first.primitive), " ",
                                           comm::Name(key_peer.first.phase), " ",
                                           key_peer.first.label, " peer ", key_peer.second);
      EXPECT_EQ(it->second.bytes_sent, t.bytes_sent) << row;
      EXPECT_EQ(it->second.bytes_recv, t.bytes_recv) << row;
      EXPECT_EQ(it->second.messages_sent, t.messages_sent) << row;
      EXPECT_EQ(it->second.messages_recv, t.messages_recv) << row;
    }
    for (const auto& [key, calls] : real.traffic[r].calls()) {
      const auto it = dry.traffic[r].calls().find(key);
      ASSERT_NE(it, dry.traffic[r].calls().end());
      EXPECT_EQ(it->second.calls, calls.calls) << key.group << " " << key.label;
      EXPECT_EQ(it->second.payload_bytes, calls.payload_bytes) << key.group << " " << key.label;
    }
    for (int c = 0; c < kNumMemoryCategories; ++c) {
      const MemoryCategory category = MemoryCategory(c);
      EXPECT_EQ(dry.memory[r].peak(category), real.memory[r].peak(category))
          << "rank " << r << " " << Name(category);
    }
  }
}

struct DryGrid {
  Grid grid;
  bool bf16 = false, overlap = false;
};

class DryRunTest : public ::testing::TestWithParam<DryGrid> {};

TEST_P(DryRunTest, LedgersAreTheRealRunsToTheByte) {
  const DryGrid& g = GetParam();
  TrainOptions o = g.grid.On(TinyGrid(4 * g.grid.dp));
  o.training.steps = 2;
  if (g.bf16) o.precision.dtype = DType::kBF16;
  o.parallel.overlap = g.overlap;
  o.parallel.bucket_mb = 20000.0 / (1 << 20);  // several buckets
  ASSERT_TRUE(o.Resolved().Validate().ok()) << o.Resolved().Validate();
  TrainOptions dry = o;
  dry.dry_run = true;
  ExpectSameLedgers(RunSteps(dry.Resolved()), RunSteps(o.Resolved()));
}

std::string DryGridName(const ::testing::TestParamInfo<DryGrid>& p) {
  return GridName(::testing::TestParamInfo<Grid>(p.param.grid, p.index)) + (p.param.bf16 ? "_bf16" : "") + (p.param.overlap ? "_overlap" : "");
}

INSTANTIATE_TEST_SUITE_P(
    Grids, DryRunTest,
    ::testing::ValuesIn(Sweep<DryGrid>(
        {DryGrid{Grid{.dp = 2}}, DryGrid{Grid{.dp = 2, .zero = 1}},
         DryGrid{Grid{.dp = 2, .zero = 2}}, DryGrid{Grid{.dp = 3, .zero = 3}},
         DryGrid{Grid{.dp = 2, .allreduce = comm::Algorithm::kNaive}},
         DryGrid{Grid{.tp = 2, .sequence_parallel = true}},
         DryGrid{Grid{.pp = 2, .schedule = parallel::PipelineSchedule::kGPipe}},
         DryGrid{Grid{.pp = 2, .recompute = true}},
         DryGrid{Grid{
             .pp = 2, .schedule = parallel::PipelineSchedule::kInterleaved, .virtual_stages = 2}},
         DryGrid{Grid{.dp = 2, .tp = 2, .pp = 2, .zero = 1}},
         DryGrid{Grid{.tp = 2, .pp = 2, .pp_scatter_gather = true}},
         DryGrid{Grid{.dp = 2, .pp = 2, .zero = 3}, true},
         DryGrid{Grid{.dp = 2, .zero = 2}, false, true},
         // Context parallelism: every variant's calls without its kernels.
         DryGrid{Grid{.cp = 2}},
         DryGrid{Grid{.dp = 2, .zero = 3, .cp = 2, .cp_comm = parallel::CpComm::kAllGather}},
         DryGrid{Grid{.tp = 2, .pp = 2, .cp = 2, .cp_comm = parallel::CpComm::kAllToAll}}})),
    DryGridName);

// The compressed sums (PowerSGD's, 1-bit Adam's) after their warm-up: the same calls,
// bytes and memory peaks without their arithmetic.
TEST(DryRun, CompressedStepsAreTheRealRunsToTheByte) {
  for (parallel::GradCompression c :
       {parallel::GradCompression::kPowerSgd, parallel::GradCompression::kOneBitAdam}) {
    SCOPED_TRACE(parallel::Name(c));
    TrainOptions o = Grid{.dp = 2}.On(TinyGrid(8));
    o.training.optimizer = OptimizerKind::kAdamW;
    o.training.steps = 3;
    o.parallel.grad_compression = c;
    o.parallel.powersgd_warmup_steps = 1;
    o.parallel.onebit_warmup_steps = 1;
    ASSERT_TRUE(o.Resolved().Validate().ok()) << o.Resolved().Validate();
    TrainOptions dry = o;
    dry.dry_run = true;
    ExpectSameLedgers(RunSteps(dry.Resolved()), RunSteps(o.Resolved()));
  }
}

// Experts in a dry run route token i to experts i·k, ..., i·k + k − 1 (mod E), the
// balanced routing: each rank's dispatch of a layer sends (N−1)/N of its b·s·k rows,
// the seed's estimate to the byte, and the run's report rows are exact.
TEST(DryRun, ExpertsRouteEvenlyAndTheAllToAllsAreTheBalancedEstimate) {
  TrainOptions o = Grid{.dp = 4, .zero = 1}.On(TinyGrid(8));
  o.model.n_experts = 4;
  o.parallel.ep = 2;
  o.training.steps = 1;
  o.dry_run = true;
  o = o.Resolved();
  ASSERT_TRUE(o.Validate().ok()) << o.Validate();
  const RankLedgers run = RunSteps(o);
  const int64_t rows = int64_t(o.training.micro_batch_size) * o.model.seq_len * o.model.moe_top_k;
  for (int r = 0; r < o.world(); ++r) {
    for (int l = 0; l < o.model.n_layer; ++l) {
      const comm::TransferTotals dispatch = run.traffic[size_t(r)].Sum([&](const comm::LedgerKey& k) {
        return k.group == "ep" && k.phase == comm::Phase::kForward &&
               k.label == absl::StrCat("layer", l, ".dispatch");
      });
      EXPECT_EQ(dispatch.bytes_sent, o.accumulation_steps() * rows / 2 * o.model.n_embd * 4)
          << "rank " << r << " layer " << l;
    }
  }
}

}  // namespace
}  // namespace tally::train
