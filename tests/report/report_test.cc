// The report's time split and the seed's verdict, from ledgers whose times are known.
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "lab/report/report.h"
#include "tests/report/flops.h"

namespace tally::report {
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
  train::TrainOptions o;
  o.parallel.dp = 2;
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
  const std::string measured = MeasuredVerdict(in);
  EXPECT_TRUE(absl::StartsWith(measured, "measured on this host (its load moves it; the verdict is "
                                         "the model's): communication exposed 55% of the step on "
                                         "rank 1")) << measured;
  EXPECT_TRUE(absl::StrContains(measured, "dp all_reduce backward (40.0 ms), tp sendrecv forward x "
                                          "(10.0 ms), tp all_reduce forward layer0.mlp (5.0 ms)"))
      << measured;
  // Under 30% everywhere: no rows named.
  std::vector<comm::TrafficLedger> light = {comm::TrafficLedger(0), comm::TrafficLedger(1)};
  light[0].RecordCall(Key("dp", comm::Primitive::kAllReduce, comm::Phase::kBackward), 4, 0.030, 0.030);
  ReportInputs calm{o, 1, light, memory, {}, {}, {100'000'000, 100'000'000}};
  EXPECT_TRUE(absl::StrContains(MeasuredVerdict(calm), "exposed 30% of the step at most, on rank 0\n"))
      << MeasuredVerdict(calm);
}

// The verdict is the modelled clock's: the timelines' FLOPs and bytes on the cluster, not
// the ledgers' measured seconds. Rank 0 computes 1 s at 1 TFLOP/s, rank 1 0.2 s; then a
// 600 MB all-reduce message each (1 ms + 1 us at 600 GB/s): rank 1 waits 0.8 s for rank 0.
TEST(Report, TheVerdictIsTheModelsAndNamesTheLatePeer) {
  train::TrainOptions o;
  o.parallel.dp = 2;
  o.cluster.gpu = train::GpuModel::Flat(1);
  o.cluster.name = "test";
  std::vector<comm::TrafficLedger> traffic = {comm::TrafficLedger(0), comm::TrafficLedger(1)};
  std::vector<MemoryLedger> memory(2);
  for (int r = 0; r < 2; ++r) {
    Timeline& t = traffic[size_t(r)].timeline();
    t.set_recording(true);
    t.Compute(Flops(r == 0 ? 1e12 : 0.2e12));
    t.Collective("dp:0,1#0", 2, 0, "dp all_reduce backward", {{1 - r, 600'000'000, 1}}, 0, 0);
    // The measured seconds say the opposite: rank 0 waited, rank 1 did not.
    traffic[size_t(r)].RecordCall(Key("dp", comm::Primitive::kAllReduce, comm::Phase::kBackward), 4,
                                  r == 0 ? 0.9 : 0.0, r == 0 ? 0.9 : 0.0);
  }
  ReportInputs in{o, 1, traffic, memory, {}, {}, {1'000'000'000, 1'000'000'000}};
  const std::vector<ReplayedRank>& modelled = ModelledRun(in).value();
  EXPECT_NEAR(modelled[1].waited.by_peer.at(0), 0.8, 1e-12);
  const std::string verdict = Verdict(in);
  EXPECT_TRUE(absl::StartsWith(verdict, "communication-bound on the modelled clock, test: "
                                        "communication exposed 80% of the step on rank 1"))
      << verdict;
  EXPECT_TRUE(absl::StrContains(verdict, "800.0000 ms waiting for late peers (most for rank 0), "
                                         "1.0010 ms moving bytes; its largest exposed calls: dp "
                                         "all_reduce backward (801.0010 ms)"))
      << verdict;
  EXPECT_TRUE(absl::StrContains(verdict, "measured on this host (its load moves it; the verdict is "
                                         "the model's): communication exposed 90% of the step on "
                                         "rank 0"))
      << verdict;
  // Without --cluster, the default cluster, named.
  o.cluster.gpu = {};
  ReportInputs fallback{o, 1, traffic, memory, {}, {}, {1'000'000'000, 1'000'000'000}};
  EXPECT_TRUE(absl::StrContains(Verdict(fallback), "on the modelled clock, a100, the default "
                                                   "(--cluster to choose)"))
      << Verdict(fallback);
}

}  // namespace
}  // namespace tally::report
