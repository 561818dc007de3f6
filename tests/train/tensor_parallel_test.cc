// Tensor parallelism reproduces the single-rank run — alone, under data parallelism and
// every ZeRO stage — moves exactly the bytes of the Megatron formula per layer, and its
// checkpoints resume under any other layout.
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "core/model/parameters.h"
#include "core/parallel/data_parallel.h"
#include "core/parallel/zero/sharding.h"
#include "lab/report/report.h"
#include "core/runtime/comm/ledger/exact_traffic.h"
#include "tests/sweep.h"
#include "tests/train/run_ranks.h"

namespace tally::train {
namespace {

// 12 heads and 24 positions: tp 2, 3 and 4 all take whole heads, and whole parts of the
// sequence; with tp = 3 the vocabulary (256) is padded to 258. Two micro-batches per
// rank: accumulation through the split layers.
//
// SGD: the parameters are compared after 5 steps, and SGD's update is linear in the
// gradient. AdamW's first steps divide each gradient by its own magnitude, so float
// rounding in an element whose gradient is near zero (4 orders below the others, as
// c_attn has one here) shows as a parameter difference of 1e-3 relative; AdamW runs are
// compared by their losses.
TrainOptions Small(int dp, int tp) {
  TrainOptions o = ShortRun();
  o.training.optimizer = OptimizerKind::kSgd;
  o.model.n_layer = 2;
  o.model.n_head = 12;
  o.model.n_embd = 24;
  o.model.seq_len = 24;  // divisible by every tp: sequence parallelism splits it
  o.training.global_batch_size = 4 * dp;
  o.training.micro_batch_size = 2;
  o.parallel.dp = dp;
  o.parallel.tp = tp;
  return o;
}

// Bytes one rank of `tp` sends in the tensor-parallel collectives of one step, by phase.
// Per micro-batch: forward, 2 per layer and the embedding (b·s·h floats each) plus the
// cross-entropy's 3 (b·s floats); backward, 2 per layer and the LM head. Each of the
// b·s·h ones an all-reduce, or under sequence parallelism an all-gather and a
// reduce-scatter — also for the embedding's backward and the LM head's forward — plus
// once a step the sum of the per-token replicas' gradients.
int64_t TensorParallelBytesPerStep(const TrainOptions& o, int tp_rank, comm::Phase phase) {
  const int64_t rows = int64_t(o.training.micro_batch_size) * o.model.seq_len,
                m = o.accumulation_steps();
  auto sent = [&](comm::Primitive p, int64_t count) {
    return comm::ExactTraffic(p, comm::Algorithm::kRing, o.parallel.tp, tp_rank, -1, count, 4).sent;
  };
  const int64_t bsh = rows * o.model.n_embd, layers = o.model.n_layer;
  const int64_t cross_entropy = 3 * sent(comm::Primitive::kAllReduce, rows);
  if (!o.parallel.sequence_parallel) {
    const int64_t activations = sent(comm::Primitive::kAllReduce, bsh);
    if (phase == comm::Phase::kForward) return m * ((2 * layers + 1) * activations + cross_entropy);
    if (phase == comm::Phase::kBackward) return m * (2 * layers + 1) * activations;
    return 0;
  }
  const int64_t pair = sent(comm::Primitive::kAllGather, bsh) + sent(comm::Primitive::kReduceScatter, bsh);
  // LayerNorms (4 per layer and ln_f's 2, of n_embd each) and the position table.
  const int64_t per_token = (4 * layers + 2) * o.model.n_embd + int64_t(o.model.seq_len) * o.model.n_embd;
  if (phase == comm::Phase::kForward) return m * ((2 * layers + 1) * pair + cross_entropy);
  if (phase == comm::Phase::kBackward) {
    return m * (2 * layers + 1) * pair + sent(comm::Primitive::kAllReduce, per_token);
  }
  return 0;
}

const RunResult& Serial() {
  static const RunResult* serial = new RunResult(RunRanks(Small(1, 1)));
  return *serial;
}

TrainOptions WithAdamW(TrainOptions o) {
  o.training.optimizer = OptimizerKind::kAdamW;
  o.training.lr = 1e-3f;
  return o;
}

const RunResult& SerialAdamW() {
  static const RunResult* serial = new RunResult(RunRanks(WithAdamW(Small(1, 1))));
  return *serial;
}

// (tp, sequence parallelism)
class TensorParallelTest : public ::testing::TestWithParam<std::tuple<int, bool>> {};

TEST_P(TensorParallelTest, MatchesTheSingleRankRunWithTheMegatronBytes) {
  const auto [tp, sequence_parallel] = GetParam();
  TrainOptions o = Small(1, tp);
  o.parallel.sequence_parallel = sequence_parallel;
  RunResult run = RunRanks(o);
  if (kCompareWithSerial) {
    ExpectSameRun(run, Serial());
    ExpectSameLosses(RunRanks(WithAdamW(o)), SerialAdamW());
  }
  for (int r = 0; r < tp; ++r) {
    for (comm::Phase phase : {comm::Phase::kForward, comm::Phase::kBackward}) {
      int64_t sent = run.traffic[r].Sum([&](const comm::LedgerKey& k) {
        return k.group == "tp" && k.phase == phase;
      }).bytes_sent;
      EXPECT_EQ(sent, o.training.steps * TensorParallelBytesPerStep(o, r, phase))
          << comm::Name(phase) << " rank " << r;
    }
    // Each layer's scope: 2 all-reduces of b·s·h per micro-batch, one each way (or their
    // all-gathers and reduce-scatters): 8(N-1)/N·b·s·h·4 bytes per layer per step,
    // exactly, when N divides b·s·h.
    const int64_t bsh = int64_t(o.training.micro_batch_size) * o.model.seq_len * o.model.n_embd;
    int64_t layer1 = run.traffic[r].Sum([](const comm::LedgerKey& k) {
      return k.group == "tp" && (k.label == "layer1.attn" || k.label == "layer1.mlp") &&
             (k.phase == comm::Phase::kForward || k.phase == comm::Phase::kBackward);
    }).bytes_sent;
    if (bsh % tp == 0) {
      EXPECT_EQ(layer1, o.training.steps * o.accumulation_steps() * 8 * (tp - 1) * bsh * 4 / tp)
          << r;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, TensorParallelTest,
                         ::testing::Combine(::testing::ValuesIn(Sweep<int>({1, 2, 3, 4})),
                                            ::testing::Bool()),
                         [](const ::testing::TestParamInfo<std::tuple<int, bool>>& p) {
                           return absl::StrCat("tp", std::get<0>(p.param),
                                               std::get<1>(p.param) ? "_sp" : "");
                         });

// Sequence parallelism: the same bytes as the all-reduces in the layers (an all-reduce
// is a reduce-scatter and an all-gather), and less activation memory.
TEST(SequenceParallel, SameLayerBytesLessActivationMemory) {
  TrainOptions o = Small(1, 4);
  o.training.steps = 2;
  RunResult plain = RunRanks(o);
  o.parallel.sequence_parallel = true;
  RunResult split = RunRanks(o);
  ExpectSameRun(split, plain);
  for (int r = 0; r < 4; ++r) {
    auto layers = [&](const RunResult& run) {
      return run.traffic[r].Sum([](const comm::LedgerKey& k) {
        return k.group == "tp" && k.label.rfind("layer", 0) == 0;
      }).bytes_sent;
    };
    EXPECT_EQ(layers(split), layers(plain)) << r;
    EXPECT_LT(split.memory[r].peak(MemoryCategory::kActivations),
              plain.memory[r].peak(MemoryCategory::kActivations)) << r;
  }
}

class TensorAndDataParallelTest : public ::testing::TestWithParam<int> {};

// dp = 2 × tp = 2: each dp group reduces (or shards) its tensor-parallel part of the
// model, and the run is still the single-rank run.
TEST_P(TensorAndDataParallelTest, MatchesTheSingleRankRunUnderEveryZeroStage) {
  const int zero = GetParam();
  TrainOptions o = Small(2, 2);
  o.parallel.zero = zero;
  o.training.global_batch_size = 4;  // the serial run's global batch, split over the 2 dp ranks
  o.parallel.bucket_mb = 4000.0 / (1 << 20);  // several buckets
  RunResult run = RunRanks(o);
  if (kCompareWithSerial) ExpectSameRun(run, Serial());
  for (int rank = 0; rank < o.world(); ++rank) {
    const int dp_rank = o.topology().Of(rank).dp, tp_rank = o.topology().Of(rank).tp;
    const model::ParameterLayout part =
        model::ParameterLayout::ForGPT(o.model, o.parallel.tp, tp_rank);
    auto sent = [&](comm::Primitive p) {
      return run.traffic[rank].Sum([&](const comm::LedgerKey& k) {
        return k.group == "dp" && k.primitive == p && k.label.empty();
      }).bytes_sent;
    };
    if (zero == 0) {
      EXPECT_EQ(sent(comm::Primitive::kAllReduce),
                o.training.steps *
                    parallel::GradientSyncBytesPerStep(part.total(), o.parallel.dp, dp_rank,
                                                       int64_t(o.parallel.bucket_mb * (1 << 20)),
                                                       comm::Algorithm::kRing))
          << rank;
    } else {
      int64_t expected = 0;
      for (comm::Phase phase : {comm::Phase::kForward, comm::Phase::kBackward, comm::Phase::kOptimizer}) {
        for (comm::Primitive p : {comm::Primitive::kReduceScatter, comm::Primitive::kAllGather}) {
          expected +=
              o.training.steps *
              parallel::ZeroBytesPerStep(parallel::UnitRanges(parallel::ZeroUnits(part, zero), false),
                                         zero, o.parallel.dp, dp_rank, o.accumulation_steps(),
                                         comm::Algorithm::kRing, p, phase);
        }
      }
      EXPECT_EQ(sent(comm::Primitive::kReduceScatter) + sent(comm::Primitive::kAllGather), expected) << rank;
    }
    report::MemoryFormula f = report::PredictedMemory(o, rank);
    EXPECT_EQ(run.memory[rank].peak(MemoryCategory::kParams), f.params) << rank;
    EXPECT_EQ(run.memory[rank].peak(MemoryCategory::kGrads), f.grads) << rank;
    EXPECT_EQ(run.memory[rank].peak(MemoryCategory::kOptimizer), f.optimizer) << rank;
  }
}

INSTANTIATE_TEST_SUITE_P(Zero, TensorAndDataParallelTest,
                         ::testing::ValuesIn(Sweep<int>({0, 1, 2, 3})),
                         [](const ::testing::TestParamInfo<int>& p) {
                           return absl::StrCat("zero", p.param);
                         });

// Checkpoints hold the whole model: saved by tp = 2 ranks (under dp = 2, ZeRO-3), resumed
// on tp = 3, and on one rank.
TEST(TensorParallelCheckpoints, ResumeUnderAnotherSplit) {
  TrainOptions straight = Small(1, 1);
  straight.training.steps = 6;
  RunResult reference = RunRanks(straight);
  TrainOptions first = Small(2, 2);
  first.training.global_batch_size = 4;
  first.parallel.zero = 3;
  first.training.steps = 6;
  const std::string path = ::testing::TempDir() + "/tp2.safetensors";
  TrainAndSave(first, 3, path);
  for (int tp : {3, 1}) {
    TrainOptions second = Small(1, tp);
    second.training.steps = 6;
    second.checkpoint.load = path;
    std::vector<float> losses = Resume(second);
    ASSERT_EQ(losses.size(), 3u) << tp;
    for (int k = 0; k < 3; ++k) {
      EXPECT_NEAR(losses[k], reference.losses[3 + k], 1e-5 * reference.losses[3 + k]) << "tp " << tp;
    }
  }
}

TEST(TensorParallelOptions, BadValuesAreClearErrors) {
  TrainOptions o = Small(1, 5);
  EXPECT_TRUE(absl::StrContains(o.Validate().message(), "--n_head=12 must be divisible by --tp=5"))
      << o.Validate();
  o = Small(1, 0);
  EXPECT_TRUE(absl::StrContains(o.Validate().message(), "--tp must be >= 1")) << o.Validate();
}

}  // namespace
}  // namespace tally::train
