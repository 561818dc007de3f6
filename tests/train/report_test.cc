// The report's time split and the seed's verdict, from ledgers whose times are known.
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "train/report.h"

namespace tally::train {
namespace {

comm::LedgerKey Key(const std::string& group, comm::Primitive primitive, comm::Phase phase,
                    const std::string& label = "") {
  comm::LedgerKey key;
  key.group = group;
  key.primitive = primitive;
  key.phase = phase;
  key.label = label;
  return key;
}

// One step of 100 ms per rank: rank 1 waits 40 ms in the dp all-reduce (and 5 ms in a tp
// one), and has a send in flight 30 ms of which it waited 10.
TEST(Report, TimeSplitsIntoComputeExposedHiddenAndIdleAndTheVerdictNamesTheRows) {
  TrainOptions o;
  o.dp = 2;
  std::vector<comm::TrafficLedger> traffic = {comm::TrafficLedger(0), comm::TrafficLedger(1)};
  std::vector<MemoryLedger> memory(2);
  traffic[0].RecordCall(Key("dp", comm::Primitive::kAllReduce, comm::Phase::kBackward), 4, 0.010, 0.010);
  traffic[1].RecordCall(Key("dp", comm::Primitive::kAllReduce, comm::Phase::kBackward), 4, 0.040, 0.040);
  traffic[1].RecordCall(Key("tp", comm::Primitive::kAllReduce, comm::Phase::kForward, "layer0.mlp"), 4,
                        0.005, 0.005);
  traffic[1].RecordCall(Key("tp", comm::Primitive::kSendRecv, comm::Phase::kForward, "x"), 4, 0.030, 0.010);
  traffic[1].RecordCall(Key("world", comm::Primitive::kAllGather, comm::Phase::kSetup), 4, 0.500, 0.500);
  ReportInputs in{o, 1, traffic, memory, {}, {}, {100'000'000, 100'000'000}};
  const RankTime t = TimeOf(in, 1);
  EXPECT_DOUBLE_EQ(t.step_ms, 100);
  EXPECT_NEAR(t.exposed_ms, 55, 1e-9);  // 40 + 5 + the send's 10 wait; setup is not a step's
  EXPECT_NEAR(t.hidden_ms, 20, 1e-9);
  EXPECT_NEAR(t.compute_ms, 45, 1e-9);
  EXPECT_EQ(t.idle_ms, 0);
  const std::string verdict = Verdict(in);
  EXPECT_TRUE(absl::StartsWith(verdict, "communication-bound: communication exposed 55% of the "
                                        "step on rank 1")) << verdict;
  EXPECT_TRUE(absl::StrContains(verdict, "dp all_reduce backward (40.0 ms), tp sendrecv forward x "
                                         "(10.0 ms), tp all_reduce forward layer0.mlp (5.0 ms)"))
      << verdict;
  // Under 30% everywhere: compute-bound.
  std::vector<comm::TrafficLedger> light = {comm::TrafficLedger(0), comm::TrafficLedger(1)};
  light[0].RecordCall(Key("dp", comm::Primitive::kAllReduce, comm::Phase::kBackward), 4, 0.030, 0.030);
  ReportInputs calm{o, 1, light, memory, {}, {}, {100'000'000, 100'000'000}};
  EXPECT_TRUE(absl::StartsWith(Verdict(calm), "compute-bound: communication exposed 30% of the step "
                                              "at most (rank 0")) << Verdict(calm);
}

}  // namespace
}  // namespace tally::train
