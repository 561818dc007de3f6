// tally_plan's rows for what cuts the bytes across nodes: HSDP's zero-1/2/3, ZeRO-3
// without resharding or with hpZ, and PowerSGD's step are the bytes a run of the same grid measures,
// in all and across nodes, and HSDP's memory line its model states.
#include <algorithm>
#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "lab/plan/plan.h"
#include "core/runtime/comm/ledger/names.h"
#include "tests/plan/small_plan.h"
#include "tests/train/run_ranks.h"

namespace tally::plan {
namespace {

// ZeRO's rows of a run: its shard group's (or dp group's) passes and the replicas' all-reduce.
bool ZeroRow(const comm::LedgerKey& k) {
  return (k.group == comm::group::kDpShard && k.primitive != comm::Primitive::kAllReduce) ||
         k.group == comm::group::kDpReplicate ||
         (k.group == comm::group::kDp && k.primitive != comm::Primitive::kAllReduce);
}

// The busiest rank's ZeRO bytes in `run`, and of them across nodes.
comm::LinkBytes Busiest(const train::RunResult& run, const PlanInput& in) {
  return BusiestSent(run.traffic, *PlanAsTrainOptions(in).PlacedNodes(), ZeroRow);
}

// The most model-state bytes (parameters, gradients, optimizer state) a rank of `run` held.
int64_t BusiestStates(const train::RunResult& run) {
  int64_t states = 0;
  for (const MemoryLedger& m : run.memory) {
    states = std::max(states, m.peak(MemoryCategory::kParams) + m.peak(MemoryCategory::kGrads) +
                                  m.peak(MemoryCategory::kOptimizer));
  }
  return states;
}

TEST(PlanHsdp, RowsAreTheMeasuredBytesInAllAndAcrossNodes) {
  struct Case {
    int nodes, per_node, zero, tp;
  };
  for (const Case& c : {Case{2, 2, 1, 1}, Case{2, 2, 2, 1}, Case{2, 2, 3, 1}, Case{3, 2, 3, 1},
                        Case{2, 3, 2, 1}, Case{2, 2, 3, 2}}) {
    SCOPED_TRACE(absl::StrCat(c.nodes, " nodes of ", c.per_node, ", zero ", c.zero, " tp ", c.tp));
    PlanInput in = SmallPlan();
    in.precision = DType::kF32;
    in.bytes_per_value = 4;
    in.dp = c.nodes * c.per_node;
    in.tp = c.tp;
    in.zero = c.zero;
    in.zero_shard = parallel::ZeroShard::kNode;
    in.gpus_per_node = c.per_node * c.tp;
    ASSERT_TRUE(CheckZeroShard(in).ok()) << CheckZeroShard(in);
    EXPECT_EQ(ShardGpus(in), c.per_node);
    const train::RunResult run = RunPlan(in);
    const comm::LinkBytes most = Busiest(run, in);
    EXPECT_GT(most.inter, 0);
    int compared = 0;
    for (const PlanRow& row : Plan(in)) {
      if (row.strategy != absl::StrCat("hsdp zero-", c.zero)) continue;
      EXPECT_EQ(double(most.total()), row.exact_bytes_per_gpu);
      EXPECT_EQ(double(most.inter), row.inter_bytes_per_gpu);
      ++compared;
    }
    EXPECT_EQ(compared, 1);
    EXPECT_DOUBLE_EQ(PlanMemoryPerGpu(in)[0].bytes_per_gpu, double(BusiestStates(run)));
  }
}

TEST(PlanHsdp, ZeroThreeWithoutReshardIsTheMeasuredRun) {
  PlanInput in = SmallPlan();
  in.precision = DType::kF32;
  in.bytes_per_value = 4;
  in.dp = 4;
  in.zero = 3;
  in.micro_batches = 2;
  in.zero3_reshard_after_forward = false;
  in.gpus_per_node = 2;
  const train::RunResult run = RunPlan(in);
  int compared = 0;
  for (const PlanRow& row : Plan(in)) {
    if (row.strategy != "zero-3, no reshard") continue;
    EXPECT_EQ(double(Busiest(run, in).total()), row.exact_bytes_per_gpu);
    EXPECT_EQ(double(Busiest(run, in).inter), row.inter_bytes_per_gpu);
    ++compared;
  }
  EXPECT_EQ(compared, 1);
}

TEST(PlanHpz, RowIsTheMeasuredZeroThreeWithItsGathersInsideTheNode) {
  for (auto [nodes, per_node] : {std::pair{2, 2}, {3, 2}, {2, 3}}) {
    SCOPED_TRACE(absl::StrCat(nodes, " nodes of ", per_node));
    PlanInput in = SmallPlan();
    in.precision = DType::kF32;
    in.bytes_per_value = 4;
    in.dp = nodes * per_node;
    in.zero = 3;
    in.zero_hpz = true;
    in.gpus_per_node = per_node;
    ASSERT_TRUE(CheckZeroShard(in).ok()) << CheckZeroShard(in);
    const train::RunResult run = RunPlan(in);
    const comm::LinkBytes most = Busiest(run, in);
    int compared = 0;
    for (const PlanRow& row : Plan(in)) {
      if (row.strategy != "zero-3 + hpz") continue;
      EXPECT_EQ(double(most.total()), row.exact_bytes_per_gpu);
      EXPECT_EQ(double(most.inter), row.inter_bytes_per_gpu);
      ++compared;
    }
    EXPECT_EQ(compared, 1);
    EXPECT_DOUBLE_EQ(PlanMemoryPerGpu(in)[0].bytes_per_gpu, double(BusiestStates(run)));
  }
}

// One quantised case of the planner: its row against tally_train's busiest rank, in all
// and across nodes. bits 0: qwZ; 8 or 4: qgZ; zero++: hpZ, qwZ and qgZ together.
struct QuantizedCase {
  int nodes = 1, per_node = 2;
  int bits = 0;
  int64_t block = 4;
  bool zeropp = false;
};

void ExpectQuantizedRowMeasured(const QuantizedCase& c) {
  SCOPED_TRACE(absl::StrCat(c.zeropp ? "zero++, " : c.bits > 0 ? "qgz, " : "qwz, ", c.nodes,
                            " nodes of ", c.per_node, ", block ", c.block, ", bits ", c.bits));
  PlanInput in = SmallPlan();
  in.precision = DType::kF32;
  in.bytes_per_value = 4;
  in.dp = c.nodes * c.per_node;
  in.zero = 3;
  in.zero_quantized_weights = c.bits == 0 || c.zeropp;
  in.zero_quantized_gradients = c.bits > 0;
  if (c.bits > 0) in.zero_quant_grad_bits = c.bits;
  in.zero_hpz = c.zeropp;
  in.zero_quant_block = c.block;
  in.gpus_per_node = c.per_node;
  ASSERT_TRUE(CheckZeroShard(in).ok() && CheckQuantization(in).ok());
  const train::RunResult run = RunPlan(in);
  const comm::LinkBytes most = Busiest(run, in);
  const std::string name = c.zeropp ? "zero++ (hpz + qwz + qgz)" : c.bits > 0 ? "zero-3 + qgz" : "zero-3 + qwz";
  int compared = 0;
  for (const PlanRow& row : Plan(in)) {
    if (row.strategy != name) continue;
    EXPECT_EQ(double(most.total()), row.exact_bytes_per_gpu);
    EXPECT_EQ(double(most.inter), row.inter_bytes_per_gpu);
    ++compared;
  }
  EXPECT_EQ(compared, 1);
}

// Each a test of its own: every case is a tally_train run, slow under ThreadSanitizer.
TEST(PlanQuantized, QwzRowIsTheMeasuredBytesInAllAndAcrossNodes) {
  for (int64_t block : {int64_t{4}, int64_t{256}}) {
    for (auto [nodes, per_node] : {std::pair{1, 3}, {2, 2}, {2, 3}}) {
      ExpectQuantizedRowMeasured({.nodes = nodes, .per_node = per_node, .block = block});
    }
  }
}

// In one hop on one node, in two across nodes; at 8 and at 4 bits.
TEST(PlanQuantized, QgzRowIsTheMeasuredBytesInAllAndAcrossNodes) {
  for (const QuantizedCase& c : {QuantizedCase{.nodes = 1, .per_node = 3, .bits = 8},
                                 QuantizedCase{.nodes = 2, .per_node = 3, .bits = 8, .block = 256},
                                 QuantizedCase{.nodes = 3, .per_node = 2, .bits = 8},
                                 QuantizedCase{.nodes = 2, .per_node = 2, .bits = 4},
                                 QuantizedCase{.nodes = 3, .per_node = 2, .bits = 4, .block = 256}}) {
    ExpectQuantizedRowMeasured(c);
  }
}

TEST(PlanQuantized, ZeroPlusPlusRowIsTheMeasuredBytesInAllAndAcrossNodes) {
  ExpectQuantizedRowMeasured({.nodes = 2, .per_node = 2, .bits = 8, .block = 16, .zeropp = true});
  ExpectQuantizedRowMeasured({.nodes = 3, .per_node = 2, .bits = 4, .block = 16, .zeropp = true});
}

TEST(PlanQuantized, BadValuesAreClearErrors) {
  PlanInput in = SmallPlan();
  in.zero_quant_block = 0;
  EXPECT_TRUE(absl::StrContains(CheckQuantization(in).message(),
                                "--zero_quant_block must be at least 1 value a block, got 0"));
  in = SmallPlan();
  in.zero_quant_grad_bits = 2;
  EXPECT_TRUE(absl::StrContains(CheckQuantization(in).message(),
                                "--zero_quant_grad_bits must be 8 or 4, got 2"));
  in = SmallPlan();
  in.zero_quantized_gradients = true;
  in.ep = 2;
  EXPECT_TRUE(absl::StrContains(CheckQuantization(in).message(),
                                "--zero_quantized_gradients with --ep is not supported yet"));
}

TEST(PlanPowerSgd, RowIsTheMeasuredCompressedStep) {
  for (int r : {1, 4}) {
    PlanInput in = SmallPlan();
    in.precision = DType::kF32;
    in.bytes_per_value = 4;
    in.dp = 4;
    in.gpus_per_node = 2;
    in.grad_compression = parallel::GradCompression::kPowerSgd;
    in.powersgd_rank = r;
    ASSERT_TRUE(CheckGradCompression(in).ok()) << CheckGradCompression(in);
    const train::RunResult run = RunPlan(in);  // warm-up 0: the step is compressed
    const comm::LinkBytes most = BusiestSent(run.traffic, *PlanAsTrainOptions(in).PlacedNodes(),
                                             PlanLedgerRows(absl::StrCat("dp powersgd (r=", r, ")"), 0));
    int compared = 0;
    for (const PlanRow& row : Plan(in)) {
      if (row.strategy != absl::StrCat("dp powersgd (r=", r, ")")) continue;
      EXPECT_EQ(double(most.total()), row.exact_bytes_per_gpu) << r;
      EXPECT_EQ(double(most.inter), row.inter_bytes_per_gpu) << r;
      ++compared;
    }
    EXPECT_EQ(compared, 1) << r;
  }
  PlanInput in = SmallPlan();
  in.dp = 2;
  in.grad_compression = parallel::GradCompression::kPowerSgd;
  in.powersgd_rank = 0;
  EXPECT_TRUE(absl::StrContains(CheckGradCompression(in).message(), "needs --powersgd_rank >= 1"));
  in.powersgd_rank = 64;
  EXPECT_TRUE(absl::StrContains(CheckGradCompression(in).message(), "compresses no tensor"));
  in.powersgd_rank = 1;
  in.zero = 1;
  EXPECT_TRUE(absl::StrContains(CheckGradCompression(in).message(), "it needs --zero=0"));
}

TEST(PlanOneBitAdam, RowIsTheMeasuredCompressedStep) {
  for (comm::Algorithm algorithm : {comm::Algorithm::kRing, comm::Algorithm::kHierarchical}) {
    PlanInput in = SmallPlan();
    in.precision = DType::kF32;
    in.bytes_per_value = 4;
    in.dp = 4;
    in.gpus_per_node = 2;
    in.allreduce = algorithm;
    in.grad_compression = parallel::GradCompression::kOneBitAdam;
    ASSERT_TRUE(CheckGradCompression(in).ok()) << CheckGradCompression(in);
    train::TrainOptions o = PlanAsTrainOptions(in);
    o.training.steps = 2;  // the warm-up's step, then the compressed one
    o.parallel.onebit_warmup_steps = 1;
    o.data.eval_every = 0;
    o.sampling.sample_bytes = 0;
    o.training.threads = 1;
    ASSERT_TRUE(o.Validate().ok()) << o.Validate();
    const train::RunResult run = train::RunRanks(o);
    const comm::LinkBytes most =
        BusiestSent(run.traffic, *o.PlacedNodes(), PlanLedgerRows("dp 1-bit adam", 0));
    ASSERT_GT(most.total(), 0);
    int compared = 0;
    for (const PlanRow& row : Plan(in)) {
      if (row.strategy != "dp 1-bit adam") continue;
      EXPECT_EQ(double(most.total()), row.exact_bytes_per_gpu) << comm::Name(algorithm);
      EXPECT_EQ(double(most.inter), row.inter_bytes_per_gpu) << comm::Name(algorithm);
      ++compared;
    }
    EXPECT_EQ(compared, 1);
  }
  PlanInput in = SmallPlan();
  in.dp = 2;
  in.grad_compression = parallel::GradCompression::kOneBitAdam;
  in.zero = 2;
  EXPECT_EQ(CheckGradCompression(in).message(),
            "[flags] --grad_compression=onebit_adam compresses data parallelism's all-reduce: it "
            "needs --zero=0");
  in.zero = 0;
  in.ep = 2;
  EXPECT_TRUE(absl::StrContains(CheckGradCompression(in).message(), "with --ep is not supported"));
}

TEST(PlanHsdp, BadShapesAreOneLineEach) {
  PlanInput in = SmallPlan();
  in.dp = 4;
  in.zero = 3;
  in.zero_shard = parallel::ZeroShard::kNode;
  EXPECT_TRUE(absl::StrContains(CheckZeroShard(in).message(), "needs --gpus_per_node"));
  in.gpus_per_node = 3;  // 3 of the dp group's 4 GPUs on node 0, 1 on node 1
  EXPECT_TRUE(absl::StrContains(CheckZeroShard(in).message(), "has 3 on node 0 but 1 on node 1"))
      << CheckZeroShard(in);
  in.gpus_per_node = 2;
  in.ep = 2;
  EXPECT_TRUE(absl::StrContains(CheckZeroShard(in).message(), "with --ep is not supported"));
}

}  // namespace
}  // namespace tally::plan
