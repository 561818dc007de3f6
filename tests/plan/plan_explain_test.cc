// --explain (plan.h): the seed's selection flow on its own two examples, each test's
// numbers the planner's own, and the search beside it.
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "lab/plan/plan.h"
#include "core/train/cluster.h"

namespace tally::plan {
namespace {

PlanInput OnA100(PlanInput in) {
  const train::ClusterPreset a100 = train::LoadCluster("a100").value();
  in.gpus_per_node = a100.gpus_per_node;
  in.cluster = a100.links;
  in.gpu = a100.gpu;
  return in;
}

// The seed's 5.5: LLaMA-7B (bf16, 16 bytes a parameter) on 8 A100-80G. It shards with
// ZeRO-3 to 14 GB a GPU; the flow stops at the first stage that fits: ZeRO-1's
// 2 + 2 + 12/8 bytes a parameter, 38.5 GB, against 80.
TEST(Explain, LlamaSevenBOnEightGpusStopsAtZeroOne) {
  const PlanInput base = OnA100(PlanInput{ModelPreset("llama-7b").value()});
  const Explanation e = Explain(base, 8, 32, 80e9, "a100", /*search=*/false).value();
  ASSERT_EQ(e.steps.size(), 3u);
  EXPECT_EQ(e.steps[0].answer, "no");
  EXPECT_TRUE(absl::StrContains(e.steps[0].numbers, "112.00 GB of model states")) << e.steps[0].numbers;
  EXPECT_EQ(e.steps[1].number, 2);
  EXPECT_EQ(e.steps[1].answer, "yes: ZeRO-1");
  EXPECT_TRUE(absl::StrContains(e.steps[1].numbers, "ZeRO-1 leaves 38.50 GB")) << e.steps[1].numbers;
  EXPECT_EQ(e.steps[2].answer, "no: the layout stands");
  ASSERT_TRUE(e.flow_fits);
  EXPECT_EQ(e.flow.dp, 8);
  EXPECT_EQ(e.flow.zero, 1);
  EXPECT_DOUBLE_EQ(e.flow_memory, (2 + 2 + 12.0 / 8) * 7e9);
  EXPECT_DOUBLE_EQ(e.flow_memory, PlanMemoryLine(e.flow, 1));
  EXPECT_GT(e.flow_time.step_s, 0);
  // Not a GPT shape: no dry run, and the flag that makes one.
  EXPECT_TRUE(absl::StrContains(e.check, "give --n_head")) << e.check;
}

// The seed's Q15: 70B on 128 A100-80G as tp 8 inside a node, pp 2 across, dp 8, ZeRO-1.
// Counting one sequence's activations (s = 4096, sequence parallelism), tp 8 × pp 2 holds
// more than 80 GB whatever the ZeRO stage, and the flow says so with the number.
TEST(Explain, SeventyBOnOneHundredTwentyEightGpusSaysWhatSendsItPastTheSeedsLayout) {
  model::GPTConfig c;
  c.n_layer = 80;
  c.n_embd = 8192;
  c.n_head = 64;
  c.vocab_size = 32000;
  c.seq_len = 4096;
  PlanInput base = OnA100(PlanInput{GptShape(c)});
  base.seq_len = 4096;
  base.sequence_parallel = true;
  const Explanation e = Explain(base, 128, 64, 80e9, "a100", /*search=*/false).value();
  ASSERT_EQ(e.steps.size(), 4u);
  EXPECT_TRUE(absl::StrContains(e.steps[2].answer, "yes: pipeline parallelism, but no pipeline"))
      << e.steps[2].answer;
  const FlowStep& three_d = e.steps[3];
  EXPECT_TRUE(absl::StartsWith(three_d.answer, "yes: 3D")) << three_d.answer;
  ASSERT_TRUE(e.flow_fits);
  EXPECT_EQ(e.flow.tp, 8);  // a node
  EXPECT_EQ(e.flow.dp * e.flow.pp, 16);
  EXPECT_LE(e.flow_memory, 80e9);
  // The seed's layout at ZeRO-2 (the least it can hold), by the planner's own figures,
  // is the number the flow prints for it.
  PlanInput seed = base;
  seed.tp = 8;
  seed.pp = 2;
  seed.dp = 8;
  seed.zero = 2;
  seed.batch = seed.micro_batches = 8;
  const double held = PlanMemoryLine(seed, 1) + double(PlanActivationsPerGpu(seed).bytes_per_gpu);
  EXPECT_GT(held, 80e9);
  EXPECT_TRUE(absl::StrContains(three_d.numbers,
                                absl::StrFormat("tp 8, pp 2: %.2f GB with ZeRO-2", held / 1e9)))
      << three_d.numbers;
  EXPECT_TRUE(absl::StrContains(e.check, "tally_train --dry_run --steps=1 --n_layer=80")) << e.check;
  EXPECT_TRUE(absl::StrContains(e.check, "--tp=8")) << e.check;
}

// A layer larger than a GPU sends the flow to tensor parallelism.
TEST(Explain, ALayerTooLargeForAGpuTakesTensorParallelism) {
  const PlanInput base = OnA100(PlanInput{ModelPreset("llama-7b").value()});
  const Explanation e = Explain(base, 64, 64, 2e9, "a100", /*search=*/false).value();
  ASSERT_GE(e.steps.size(), 3u);
  EXPECT_TRUE(absl::StartsWith(e.steps[2].answer, "no: tensor parallelism")) << e.steps[2].answer;
  EXPECT_TRUE(absl::StrContains(e.steps[2].numbers, "hold 3.50 GB of model states")) << e.steps[2].numbers;
}

// A model that fits one GPU: data parallelism; the search beside it in one line.
TEST(Explain, ASmallModelTakesDataParallelismBesideTheSearch) {
  const PlanInput base = OnA100(PlanInput{ModelPreset("toy").value()});
  const Explanation e = Explain(base, 4, 16, 80e9, "a100").value();
  ASSERT_EQ(e.steps.size(), 2u);
  EXPECT_EQ(e.steps[0].answer, "yes: data parallelism over the 4 GPUs");
  ASSERT_TRUE(e.fastest.has_value());
  EXPECT_LE(e.fastest->time.step_s, e.flow_time.step_s);  // the flow's grid is one it tried
  EXPECT_TRUE(absl::StrContains(e.verdict, "has the flow's grid") ||
              absl::StrContains(e.verdict, "most of the difference is"))
      << e.verdict;
  EXPECT_TRUE(absl::StrContains(e.check, "--dp=4")) << e.check;
  EXPECT_FALSE(Explain(base, 0, 16, 80e9, "").ok());
}

}  // namespace
}  // namespace tally::plan
