// A run replayed on a modelled cluster: hand-made timelines give the times of the model
// (lab/report/replay.h) exactly, and a dry run's timeline holds the FLOPs of its matmuls and
// every call, so that its replay adds up.
#include "lab/report/replay.h"

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "lab/report/report.h"
#include "lab/report/trace.h"
#include "core/runtime/json_reader.h"
#include "tests/report/flops.h"
#include "tests/train/run_ranks.h"

namespace tally::report {
namespace {

// 1 TFLOP/s; links of 1 GB/s + 1 us inside a node, 0.5 GB/s + 2 us across.
const comm::Cluster kLinks{{1, 1}, {0.5, 2}};

TEST(Replay, CollectivesWaitForTheLastMemberAndTheSlowestMessages) {
  Timeline a, b;
  a.set_recording(true);
  b.set_recording(true);
  a.Compute(Flops(2e12));  // 2 s
  b.Compute(Flops(1e12));  // 1 s
  a.Collective("g:0,1#0", 2, 0, "g all_reduce", {{1, 1'000'000'000, 1}}, 0, 0);  // 1 s + 1 us
  b.Collective("g:0,1#0", 2, 0, "g all_reduce", {{0, 500'000'000, 2}}, 0, 0);    // 0.5 s + 2 us
  const std::vector<ReplayedRank> r =
      Replay({&a, &b}, comm::Nodes::One(2), kLinks, train::GpuModel::Flat(1)).value();
  EXPECT_DOUBLE_EQ(r[0].compute_s, 2);
  EXPECT_DOUBLE_EQ(r[0].seconds, 2 + 1 + 1e-6);
  EXPECT_DOUBLE_EQ(r[1].seconds, r[0].seconds);
  EXPECT_DOUBLE_EQ(r[1].exposed_s, 1 + 1 + 1e-6);  // a's second of compute, then the call
  EXPECT_DOUBLE_EQ(r[0].exposed_s, 1 + 1e-6);
}

// Who waited for whom: the rank that computed less waits for the other, and that wait
// is booked to the late peer; the time moving bytes is not.
TEST(Replay, AWaitForTheLastMemberIsBookedToIt) {
  Timeline a, b, c;
  for (Timeline* t : {&a, &b, &c}) t->set_recording(true);
  a.Compute(Flops(3e12));  // 3 s: the last to arrive
  b.Compute(Flops(1e12));
  c.Compute(Flops(2e12));
  for (Timeline* t : {&a, &b, &c}) {
    t->Collective("g:0,1,2#0", 3, 0, "g all_reduce", {{0, 1'000'000, 1}}, 0, 0);  // 1 ms + 1 us
  }
  const std::vector<ReplayedRank> r =
      Replay({&a, &b, &c}, comm::Nodes::One(3), kLinks, train::GpuModel::Flat(1)).value();
  EXPECT_DOUBLE_EQ(r[0].waited.seconds, 0);
  EXPECT_EQ(r[0].waited.Most(), -1);
  EXPECT_DOUBLE_EQ(r[1].waited.seconds, 2);
  EXPECT_DOUBLE_EQ(r[2].waited.seconds, 1);
  EXPECT_EQ(r[1].waited.Most(), 0);
  EXPECT_EQ(r[2].waited.Most(), 0);
  EXPECT_NEAR(r[1].exposed_s - r[1].waited.seconds, 1e-3 + 1e-6, 1e-12);  // moving the bytes
  // Seconds of compute that no kernel counts (--slow_rank) are the same on any cluster.
  Timeline slow, fast;
  for (Timeline* t : {&slow, &fast}) t->set_recording(true);
  slow.ComputeSeconds(0.02);
  for (Timeline* t : {&slow, &fast}) t->Collective("g:0,1#0", 2, 0, "g all_reduce", {}, 0, 0);
  for (double tflops : {1.0, 1000.0}) {
    const std::vector<ReplayedRank> s =
        Replay({&slow, &fast}, comm::Nodes::One(2), kLinks, train::GpuModel::Flat(tflops)).value();
    EXPECT_DOUBLE_EQ(s[0].compute_s, 0.02);
    EXPECT_DOUBLE_EQ(s[1].waited.by_peer.at(0), 0.02);
  }
}

// The same split on the timeline's own stamps (this host's clock): a blocking
// collective's members arrive when they enter it, a posted one's when they post it, and a
// send waits for its receiver's post.
TEST(MeasureWaits, TheStampsSayWhoArrivedLast) {
  constexpr int64_t kS = 1'000'000'000;
  Timeline a, b;
  a.set_recording(true);
  b.set_recording(true);
  a.Collective("g:0,1#0", 2, 0, "g all_reduce", {}, 3 * kS, 4 * kS);  // came in last
  b.Collective("g:0,1#0", 2, 0, "g all_reduce", {}, 1 * kS, 4 * kS);
  // A posted collective: b posts at 5 s and waits from 6 s; a posts at 8 s.
  const int64_t wb = b.PostCollective("g:0,1#0", 2, 1, "g all_gather", 5 * kS);
  b.Wait(wb, {}, 6 * kS, 9 * kS);
  const int64_t wa = a.PostCollective("g:0,1#0", 2, 1, "g all_gather", 8 * kS);
  a.Wait(wa, {}, 8 * kS, 9 * kS);
  // A send from b to a, waited from 10 s; a posts the receive at 12 s (idle, not exposed).
  const int64_t send = b.PostMessage("pp:0,1#0", 0, /*send=*/true, 64, "pp sendrecv", 10 * kS);
  b.Wait(send, {}, 10 * kS, 13 * kS);
  const int64_t recv = a.PostMessage("pp:0,1#0", 1, /*send=*/false, 64, "pp sendrecv", 12 * kS);
  a.Wait(recv, {}, 12 * kS, 13 * kS);
  const std::vector<MeasuredWaits> w = MeasureWaits({&a, &b});
  EXPECT_DOUBLE_EQ(w[0].exposed_s, 1 + 1);  // its collective and its wait; the receive is idle
  EXPECT_DOUBLE_EQ(w[0].waited.seconds, 0);
  EXPECT_DOUBLE_EQ(w[1].exposed_s, 3 + 3 + 3);
  EXPECT_DOUBLE_EQ(w[1].waited.seconds, 2 + 2 + 2);  // from 1 s to 3, 6 to 8, 10 to 12
  EXPECT_EQ(w[1].waited.Most(), 0);
}

TEST(Replay, AMessageEndsAfterBothPostsAndItsTransferAndAWaitingReceiverIsIdle) {
  Timeline a, b;
  a.set_recording(true);
  b.set_recording(true);
  a.Compute(Flops(3e12));
  const int64_t send = a.PostMessage("pp:0,1#0", 1, /*send=*/true, 250'000'000, "pp sendrecv", 0);
  a.Wait(send, {{1, 250'000'000, 1}}, 0, 0);  // across nodes: 0.5 s + 2 us
  const int64_t recv = b.PostMessage("pp:0,1#0", 0, /*send=*/false, 250'000'000, "pp sendrecv", 0);
  b.Wait(recv, {}, 0, 0);
  b.Compute(Flops(1e12));
  const std::vector<ReplayedRank> r =
      Replay({&a, &b}, comm::Nodes::Blocks(2, 1).value(), kLinks, train::GpuModel::Flat(1)).value();
  const double arrives = 3 + 0.5 + 2e-6;
  EXPECT_DOUBLE_EQ(r[0].seconds, arrives);
  EXPECT_DOUBLE_EQ(r[0].exposed_s, 0.5 + 2e-6);
  EXPECT_DOUBLE_EQ(r[1].idle_s, arrives);
  EXPECT_DOUBLE_EQ(r[1].seconds, arrives + 1);
  // A wait nobody can satisfy is an error, not a hang.
  Timeline lonely;
  lonely.set_recording(true);
  lonely.Collective("g:0,1#0", 2, 0, "g all_reduce", {}, 0, 0);
  EXPECT_FALSE(Replay({&lonely, &b}, comm::Nodes::One(2), kLinks, train::GpuModel::Flat(1)).ok());
}

// Every rank's timeline of `o`'s steps, replayed on kLinks at 1 TFLOP/s.
std::vector<ReplayedRank> RunAndReplay(train::TrainOptions o) {
  o.cluster.gpu = train::GpuModel::Flat(1);
  o = o.Resolved();
  EXPECT_TRUE(o.Validate().ok()) << o.Validate();
  const std::vector<Timeline> timelines = LastStepTimelines(o);
  std::vector<const Timeline*> all;
  for (const Timeline& t : timelines) all.push_back(&t);
  absl::StatusOr<std::vector<ReplayedRank>> replayed =
      Replay(all, comm::Nodes::One(o.world()), kLinks, train::GpuModel::Flat(1));
  EXPECT_TRUE(replayed.ok()) << replayed.status();
  return replayed.ok() ? *replayed : std::vector<ReplayedRank>(size_t(o.world()));
}

// A dry run records its matmuls' FLOPs and every call; replayed, each rank's compute is
// those FLOPs at the rate, and its step is compute + exposed + idle.
TEST(Replay, ADryRunsComputeIsItsMatmulsFlops) {
  train::TrainOptions o = train::Grid{.dp = 2, .pp = 2}.On(train::TinyGrid(4));
  o.dry_run = true;
  o.training.steps = 1;
  const std::vector<ReplayedRank> r = RunAndReplay(o);
  // Per micro-batch of b sequences on a stage of L layers: forward 24·n·C² + 4·b·T²·C a
  // layer, the LM head 2·n·C·V on the last stage; backward twice the forward.
  const model::GPTConfig& c = o.model;
  const double b = o.training.micro_batch_size, n = b * c.seq_len, C = c.n_embd, T = c.seq_len;
  const double layer = 24 * n * C * C + 4 * b * T * T * C, layers = c.n_layer / 2.0;
  const double m = o.accumulation_steps();
  for (int rank = 0; rank < o.world(); ++rank) {
    const bool last = o.topology().Of(rank).pp == 1;
    const double forward = layers * layer + (last ? 2 * n * C * c.vocab_size : 0);
    EXPECT_NEAR(r[size_t(rank)].compute_s * 1e12, 3 * m * forward, 1e-6 * forward) << rank;
    EXPECT_NEAR(r[size_t(rank)].seconds,
                r[size_t(rank)].compute_s + r[size_t(rank)].exposed_s + r[size_t(rank)].idle_s,
                1e-12);
    EXPECT_GT(r[size_t(rank)].exposed_s, 0) << rank;  // the dp all-reduce, at least
  }
  EXPECT_GT(r[0].idle_s + r[2].idle_s, 0);  // stage 0 waits for stage 1's gradients
  // The predicted trace: each rank's spans, compute and calls on their own tracks, end to end.
  const JsonValue trace = ParseJson(PredictedTraceJson(o, r)).value();
  size_t spans = 0, compute = 0;
  for (const JsonValue& e : trace.Find("traceEvents")->array) {
    if (e.Find("ph")->string != "X") continue;
    ++spans;
    compute += e.Find("name")->string == "compute" ? 1 : 0;
  }
  size_t want = 0, want_compute = 0;
  for (const ReplayedRank& rank : r) {
    double at = 0;
    for (const ReplaySpan& span : rank.spans) {
      EXPECT_DOUBLE_EQ(span.start, at);  // one after another, no gap
      at = span.end;
      want += span.end > span.start ? 1 : 0;
      want_compute += span.end > span.start && span.compute ? 1 : 0;
    }
    EXPECT_DOUBLE_EQ(at, rank.seconds);
  }
  EXPECT_EQ(spans, want);
  EXPECT_EQ(compute, want_compute);
  EXPECT_GT(compute, 0u);
}

// A real run's timeline is its dry run's: the same FLOPs, calls and messages, so the same
// replay to the last bit, for a grid with every kind of call (tp, pp, ZeRO-2's posted
// reduce-scatters with --overlap).
TEST(Replay, ARealRunReplaysAsItsDryRun) {
  train::TrainOptions o = train::Grid{.dp = 2, .tp = 2, .pp = 2, .zero = 2}.On(train::TinyGrid(4));
  o.training.steps = 2;
  o.parallel.overlap = true;
  o.data.eval_every = 0;
  o.sampling.sample_bytes = 0;
  train::TrainOptions dry = o;
  dry.dry_run = true;
  const std::vector<ReplayedRank> real = RunAndReplay(o), planned = RunAndReplay(dry);
  ASSERT_EQ(real.size(), planned.size());
  for (size_t r = 0; r < real.size(); ++r) {
    EXPECT_EQ(real[r].seconds, planned[r].seconds) << r;
    EXPECT_EQ(real[r].compute_s, planned[r].compute_s) << r;
    EXPECT_EQ(real[r].exposed_s, planned[r].exposed_s) << r;
    EXPECT_EQ(real[r].idle_s, planned[r].idle_s) << r;
    EXPECT_GT(real[r].compute_s, 0) << r;
  }
}

// Context parallelism's ring: each rank's sends are its N−1 K, V sends forward and 2N−1
// (K, V and the dK, dV accumulators) backward per layer and micro-batch, each its α-β
// time; the rank waits on them at least for each backward step's dK, dV send (posted once
// the step's blocks are done) and at most for all of them. Zigzag: every rank alike.
TEST(Replay, TheRingsSendsAreItsMessagesAndItsBlocksHideSome) {
  for (const int n : {2, 4}) {
    train::TrainOptions o = train::Grid{.cp = n}.On(train::TinyGrid(2));
    o.dry_run = true;
    o.training.steps = 1;
    const std::vector<ReplayedRank> r = RunAndReplay(o);
    const model::GPTConfig& c = o.model;
    const double b = o.training.micro_batch_size, m = o.accumulation_steps();
    const int64_t kv_bytes = int64_t(2 * b * (c.seq_len / n) * c.n_embd * 4);
    const double send = kLinks.intra.Seconds(kv_bytes, 1);
    const double per_layer = (n - 1) + (2 * n - 1);
    for (int rank = 0; rank < n; ++rank) {
      SCOPED_TRACE(::testing::Message() << "cp " << n << " rank " << rank);
      const ReplayedRank& x = r[size_t(rank)];
      EXPECT_NEAR(x.p2p_sent_s.at("cp"), c.n_layer * m * per_layer * send, 1e-12);
      EXPECT_GE(x.p2p_exposed_s.at("cp"), c.n_layer * m * n * send - 1e-12);
      EXPECT_LE(x.p2p_exposed_s.at("cp"), x.p2p_sent_s.at("cp") + 1e-12);
      EXPECT_LE(x.p2p_exposed_s.at("cp"), x.exposed_s + 1e-12);
      EXPECT_DOUBLE_EQ(x.compute_s, r[0].compute_s);
    }
  }
}

// The report's cp lines: each cp rank's attention work against the least's by the
// closed form (without zigzag rank r sees r·L² + L(L+1)/2 pairs a head, L = s/N), the
// replay's compute a rank, and the share of the busiest sender's ring sends its blocks hid.
TEST(Replay, TheReportShowsEachCpRanksWorkAndTheRingsHiddenShare) {
  train::TrainOptions o =
      train::Grid{.cp = 4, .cp_load_balance = parallel::CpLoadBalance::kNone}.On(train::TinyGrid(2));
  o.dry_run = true;
  o.training.steps = 1;
  o.data.eval_every = 0;
  o.sampling.sample_bytes = 0;
  o = o.Resolved();
  const std::vector<Timeline> timelines = LastStepTimelines(o);
  std::vector<const Timeline*> all;
  for (const Timeline& t : timelines) all.push_back(&t);
  const std::vector<comm::TrafficLedger> traffic(4);
  const std::vector<MemoryLedger> memory(4);
  ReportInputs in{o, 1, traffic, memory};
  in.modelled = std::make_shared<const absl::StatusOr<std::vector<ReplayedRank>>>(
      Replay(all, comm::Nodes::One(4), o.cluster.links, o.ModelledGpu()));
  ASSERT_TRUE(in.modelled->ok());
  const double l = o.model.seq_len / 4, least = l * (l + 1) / 2;
  std::string shares;
  for (int r = 0; r < 4; ++r) {
    absl::StrAppendFormat(&shares, "%s%.2f", r > 0 ? " " : "", (r * l * l + least) / least);
  }
  const std::vector<std::string> lines = absl::StrSplit(ContextLines(in), '\n');
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0], "cp attention work by cp rank (p2p, none), x the least: " + shares);
  double lo = 1e300, hi = 0, sent = 0, exposed = 0;
  for (const ReplayedRank& r : **in.modelled) {
    lo = std::min(lo, r.compute_s);
    hi = std::max(hi, r.compute_s);
    if (r.p2p_sent_s.at("cp") > sent) sent = r.p2p_sent_s.at("cp"), exposed = r.p2p_exposed_s.at("cp");
  }
  EXPECT_LT(lo, hi);  // the last rank computes the most blocks
  EXPECT_EQ(lines[1], absl::StrFormat("  modelled: compute %.4g..%.4g ms a rank; ring sends %.4g "
                                      "ms, %.0f%% hidden by blocks",
                                      lo * 1e3, hi * 1e3, sent * 1e3, 100 * (1 - exposed / sent)));
  EXPECT_GT(exposed, 0);
  EXPECT_LT(exposed, sent);
}

}  // namespace
}  // namespace tally::report
