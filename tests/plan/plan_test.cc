// tally_plan's numbers: the seed's examples by their formulas, the inconsistency in its
// 70B example, and for tally's own model the exact bytes an actual run measures.
#include "lab/plan/plan.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>
#include <tuple>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/plan/small_plan.h"
#include "tests/sweep.h"
#include "tests/train/run_ranks.h"

namespace tally::plan {
namespace {

TEST(Plan, ReproducesEverySeedExample) {
  std::vector<SeedExample> examples = SeedExamples();
  ASSERT_GE(examples.size(), 13u);
  for (const SeedExample& x : examples) {
    // The seed rounds its "≈" figures (4.29 GB as "≈ 4 GB"); the others are exact.
    const bool rounded = absl::StrContains(x.seed_figure, "≈");
    EXPECT_NEAR(x.computed_bytes, x.seed_bytes, (rounded ? 0.1 : 1e-9) * x.seed_bytes) << x.what;
  }
  // The 70B example's TP and PP figures need different batch sizes, and the planner says so.
  const SeedExample& pp = examples.back();
  EXPECT_TRUE(absl::StrContains(pp.note, "different batch sizes")) << pp.note;
}

TEST(Plan, SeedAndExactFormsForLlama7B) {
  PlanInput in{ModelPreset("llama-7b").value()};
  in.dp = 4;
  std::vector<PlanRow> rows = Plan(in);
  ASSERT_EQ(rows[0].strategy, "dp all-reduce");
  EXPECT_DOUBLE_EQ(rows[0].seed_bytes_per_gpu, 28e9);   // 2Φ·e
  EXPECT_DOUBLE_EQ(rows[0].exact_bytes_per_gpu, 21e9);  // 2(N-1)/N·Φ·e
  EXPECT_DOUBLE_EQ(rows[3].seed_bytes_per_gpu, 42e9);   // ZeRO-3: 3Φ·e
  EXPECT_FALSE(ModelPreset("gpt-5").ok());
}

// On a cluster whose GPUs' memory is known, the plan says whether a GPU holds its share:
// LLaMA-7B's bf16 states are 16 bytes a parameter, 112 GB on dp alone, 14 GB under ZeRO-3
// over 8.
TEST(Plan, SaysWhetherAGpuHoldsItsShare) {
  PlanInput in{ModelPreset("llama-7b").value()};
  in.dp = 2;
  in.gpu = train::LoadCluster("a100").value().gpu;
  std::ostringstream text;
  PrintPlan(in, text);
  EXPECT_TRUE(absl::StrContains(text.str(), "memory per GPU at --precision: 112.00 GB (104.31 GiB) "
                                            "(model states; activations not modelled): does NOT fit "
                                            "the 80 GB of a GPU of the cluster (140%)"))
      << text.str();
  in.dp = 8;
  in.zero = 3;
  std::ostringstream json;
  PrintPlanJson(in, json);
  EXPECT_TRUE(absl::StrContains(json.str(), "\"held\":14000000000,\"gpu_memory_gb\":80,\"fits\":true"))
      << json.str();
  in.gpu.memory_gb = 0;  // unknown: nothing said
  std::ostringstream silent;
  PrintPlan(in, silent);
  EXPECT_FALSE(absl::StrContains(silent.str(), "memory per GPU at")) << silent.str();
}

// The ZeRO paper's Table 1 (Ψ = 7.5B, K = 12) from the bf16 line, and the seed's Q6 form
// (2Φ + 2Φ + 12Φ/dp) as its ZeRO-1 (P_os) case; every precision's line follows --zero.
TEST(Plan, MemoryReproducesTheZeroPapersTable) {
  PlanInput in{ModelPreset("llama-7b").value()};
  in.model.params = 7'500'000'000;
  const double gb = 1e9;
  auto bf16 = [&](int zero, int dp) {
    in.zero = zero;
    in.dp = dp;
    std::vector<PlanMemory> lines = PlanMemoryPerGpu(in);
    EXPECT_EQ(lines[1].params + lines[1].grads + lines[1].optimizer, 16);
    return lines[1].bytes_per_gpu / gb;
  };
  EXPECT_DOUBLE_EQ(bf16(0, 64), 120.0);
  EXPECT_NEAR(bf16(1, 64), 31.4, 0.05);
  EXPECT_NEAR(bf16(2, 64), 16.6, 0.05);
  EXPECT_NEAR(bf16(3, 64), 1.88, 0.005);
  EXPECT_NEAR(bf16(1, 4), 52.5, 1e-9);   // Nd = 4: 2Ψ + 2Ψ + 12Ψ/4
  EXPECT_NEAR(bf16(2, 4), 41.25, 1e-9);  // 2Ψ + 14Ψ/4
  EXPECT_NEAR(bf16(3, 4), 30.0, 1e-9);   // 16Ψ/4
  in.zero = 2;
  in.dp = 4;
  std::vector<PlanMemory> lines = PlanMemoryPerGpu(in);
  EXPECT_NEAR(lines[0].bytes_per_gpu / gb, 4 * 7.5 + (4 + 8) * 7.5 / 4, 1e-9);  // fp32
  EXPECT_NEAR(lines[2].bytes_per_gpu / gb, 2 * 7.5 + (4 + 12) * 7.5 / 4, 1e-9);  // fp32 accum
}

// A sweep of shapes and grids drawn at random (a fixed seed): for each, tally_plan's exact
// bytes per strategy, model states and activations per GPU equal the dry run's ledgers
// (the busiest rank's), and a dry run's ledgers are a real run's (dry_run_test.cc).
TEST(PlanAgreement, RandomShapesAndGridsEqualTheDryRun) {
  Pick pick(20261130);
  int planned = 0;
  for (int attempt = 0; planned < 24 && attempt < 1000; ++attempt) {
    model::GPTConfig c;
    c.n_layer = pick({2, 3, 4});
    c.n_head = pick({2, 4});
    c.n_embd = c.n_head * pick({4, 8});
    c.seq_len = pick({8, 16});
    c.vocab_size = pick({256, 320});
    PlanInput in{GptShape(c)};
    in.seq_len = c.seq_len;
    in.dp = pick({1, 2, 3});
    in.tp = pick({1, 2});
    in.pp = pick({1, 2});
    in.zero = pick({0, 1, 2, 3});
    in.micro_batches = pick({1, 2});
    in.batch = in.micro_batches * pick({1, 2});
    in.sequence_parallel = in.tp > 1 && pick({0, 1}) == 1;
    in.recompute = pick({0, 1}) == 1;
    in.recompute_layers = in.recompute && in.pp > 1 && pick({0, 1}) == 1;
    in.recompute_attention = !in.recompute && pick({0, 1}) == 1;
    in.gpipe = in.pp > 1 && pick({0, 1}) == 1;
    in.precision = pick({0, 1}) == 1 ? DType::kBF16 : DType::kF32;
    in.bytes_per_value = int(SizeOf(in.precision));
    train::TrainOptions o = PlanAsTrainOptions(in);
    o.dry_run = true;
    o.training.steps = 1;
    o = o.Resolved();
    if (!o.Validate().ok() || c.n_head % in.tp != 0 || in.pp > c.n_layer) continue;
    ++planned;
    SCOPED_TRACE(absl::StrCat("n_layer ", c.n_layer, " n_head ", c.n_head, " n_embd ", c.n_embd,
                              " seq_len ", c.seq_len, " vocab ", c.vocab_size, " dp ", in.dp,
                              " tp ", in.tp, " pp ", in.pp, " zero ", in.zero, " m ",
                              in.micro_batches, " b ", in.batch, " sp ", in.sequence_parallel,
                              " recompute ", in.recompute, " layers ", in.recompute_layers,
                              " selective ", in.recompute_attention,
                              " gpipe ", in.gpipe,
                              " ", Name(in.precision)));
    ExpectPlanIsTheDryRun(in, o);
  }
  EXPECT_EQ(planned, 24);
}

// --search: the grids of 4 GPUs that fit a memory bound, fastest predicted step first;
// each one's memory is its plan's lines (model states at the precision + activations),
// and the predicted step is compute / (1 − bubble) + the strategies' α-β times.
TEST(PlanSearch, KeepsWhatFitsFastestFirst) {
  PlanInput base = SmallPlan();
  base.precision = DType::kF32;
  base.bytes_per_value = 4;
  base.gpu = train::GpuModel::Flat(1);  // 1e12 FLOP/s, every matmul
  const std::vector<SearchResult> all = SearchGrids(base, 4, 8, 1e30).value();
  ASSERT_FALSE(all.empty());
  // Each grid once: a dense model has no ep to try.
  std::set<std::tuple<int, int, int, int, int, int, bool, bool, bool, int>> seen;
  for (const SearchResult& r : all) {
    EXPECT_EQ(r.in.ep, 1);
    EXPECT_TRUE(seen.insert({r.in.dp, r.in.tp, r.in.pp, r.in.virtual_stages, r.in.zero, r.in.micro_batches,
                             r.in.recompute, r.in.recompute_attention, r.in.recompute_layers, r.in.ep})
                    .second);
  }
  double most = 0, least = 1e300;
  for (const SearchResult& r : all) {
    EXPECT_EQ(r.in.dp * r.in.tp * r.in.pp, 4);
    EXPECT_EQ(r.in.batch * r.in.dp, 8);
    const double memory = PlanMemoryPerGpu(r.in)[0].bytes_per_gpu +
                          double(PlanActivationsPerGpu(r.in).bytes_per_gpu);
    EXPECT_DOUBLE_EQ(r.memory_bytes, memory);
    most = std::max(most, memory);
    least = std::min(least, memory);
  }
  for (size_t i = 1; i < all.size(); ++i) EXPECT_LE(all[i - 1].time.step_s, all[i].time.step_s);
  // A bound between the least and the most memory keeps exactly the grids under it.
  const double bound = (least + most) / 2;
  const std::vector<SearchResult> fit = SearchGrids(base, 4, 8, bound).value();
  size_t under = 0;
  for (const SearchResult& r : all) under += r.memory_bytes <= bound ? 1 : 0;
  EXPECT_EQ(fit.size(), under);
  EXPECT_LT(fit.size(), all.size());
  // One grid's prediction by hand: dp 4, no pipeline, compute every matmul's FLOPs (a
  // layer's 72h² + 12·s·h a token, the LM head's 6·V·h) at the flat rate.
  PlanInput dp4 = base;
  dp4.dp = 4;
  dp4.batch = 2;
  const StepTime t = PredictStep(dp4);
  const double hidden = base.model.hidden, seq = dp4.seq_len;
  const double matmuls = base.model.layers * (72 * hidden * hidden + 12 * seq * hidden) +
                         6 * double(base.model.config.vocab_size) * hidden;
  EXPECT_NEAR(t.compute_s, matmuls * 2 * seq / 1e12, 1e-12 * t.compute_s);
  EXPECT_EQ(t.bubble, 0);
  double comm = 0;
  for (const PlanRow& row : Plan(dp4)) comm += row.strategy == "dp all-reduce" ? row.time_s : 0;
  EXPECT_DOUBLE_EQ(t.comm_s, comm);
  EXPECT_DOUBLE_EQ(t.step_s, t.compute_s + t.comm_s);
  ASSERT_EQ(t.comm_rows.size(), 1u);  // only the rows in effect, by name
  EXPECT_EQ(t.comm_rows[0].first, "dp all-reduce");
  EXPECT_DOUBLE_EQ(t.comm_rows[0].second, comm);
  // TFLOP/s per GPU: Narayanan et al.'s count over the step, per GPU.
  EXPECT_DOUBLE_EQ(t.tflops_per_gpu, MegatronStepFlops(dp4) / t.step_s / 4 / 1e12);
  // Their count is every matmul's: 4 passes of a layer's 24·B·s·h² + 4·B·s²·h with
  // recompute (3 without), and the LM head's 2·B·s·h·V three times.
  for (const bool recompute : {false, true}) {
    PlanInput x = dp4;
    x.recompute = recompute;
    const double B = 8, S = x.seq_len, L = x.model.layers, H = x.model.hidden,
                 V = x.model.config.vocab_size, passes = recompute ? 4 : 3;
    EXPECT_NEAR(MegatronStepFlops(x),
                passes * L * (24 * B * S * H * H + 4 * B * S * S * H) + 6 * B * S * H * V,
                1e-9 * MegatronStepFlops(x));
  }
  // With experts the search tries every ep that divides dp and E, each fitting grid's
  // memory its plan's.
  PlanInput moe = base;
  moe.model = WithExperts(moe.model, 4, 2);
  moe.n_experts = 4;
  int with_ep = 0;
  const std::vector<SearchResult> with_experts = SearchGrids(moe, 4, 8, 1e30).value();
  for (const SearchResult& r : with_experts) {
    with_ep += r.in.ep > 1 ? 1 : 0;
    EXPECT_EQ(r.in.dp % r.in.ep, 0);
    EXPECT_DOUBLE_EQ(r.memory_bytes, PlanMemoryPerGpu(r.in)[0].bytes_per_gpu +
                                         double(PlanActivationsPerGpu(r.in).bytes_per_gpu));
  }
  EXPECT_GT(with_ep, 0);
}

class PlanAgainstRuns : public ::testing::TestWithParam<train::Grid> {};

constexpr parallel::PipelineSchedule kGPipe = parallel::PipelineSchedule::kGPipe;

TEST_P(PlanAgainstRuns, ExactBytesAreTheMeasuredOnes) {
  const train::Grid& g = GetParam();
  PlanInput in = SmallPlan();
  in.dp = g.dp;
  in.tp = g.tp;
  in.pp = g.pp;
  in.zero = g.zero;
  in.sequence_parallel = g.sequence_parallel;
  in.virtual_stages = g.virtual_stages;
  in.pp_scatter_gather = g.pp_scatter_gather;
  if (g.virtual_stages > 1) in.micro_batches = g.pp;  // interleaved: a group of pp
  for (DType precision : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(Name(precision));
    in.precision = precision;
    in.bytes_per_value = int(SizeOf(precision));
    train::RunResult run = RunPlan(in, g.schedule);
    int compared = 0;
    for (const PlanRow& row : Plan(in)) {
      const auto rows = RowsOf(row.strategy, g.zero);
      if (!rows) continue;
      // The busiest rank's bytes in the rows the strategy makes.
      const int64_t most = BusiestSent(run.traffic, rows);
      EXPECT_EQ(double(most), row.exact_bytes_per_gpu) << row.strategy;
      ++compared;
    }
    EXPECT_GT(compared, 0);
  }
}

// Placed on nodes of 2 GPUs, the planner's inter-node bytes of the busiest GPU (the most
// bytes, and of equals the most across nodes) are what a run measures: the seed's
// placement rule and its opposite, and the hierarchical all-reduce under ZeRO 0 and 1.
TEST(PlanPlacement, InterNodeBytesAreTheMeasuredOnes) {
  struct Case {
    int dp, tp, zero;
    const char* order;
    comm::Algorithm allreduce;
  };
  for (const Case& c : {Case{2, 2, 0, "tp-dp-pp", comm::Algorithm::kRing},
                        Case{2, 2, 0, "dp-tp-pp", comm::Algorithm::kRing},
                        Case{4, 1, 0, "tp-dp-pp", comm::Algorithm::kRing},
                        Case{4, 1, 0, "tp-dp-pp", comm::Algorithm::kHierarchical},
                        Case{4, 1, 1, "tp-dp-pp", comm::Algorithm::kHierarchical}}) {
    SCOPED_TRACE(absl::StrCat("dp ", c.dp, " tp ", c.tp, " zero ", c.zero, " ", c.order, " ",
                              comm::Name(c.allreduce)));
    PlanInput in = SmallPlan();
    in.precision = DType::kF32;
    in.bytes_per_value = 4;
    in.dp = c.dp;
    in.tp = c.tp;
    in.zero = c.zero;
    in.gpus_per_node = 2;
    in.order = parallel::ParseOrder(c.order).value();
    in.allreduce = c.allreduce;
    train::RunResult run = RunPlan(in);
    const comm::Nodes nodes = *PlanAsTrainOptions(in).PlacedNodes();
    int compared = 0;
    for (const PlanRow& row : Plan(in)) {
      const auto rows = RowsOf(row.strategy, c.zero);
      if (!rows || row.strategy == "pp (boundaries)") continue;
      comm::LinkBytes most;
      for (const comm::TrafficLedger& ledger : run.traffic) {
        const comm::LinkBytes b = ledger.SentByLink(nodes, rows);
        if (b.total() > most.total() || (b.total() == most.total() && b.inter > most.inter)) most = b;
      }
      EXPECT_EQ(double(most.total()), row.exact_bytes_per_gpu) << row.strategy;
      EXPECT_EQ(double(most.inter), row.inter_bytes_per_gpu) << row.strategy;
      ++compared;
    }
    EXPECT_GT(compared, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Grids, PlanAgainstRuns,
    ::testing::ValuesIn(Sweep<train::Grid>(
        {train::Grid{.dp = 2}, train::Grid{.tp = 2, .pp = 2, .pp_scatter_gather = true},
         train::Grid{.tp = 2,
                     .pp = 2,
                     .schedule = parallel::PipelineSchedule::kInterleaved,
                     .virtual_stages = 2,
                     .pp_scatter_gather = true},
         train::Grid{.dp = 3, .zero = 1}, train::Grid{.dp = 2, .zero = 2},
         train::Grid{.dp = 3, .zero = 3}, train::Grid{.tp = 2},
         train::Grid{.tp = 2, .sequence_parallel = true}, train::Grid{.pp = 4},
         train::Grid{.pp = 4, .schedule = kGPipe},
         train::Grid{
             .dp = 2, .tp = 2, .pp = 2, .zero = 1, .sequence_parallel = true, .schedule = kGPipe},
         train::Grid{.dp = 2, .pp = 2, .zero = 3},
         train::Grid{
             .pp = 2, .schedule = parallel::PipelineSchedule::kInterleaved, .virtual_stages = 2}})),
    train::GridName);

}  // namespace
}  // namespace tally::plan
