// Pipeline schedules: every micro-batch's forward and backward once per stage, in an
// order the stages can run without waiting on each other forever; 1F1B bounds the
// micro-batches in flight; both leave the bubble (N-1)/(m+N-1); layer splits.
#include "parallel/pipeline_schedule.h"

#include <algorithm>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace tally::parallel {
namespace {

// The most micro-batches whose forward a stage has run and whose backward it has not.
int InFlight(const std::vector<PipelineStep>& steps) {
  int now = 0, most = 0;
  for (const PipelineStep& s : steps) {
    now += s.kind == PipelineStep::kForward ? 1 : -1;
    most = std::max(most, now);
  }
  return most;
}

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
    EXPECT_EQ(InFlight(steps), schedule == PipelineSchedule::kGPipe ? m : std::min(m, stages - s));
  }
  Timeline t = Simulate(schedule, stages, m);
  ASSERT_EQ(t.slots.size(), size_t(2 * m * stages)) << "a stage waited forever";
  // Equal forward and backward times: every stage idles (N-1)/(m+N-1) of the step.
  EXPECT_EQ(t.length, 2 * (m + stages - 1));
  for (int s = 0; s < stages; ++s) EXPECT_DOUBLE_EQ(t.IdleFraction(s), TheoreticalBubble(stages, m));
}

INSTANTIATE_TEST_SUITE_P(
    All, ScheduleTest,
    ::testing::Combine(::testing::Values(PipelineSchedule::kGPipe, PipelineSchedule::k1F1B),
                       ::testing::Values(1, 2, 4), ::testing::Values(1, 2, 4, 8)));

TEST(ScheduleChart, ShowsEachStagesSlots) {
  std::string chart = ScheduleChart(Simulate(PipelineSchedule::k1F1B, 2, 2));
  EXPECT_EQ(chart,
            "stage 0 | F0 F1 .. B0 .. B1 |  33% idle\n"
            "stage 1 | .. F0 B0 F1 B1 .. |  33% idle\n");
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
  EXPECT_TRUE(absl::StrContains(ParsePipelineSchedule("zb").status().message(), "gpipe or 1f1b"));
}

}  // namespace
}  // namespace tally::parallel
