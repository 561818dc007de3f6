// Pipeline schedules: every micro-batch's forward and backward once per stage (per chunk
// when interleaved), in an order the stages can run without waiting on each other
// forever; 1F1B bounds the micro-batches in flight; gpipe and 1f1b leave the bubble
// (N-1)/(m+N-1), interleaved (N-1)/(v·m+N-1); layer splits and chunks.
#include "core/parallel/pipeline_schedule.h"

#include <algorithm>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace tally::parallel {
namespace {

class ScheduleTest : public ::testing::TestWithParam<std::tuple<PipelineSchedule, int, int>> {};

TEST_P(ScheduleTest, EveryStepOnceFinishesAndLeavesTheTheoreticalBubble) {
  auto [schedule, stages, m] = GetParam();
  for (int s = 0; s < stages; ++s) {
    std::vector<PipelineStep> steps = StageSteps(schedule, stages, s, m);
    ASSERT_EQ(steps.size(), size_t(2 * m));
    std::vector<int> forwards(m, 0), backwards(m, 0);
    for (const PipelineStep& step : steps) {
      if (step.kind == PipelineStep::kForward) {
        ++forwards[step.micro_batch];
      } else {
        EXPECT_EQ(forwards[step.micro_batch], 1) << "backward before forward";
        ++backwards[step.micro_batch];
      }
    }
    for (int i = 0; i < m; ++i) EXPECT_EQ(forwards[i] + backwards[i], 2);
    // gpipe keeps all m in flight; 1f1b at most the stages from here to the end.
    EXPECT_EQ(InFlight(steps, /*chunk=*/0), schedule == PipelineSchedule::kGPipe ? m : std::min(m, stages - s));
  }
  SimulatedSchedule t = Simulate(schedule, stages, m);
  ASSERT_EQ(t.slots.size(), size_t(2 * m * stages)) << "a stage waited forever";
  // Equal forward and backward times: every stage idles (N-1)/(m+N-1) of the step.
  EXPECT_EQ(t.length, 2 * (m + stages - 1));
  for (int s = 0; s < stages; ++s) EXPECT_DOUBLE_EQ(t.IdleFraction(s), TheoreticalBubble(stages, m));
}

INSTANTIATE_TEST_SUITE_P(
    All, ScheduleTest,
    ::testing::Combine(::testing::Values(PipelineSchedule::kGPipe, PipelineSchedule::k1F1B),
                       ::testing::Values(1, 2, 4), ::testing::Values(1, 2, 4, 8)));

class InterleavedScheduleTest : public ::testing::TestWithParam<std::tuple<int, int, int>> {};

TEST_P(InterleavedScheduleTest, EveryChunkOnceFinishesAndShrinksTheBubbleVFold) {
  auto [stages, v, groups] = GetParam();
  const int m = groups * stages;  // a multiple of the stages
  for (int s = 0; s < stages; ++s) {
    std::vector<PipelineStep> steps = StageSteps(PipelineSchedule::kInterleaved, stages, s, m, v);
    ASSERT_EQ(steps.size(), size_t(2 * m * v));
    std::vector<int> forwards(size_t(m * v), 0), backwards(size_t(m * v), 0);
    for (const PipelineStep& step : steps) {
      ASSERT_LT(step.model_chunk, v);
      const size_t at = size_t(step.micro_batch * v + step.model_chunk);
      if (step.kind == PipelineStep::kForward) {
        ++forwards[at];
      } else {
        EXPECT_EQ(forwards[at], 1) << "backward before forward";
        ++backwards[at];
      }
    }
    for (size_t i = 0; i < forwards.size(); ++i) EXPECT_EQ(forwards[i] + backwards[i], 2);
    // Megatron's warm-up: 2(N-1-s) + (v-1)N forwards before the first backward.
    const int warmup = std::min(2 * (stages - 1 - s) + (v - 1) * stages, m * v);
    for (int k = 0; k < warmup; ++k) EXPECT_EQ(steps[size_t(k)].kind, PipelineStep::kForward);
    // Within a chunk the micro-batches go in order, so those in flight are consecutive.
    for (int c = 0; c < v; ++c) EXPECT_LE(InFlight(steps, c), m);
  }
  SimulatedSchedule t = Simulate(PipelineSchedule::kInterleaved, stages, m, 1, v);
  ASSERT_EQ(t.slots.size(), size_t(2 * m * v * stages)) << "a stage waited forever";
  // Slots of a forward's length: the fill and the drain are N-1 slots each.
  EXPECT_EQ(t.length, 2 * (v * m + stages - 1));
  for (int s = 0; s < stages; ++s) {
    EXPECT_DOUBLE_EQ(t.IdleFraction(s), TheoreticalBubble(stages, m, v));
  }
  // Against 1f1b of the same m in slots of whole stages (v of these): a v-fold smaller
  // bubble relative to the work, (N-1)/(v·m) against (N-1)/m.
  EXPECT_LT(TheoreticalBubble(stages, m, v), TheoreticalBubble(stages, m));
}

INSTANTIATE_TEST_SUITE_P(All, InterleavedScheduleTest,
                         ::testing::Combine(::testing::Values(2, 3, 4), ::testing::Values(2, 3),
                                            ::testing::Values(1, 2, 3)));

TEST(StageModelChunks, EveryVthChunkOfVTimesTheStages) {
  model::ModelChunks c = StageModelChunks(8, 2, 2, {}, 0).value();
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0].begin, 0);
  EXPECT_EQ(c[0].end, 2);
  EXPECT_EQ(c[1].begin, 4);
  EXPECT_EQ(c[1].end, 6);
  c = StageModelChunks(8, 2, 2, {1, 3, 2, 2}, 1).value();  // virtual stages 1 and 3
  EXPECT_EQ(c[0].begin, 1);
  EXPECT_EQ(c[0].end, 4);
  EXPECT_EQ(c[1].begin, 6);
  EXPECT_EQ(c[1].end, 8);
  c = StageModelChunks(8, 4, 1, {}, 3).value();  // one chunk: the stage's layers
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].begin, 6);
  EXPECT_TRUE(absl::StrContains(StageModelChunks(4, 4, 2, {}, 0).status().message(),
                                "is 8 chunks, more than the 4 layers"));
  EXPECT_TRUE(absl::StrContains(StageModelChunks(8, 2, 2, {4, 4}, 0).status().message(),
                                "wants one per chunk, --pp x --virtual_stages = 4"));
}

