// tally_plan with context parallelism: its cp row, and every other row of a grid with cp
// (the dp group's dp·cp replicas, tp and the pipeline on b·s/cp positions), the model
// states and the activations, are a dry run's ledgers to the byte on random shapes and
// grids; the bytes across nodes are a real run's; the busiest GPU's attention work is the
// blocks a run counts.
#include <algorithm>
#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "core/parallel/context_parallel.h"
#include "lab/plan/plan.h"
#include "core/runtime/comm/ledger/exact_traffic.h"
#include "tests/plan/small_plan.h"
#include "tests/train/run_ranks.h"

namespace tally::plan {
namespace {

using parallel::CpComm;
using parallel::CpLoadBalance;

// A sweep drawn at random (a fixed seed): cp 2 or 4 in every variant and balance, with dp,
// tp (± sequence parallelism), pp (gpipe, 1f1b, interleaved), ZeRO 0-3, micro-batches,
// full recompute (a stage's or each layer's) and experts over ep of the dp·cp GPUs.
TEST(PlanContext, RandomShapesAndGridsEqualTheDryRun) {
  Pick pick(20261205);
  int planned = 0, cp_rows = 0;
  int with_experts = 0;
  for (int attempt = 0; planned < 20 && attempt < 1000; ++attempt) {
    model::GPTConfig c;
    c.n_layer = pick({2, 4});
    c.n_head = pick({2, 4});
    c.n_embd = c.n_head * pick({4, 8});
    c.seq_len = pick({16, 32});
    c.vocab_size = pick({256, 320});
    PlanInput in{GptShape(c)};
    in.seq_len = c.seq_len;
    in.cp = pick({2, 4});
    in.cp_comm = CpComm(pick({0, 1, 2}));
    in.cp_load_balance = CpLoadBalance(pick({0, 1}));
    in.dp = pick({1, 2});
    in.tp = pick({1, 2});
    in.pp = pick({1, 2});
    in.zero = pick({0, 1, 2, 3});
    in.micro_batches = pick({1, 2});
    in.batch = in.micro_batches * pick({1, 2});
    in.sequence_parallel = in.tp > 1 && pick({0, 1}) == 1;
    in.gpipe = in.pp > 1 && pick({0, 1}) == 1;
    in.recompute = pick({0, 1}) == 1;
    in.recompute_layers = in.recompute && in.pp > 1 && pick({0, 1}) == 1;
    if (pick({0, 1, 2}) == 0) {  // experts, over ep of the dp group's dp·cp GPUs
      in.model = WithExperts(in.model, 4, 2);
      in.n_experts = 4;
      in.ep = pick({1, 2, 4});
    }
    in.virtual_stages = in.pp > 1 && !in.gpipe && c.n_layer == 4 && pick({0, 1}) == 1 ? 2 : 1;
    if (in.virtual_stages > 1) in.micro_batches = in.batch = 2;
    in.precision = DType::kF32;
    in.bytes_per_value = 4;
    train::TrainOptions o = PlanAsTrainOptions(in);
    o.dry_run = true;
    o.training.steps = 1;
    o = o.Resolved();
    if (!o.Validate().ok() || c.n_head % in.tp != 0) continue;
    ++planned;
    SCOPED_TRACE(absl::StrCat("n_layer ", c.n_layer, " n_head ", c.n_head, " n_embd ", c.n_embd,
                              " seq_len ", c.seq_len, " vocab ", c.vocab_size, " cp ", in.cp, " ",
                              parallel::Name(in.cp_comm), " ", parallel::Name(in.cp_load_balance),
                              " dp ", in.dp, " tp ", in.tp, " pp ", in.pp, " v ",
                              in.virtual_stages, " zero ", in.zero, " m ", in.micro_batches,
                              " b ", in.batch, " sp ", in.sequence_parallel, " gpipe ", in.gpipe,
                              " recompute ", in.recompute, " layers ", in.recompute_layers,
                              " experts ", in.n_experts, " ep ", in.ep));
    EXPECT_GT(ExpectPlanIsTheDryRun(in, o), 0);
    with_experts += in.n_experts > 0 ? 1 : 0;
    for (const PlanRow& row : Plan(in)) cp_rows += row.strategy == "cp (attention)" ? 1 : 0;
  }
  EXPECT_EQ(planned, 20);
  EXPECT_EQ(cp_rows, 20);
  EXPECT_GT(with_experts, 2);
}

// The cp row by its closed forms (context_parallel.h), per layer and micro-batch for the
// busiest GPU: p2p (N−1 + 2N−1) sends of 2·b·(s/N)·h; allgather two passes of
// (N−1)/N·2·b·s·h; a2a eight all-to-alls of (N−1)/N·b·(s/N)·h. A 4-layer model, m = 2.
TEST(PlanContext, CpRowIsItsClosedForm) {
  for (const CpComm comm : {CpComm::kP2p, CpComm::kAllGather, CpComm::kAllToAll}) {
    for (const int n : {2, 4}) {
      PlanInput in = SmallPlan();
      in.cp = n;
      in.cp_comm = comm;
      in.micro_batches = 2;
      in.bytes_per_value = 4;
      const double b = 1, s = in.seq_len, h = in.model.hidden, e = 4, per = 4 * 2;  // layers · m
      double expected = 0;
      if (comm == CpComm::kP2p) expected = (n - 1 + 2 * n - 1) * 2 * b * (s / n) * h * e;
      if (comm == CpComm::kAllGather) expected = 2 * (n - 1) * 2 * b * (s / n) * h * e;
      if (comm == CpComm::kAllToAll) expected = 8 * (n - 1) * b * (s / n) / n * h * e;
      int found = 0;
      for (const PlanRow& row : Plan(in)) {
        if (row.strategy != "cp (attention)") continue;
        ++found;
        EXPECT_EQ(row.exact_bytes_per_gpu, per * expected) << parallel::Name(comm) << " " << n;
        EXPECT_EQ(row.total_bytes, n * per * expected);
      }
      EXPECT_EQ(found, 1);
    }
  }
}

// On nodes of 2 GPUs with tp 2 × cp 2: the tp group inside a node and the cp group across
// nodes (the default order, tp fastest), or the other way round (--order=dp-tp-pp: the dp
// axis, cp its fastest part, varies first). The planner's bytes across nodes of every row
// are what a run measures: the cp ring's, tp's and the cp replicas' all-reduce.
TEST(PlanContext, BytesAcrossNodesAreTheMeasuredOnes) {
  for (const char* order : {"tp-dp-pp", "dp-tp-pp"}) {
    for (const CpComm comm : {CpComm::kP2p, CpComm::kAllGather}) {
      SCOPED_TRACE(absl::StrCat(order, " ", parallel::Name(comm)));
      PlanInput in = SmallPlan();
      in.precision = DType::kF32;
      in.bytes_per_value = 4;
      in.tp = 2;
      in.cp = 2;
      in.cp_comm = comm;
      in.gpus_per_node = 2;
      in.order = parallel::ParseOrder(order).value();
      const train::RunResult run = RunPlan(in);
      const comm::Nodes nodes = *PlanAsTrainOptions(in).PlacedNodes();
      int compared = 0;
      double inter = 0;
      for (const PlanRow& row : Plan(in)) {
        const auto rows = RowsOf(row.strategy, in.zero);
        if (!rows) continue;
        comm::LinkBytes most;
        for (const comm::TrafficLedger& ledger : run.traffic) {
          const comm::LinkBytes b = ledger.SentByLink(nodes, rows);
          if (b.total() > most.total() || (b.total() == most.total() && b.inter > most.inter)) {
            most = b;
          }
        }
        EXPECT_EQ(double(most.total()), row.exact_bytes_per_gpu) << row.strategy;
        EXPECT_EQ(double(most.inter), row.inter_bytes_per_gpu) << row.strategy;
        inter += row.inter_bytes_per_gpu;
        ++compared;
      }
      EXPECT_EQ(compared, 4);  // the dp all-reduce, tp's two rows and the cp row
      EXPECT_GT(inter, 0);
    }
  }
}

// The busiest GPU's step work is the busiest rank's counted blocks: without zigzag the
// last cp rank (2N−1 times the first's visible pairs), with it every rank alike; the
// planner's stage work equals what the kernels of a dry run count on that rank.
TEST(PlanContext, ComputeIsTheBusiestRanksCountedBlocks) {
  for (const CpLoadBalance balance : {CpLoadBalance::kZigzag, CpLoadBalance::kNone}) {
    for (const CpComm comm : {CpComm::kP2p, CpComm::kAllGather, CpComm::kAllToAll}) {
      SCOPED_TRACE(absl::StrCat(parallel::Name(comm), " ", parallel::Name(balance)));
      PlanInput in = SmallPlan();
      model::GPTConfig four_heads = in.model.config;  // a2a: a head for each of 4 cp ranks
      four_heads.n_head = 4;
      in.model = GptShape(four_heads);
      in.cp = 4;
      in.cp_comm = comm;
      in.cp_load_balance = balance;
      in.precision = DType::kF32;
      in.bytes_per_value = 4;
      train::TrainOptions o = PlanAsTrainOptions(in);
      o.dry_run = true;
      o.training.steps = 1;
      o.data.eval_every = 0;
      o.sampling.sample_bytes = 0;
      o = o.Resolved();
      ASSERT_TRUE(o.Validate().ok()) << o.Validate();
      const std::vector<Timeline> timelines = train::LastStepTimelines(o);
      double most = 0, least = 1e300;
      for (const Timeline& t : timelines) {
        ComputeWork counted;
        for (const TimelineEntry& e : t.entries()) counted += e.compute;
        most = std::max(most, counted.flops);
        least = std::min(least, counted.flops);
      }
      EXPECT_DOUBLE_EQ(StageWork(in)[0].flops, most);
      if (balance == CpLoadBalance::kZigzag || comm == CpComm::kAllToAll) {
        EXPECT_DOUBLE_EQ(most, least);
      } else {
        EXPECT_GT(most, least);
      }
    }
  }
}

}  // namespace
}  // namespace tally::plan
