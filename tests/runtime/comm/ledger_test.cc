#include "core/runtime/comm/ledger/ledger.h"

#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "tests/runtime/comm/comm_test_util.h"

namespace tally::comm {
namespace {

using test_util::Filled;
using test_util::RunRanks;

// Each peer's bytes and sends go over the link to it: its class by the nodes, its time by
// the α-β model of that class, one α a send however many segments it took.
TEST(Ledger, SplitsBytesByLinkAndTimesThemOnAModelledCluster) {
  const Nodes nodes = Nodes::Blocks(4, 2).value();  // [0 1] [2 3]
  TrafficLedger ledger(0);
  LedgerKey key;
  key.group = "dp";
  key.primitive = Primitive::kAllReduce;
  TransferTotals& to_1 = ledger.Transfers(key, 1);
  to_1.bytes_sent = 1000000;
  to_1.messages_sent = 4;  // two sends of two segments each
  to_1.transfers_sent = 2;
  TransferTotals& to_2 = ledger.Transfers(key, 2);
  to_2.bytes_sent = 1000000;
  to_2.messages_sent = 3;  // one send of three segments
  to_2.transfers_sent = 1;
  auto all = [](const LedgerKey&) { return true; };
  EXPECT_EQ(ledger.SentByLink(nodes, all), (LinkBytes{1000000, 1000000}));
  const Cluster cluster{{100, 1}, {10, 5}};  // 100 GB/s + 1 us, 10 GB/s + 5 us
  const LinkSeconds s = ledger.ModelledSeconds(nodes, cluster)[key];
  EXPECT_DOUBLE_EQ(s.intra, 2e-6 + 1e-5);
  EXPECT_DOUBLE_EQ(s.inter, 5e-6 + 1e-4);
  EXPECT_EQ(ledger.SentByLink(nodes, [](const LedgerKey& k) { return k.group == "tp"; }),
            (LinkBytes{0, 0}));
  // BANDWIDTH,LATENCY flags.
  const LinkModel parsed = ParseLinkModel("link_inter", "25,2").value();
  EXPECT_EQ(parsed.gbps, 25);
  EXPECT_EQ(parsed.latency_us, 2);
  for (const char* bad : {"25", "0,1", "25,-1", "fast,1", "25,1,2"}) {
    EXPECT_TRUE(absl::StrContains(ParseLinkModel("link_inter", bad).status().message(),
                                  "--link_inter must be BANDWIDTH,LATENCY"))
        << bad;
  }
}

TEST(Ledger, ScopesSetPhaseAndNestedLabels) {
  TrafficLedger ledger(0);
  EXPECT_EQ(ledger.phase(), Phase::kOther);
  {
    PhaseScope phase(ledger, Phase::kBackward);
    LabelScope layer(ledger, "layer3");
    {
      LabelScope part(ledger, "mlp");
      EXPECT_EQ(ledger.label(), "layer3.mlp");
      EXPECT_EQ(ledger.phase(), Phase::kBackward);
    }
    EXPECT_EQ(ledger.label(), "layer3");
  }
  EXPECT_EQ(ledger.label(), "");
  EXPECT_EQ(ledger.phase(), Phase::kOther);
}

TEST(Ledger, BooksEveryCallUnderItsScopeAndReportsIt) {
  std::vector<TrafficLedger> ledgers(4);
  absl::Status status = RunRanks(4, [&](Communicator& world) -> absl::Status {
    ASSIGN_OR_RETURN(Tensor grads, Filled(world, 1024, [](int64_t) { return 1.0f; }));
    {
      PhaseScope phase(world.ledger(), Phase::kBackward);
      LabelScope label(world.ledger(), "layer0");
      RETURN_IF_ERROR(world.AllReduce(grads, ReduceOp::kAvg));
      RETURN_IF_ERROR(world.AllReduce(grads, ReduceOp::kAvg));
    }
    {
      PhaseScope phase(world.ledger(), Phase::kForward);
      RETURN_IF_ERROR(world.Broadcast(grads, 0, Algorithm::kNaive));
    }
    ledgers[world.rank()] = world.ledger();
    return absl::OkStatus();
  });
  ASSERT_TRUE(status.ok()) << status;

  for (const TrafficLedger& l : ledgers) {
    TransferTotals backward = l.Sum([](const LedgerKey& k) {
      return k.phase == Phase::kBackward && k.label == "layer0" && k.primitive == Primitive::kAllReduce;
    });
    EXPECT_EQ(backward.bytes_sent, 2 * 2 * 3 * 1024);  // 2 calls x 2(p-1)/p x 4096 bytes
    const CallTotals& calls = l.calls().at(
        LedgerKey{"world", Primitive::kAllReduce, Algorithm::kRing, Phase::kBackward, "layer0"});
    EXPECT_EQ(calls.calls, 2);
    EXPECT_EQ(calls.payload_bytes, 2 * 4096);
  }
  std::string table = FormatTrafficTable(ledgers);
  EXPECT_TRUE(absl::StrContains(table, "all_reduce")) << table;
  EXPECT_TRUE(absl::StrContains(table, "layer0")) << table;
  EXPECT_TRUE(absl::StrContains(table, "12288")) << table;   // bytes sent per rank, ring
  EXPECT_TRUE(absl::StrContains(table, "0..12288")) << table;  // naive broadcast: root only

  std::vector<std::vector<int64_t>> m = PeerMatrix(ledgers);
  EXPECT_EQ(m[0][1], 2 * 6144 + 4096);  // ring: 2(p-1) chunks of 1 KiB per call, + the broadcast
  EXPECT_EQ(m[0][2], 4096);                 // the naive broadcast's star
  EXPECT_EQ(m[1][0], 0);

  std::string json = TrafficJson(ledgers);
  EXPECT_TRUE(absl::StrContains(json, "\"op\":\"all_reduce\"")) << json;
  EXPECT_TRUE(absl::StrContains(json, "\"phase\":\"backward\"")) << json;
  EXPECT_TRUE(absl::StrContains(json, "\"scope\":\"layer0\"")) << json;
  EXPECT_TRUE(absl::StrContains(json, "\"peer_matrix\":[[0,16384,4096,4096]")) << json;
}

}  // namespace
}  // namespace tally::comm
