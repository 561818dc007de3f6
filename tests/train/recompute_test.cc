// Recompute that the model does (core/model/gpt.h SetRecompute), on every layout bit for bit
// the same layout without it (losses, parameters, every traffic row but the recomputed
// forward's own calls), every rank's activation peak equal to the closed form
// (core/model/activations.h), every report row to its formula:
//  - selective (--recompute_granularity=selective): no layer keeps attention's
//    probabilities; at pp = 1, L·b·(nh/tp)·T² fp32 kept less, one b·(nh/tp)·T² more;
//  - full layer by layer (--recompute with pp = 1, or --recompute_method=layer on a
//    pipeline): a layer keeps its output only, and its forward runs again, collectives
//    included, before its backward.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <utility>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "lab/plan/plan.h"
#include "lab/report/report.h"
#include "tests/sweep.h"
#include "tests/train/run_ranks.h"

namespace tally::train {
namespace {

constexpr parallel::PipelineSchedule kInterleaved = parallel::PipelineSchedule::kInterleaved;

struct Case {
  Grid grid;
  DType precision = DType::kF32;
  int experts = 0;
  int ep = 1;
};

// The case with its recompute (`on`) or without.
TrainOptions On(const Case& c, bool on) {
  Grid g = c.grid;
  if (!on) g.recompute = g.recompute_attention = g.recompute_layers = false;
  TrainOptions o = g.On(TinyGrid(4 * g.dp));
  o.precision.dtype = c.precision;
  o.model.n_experts = c.experts;
  o.parallel.ep = c.ep;
  o.parallel.bucket_mb = 20000.0 / (1 << 20);
  return o;
}

// The same bits: losses and parameters; and every rank's traffic (bytes and calls, by
// key and peer) but, with `recomputed_forward`, the backward rows of the groups a layer's
// forward talks in (tp, ep), which the formulas check instead.
void ExpectIdentical(const RunResult& a, const RunResult& b, bool recomputed_forward) {
  ASSERT_EQ(a.losses.size(), b.losses.size());
  EXPECT_EQ(0, std::memcmp(a.losses.data(), b.losses.data(), sizeof(float) * a.losses.size()));
  ASSERT_EQ(a.params.size(), b.params.size());
  EXPECT_EQ(0, std::memcmp(a.params.data(), b.params.data(), sizeof(float) * a.params.size()));
  auto compared = [recomputed_forward](const comm::LedgerKey& k) {
    return !(recomputed_forward && k.phase == comm::Phase::kBackward &&
             (k.group == "tp" || k.group == "ep"));
  };
  ASSERT_EQ(a.traffic.size(), b.traffic.size());
  for (size_t r = 0; r < a.traffic.size(); ++r) {
    std::map<std::pair<comm::LedgerKey, int>, std::pair<int64_t, int64_t>> sa, sb;
    for (const auto& [key, t] : a.traffic[r].transfers()) {
      if (compared(key.first)) sa[key] = {t.bytes_sent, t.bytes_recv};
    }
    for (const auto& [key, t] : b.traffic[r].transfers()) {
      if (compared(key.first)) sb[key] = {t.bytes_sent, t.bytes_recv};
    }
    EXPECT_TRUE(sa == sb) << "rank " << r;
    std::map<comm::LedgerKey, std::pair<int64_t, int64_t>> ca, cb;
    for (const auto& [key, c] : a.traffic[r].calls()) {
      if (compared(key)) ca[key] = {c.calls, c.payload_bytes};
    }
    for (const auto& [key, c] : b.traffic[r].calls()) {
      if (compared(key)) cb[key] = {c.calls, c.payload_bytes};
    }
    EXPECT_TRUE(ca == cb) << "rank " << r;
  }
}

class RecomputeTest : public ::testing::TestWithParam<Case> {};

TEST_P(RecomputeTest, TrainsBitForBitWithExactActivationMemory) {
  const Case& c = GetParam();
  const TrainOptions plain = On(c, false), o = On(c, true);
  ASSERT_TRUE(o.Validate().ok()) << o.Validate();
  const RunResult without = RunRanks(plain), with = RunRanks(o);
  ExpectIdentical(with, without, o.parallel.LayerRecompute());
  if (o.world() == 1 && o.parallel.zero == 0) return;  // the serial run keeps no ledger
  ExpectMemoryFormulaExact(o, with);
  ExpectReportRowsExact(o, with);
  // What a micro-batch of b sequences no longer keeps in all but one layer, counted here
  // from block.h's list (fp32, one rank's heads and widths; no experts): selective, the
  // probabilities; layer recompute, all but the layer's output.
  const model::GPTConfig& g = o.model;
  const int64_t b = o.training.micro_batch_size, t = g.seq_len, c4 = 4, tp = c.grid.tp;
  const int64_t n = b * t, r = o.parallel.sequence_parallel ? n / tp : n, ch = g.n_embd;
  const int64_t probabilities = b * (g.n_head / tp) * t * t;
  const int64_t layer_but_output = (r * ch + 4 * r + probabilities + n * 4 * ch / tp) +
                                   (2 * n * ch + n * ch / tp + 3 * n * ch / tp + n * 4 * ch / tp);
  const int64_t saved =
      c4 * (g.n_layer - 1) * (o.parallel.LayerRecompute() ? layer_but_output : probabilities);
  for (int rank = 0; rank < o.world(); ++rank) {
    const int64_t kept = without.memory[rank].peak(MemoryCategory::kActivations);
    const int64_t now = with.memory[rank].peak(MemoryCategory::kActivations);
    EXPECT_LT(now, kept) << "rank " << rank;
    if (c.grid.pp == 1 && c.experts == 0 && c.precision == DType::kF32) {
      EXPECT_EQ(kept - now, saved) << "rank " << rank;
    }
  }
}

Grid With(Grid g, bool layers) {
  (layers ? g.recompute : g.recompute_attention) = true;
  return g;
}

INSTANTIATE_TEST_SUITE_P(
    Grids, RecomputeTest,
    ::testing::ValuesIn(Sweep<Case>(
        {// Selective.
         Case{With(Grid{}, false)}, Case{With(Grid{.zero = 1}, false)},
         Case{With(Grid{.dp = 2, .zero = 3}, false)},
         Case{With(Grid{.tp = 2, .sequence_parallel = true}, false)},
         Case{With(Grid{.dp = 2, .tp = 2, .pp = 2, .zero = 1}, false)},
         Case{With(Grid{.pp = 2, .schedule = kInterleaved, .virtual_stages = 2}, false)},
         Case{With(Grid{.dp = 2, .tp = 2}, false), DType::kBF16},
         Case{With(Grid{.dp = 2}, false), DType::kF32, 4},
         // Full, layer by layer (pp = 1).
         Case{With(Grid{}, true)}, Case{With(Grid{.zero = 1}, true)},
         Case{With(Grid{.dp = 2, .zero = 3}, true)}, Case{With(Grid{.dp = 2, .zero = 2}, true)},
         Case{With(Grid{.tp = 2}, true)},
         Case{With(Grid{.tp = 2, .sequence_parallel = true}, true)},
         Case{With(Grid{.dp = 2, .tp = 2, .zero = 1}, true), DType::kBF16},
         Case{With(Grid{.dp = 2}, true), DType::kF32, 4, 2},
         // Full, layer by layer, on a pipeline (--recompute_method=layer).
         Case{With(Grid{.pp = 2, .recompute_layers = true}, true)},
         Case{With(Grid{.dp = 2, .tp = 2, .pp = 2, .zero = 1, .recompute_layers = true}, true)},
         Case{With(Grid{.dp = 2, .pp = 2, .zero = 3, .recompute_layers = true}, true)},
         Case{With(
             Grid{.pp = 2, .schedule = kInterleaved, .virtual_stages = 2, .recompute_layers = true},
             true)},
         Case{With(Grid{.dp = 2, .pp = 2, .recompute_layers = true}, true), DType::kF32, 4, 2}})),
    [](const ::testing::TestParamInfo<Case>& param) {
      std::string name = param.param.grid.Name();
      if (param.param.precision == DType::kBF16) name += "_bf16";
      if (param.param.experts > 0) name += "_experts";
      if (param.param.ep > 1) name += "_ep";
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
  plan::PlanInput in{plan::GptShape(c)};
  in.seq_len = c.seq_len;
  in.dp = 2;
  in.tp = 2;
  in.batch = 4;
  in.micro_batches = 2;
  in.gpu = GpuModel::Flat(100);
  plan::PlanInput selective = in;
  selective.recompute_attention = true;
  const plan::StepTime plain = plan::PredictStep(in), again = plan::PredictStep(selective);
  const double tokens = double(in.batch) * in.seq_len;
  const double more = 4.0 * c.n_layer * c.n_embd * c.seq_len * tokens / in.tp / (100 * 1e12);
  EXPECT_NEAR(again.compute_s - plain.compute_s, more, 1e-9 * more);
  EXPECT_EQ(again.comm_s, plain.comm_s);
  const double B = double(in.batch) * in.dp, s = in.seq_len;
  EXPECT_NEAR(plan::MegatronStepFlops(selective) - plan::MegatronStepFlops(in),
              4 * B * s * s * c.n_layer * c.n_embd, 1e-6 * plan::MegatronStepFlops(in));
  // Per micro-batch of 2 sequences: 4 layers' probabilities less, one more in the scratch.
  const int64_t probabilities = 4 * 2 * (c.n_head / in.tp) * int64_t(c.seq_len) * c.seq_len;
  EXPECT_EQ(plan::PlanActivationsPerGpu(in).bytes_per_gpu -
                plan::PlanActivationsPerGpu(selective).bytes_per_gpu,
            (c.n_layer - 1) * probabilities);
  TrainOptions o = plan::PlanAsTrainOptions(selective);
  o.dry_run = true;
  o.training.steps = 1;
  o = o.Resolved();
  ASSERT_TRUE(o.Validate().ok()) << o.Validate();
  int64_t activations = 0;
  for (const MemoryLedger& m : RunSteps(o).memory) {
    activations = std::max(activations, m.peak(MemoryCategory::kActivations));
  }
  EXPECT_EQ(plan::PlanActivationsPerGpu(selective).bytes_per_gpu, activations);
}

TEST(SelectiveRecompute, FullAndSelectiveAreOneChoice) {
  TrainOptions o = On(Case{Grid{.pp = 2, .recompute = true}}, true);
  o.parallel.recompute_attention = true;
  EXPECT_NE(o.Validate().message().find("full or selective"), std::string_view::npos)
      << o.Validate();
}

}  // namespace
}  // namespace tally::train