TEST(ScheduleChart, ShowsEachStagesSlots) {
  std::string chart = ScheduleChart(Simulate(PipelineSchedule::k1F1B, 2, 2));
  EXPECT_EQ(chart,
            "stage 0 | F0 F1 .. B0 .. B1 |  33% idle\n"
            "stage 1 | .. F0 B0 F1 B1 .. |  33% idle\n");
}

TEST(ScheduleChart, NamesTheChunkOfEachSlot) {
  std::string chart = ScheduleChart(Simulate(PipelineSchedule::kInterleaved, 2, 2, 1, 2));
  EXPECT_EQ(chart,
            "stage 0 | F0a F1a F0b F1b ... B0b ... B1b B0a B1a |  20% idle\n"
            "stage 1 | ... F0a F1a F0b B0b F1b B1b B0a B1a ... |  20% idle\n");
}

TEST(StageLayers, BalancedOrGivenAndCheckedGivenBadInput) {
  std::vector<LayerRange> r = StageLayers(8, 3, {}).value();
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0].end - r[0].begin, 3);
  EXPECT_EQ(r[2].begin, 6);
  EXPECT_EQ(r[2].end, 8);
  r = StageLayers(8, 3, {2, 2, 4}).value();
  EXPECT_EQ(r[2].begin, 4);
  EXPECT_TRUE(absl::StrContains(StageLayers(4, 5, {}).status().message(), "more stages than the 4 layers"));
  EXPECT_TRUE(absl::StrContains(StageLayers(8, 3, {3, 3, 3}).status().message(), "sums to 9 layers"));
  EXPECT_TRUE(absl::StrContains(StageLayers(8, 3, {4, 4}).status().message(), "has 2 entries for --pp=3"));
  EXPECT_TRUE(absl::StrContains(StageLayers(8, 2, {8, 0}).status().message(), "every stage needs a layer"));
  EXPECT_TRUE(absl::StrContains(ParsePipelineSchedule("zb").status().message(), "gpipe, 1f1b or interleaved"));
}

}  // namespace
}  // namespace tally::parallel
