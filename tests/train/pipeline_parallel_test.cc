// Pipeline parallelism reproduces the single-rank run with the same micro-batches, for
// every schedule, micro-batch count and recompute setting; each boundary carries exactly
// b·s·h·4 bytes a step each way; 1f1b and recompute hold fewer activations than gpipe.
// The interleaved schedule does the same with v chunks a stage, v·N−1 boundaries.
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "core/runtime/comm/ledger/exact_traffic.h"
#include "tests/sweep.h"
#include "tests/train/run_ranks.h"

namespace tally::train {
namespace {

// 4 layers, so that pp = 4 puts one on each stage; 8 sequences a step.
TrainOptions Layers4(int pp, int micro_batches) {
  TrainOptions o = ShortRun();
  o.training.optimizer = OptimizerKind::kSgd;  // parameters compared: see tensor_parallel_test.cc
  o.model.n_layer = 4;
  o.model.n_head = 2;
  o.model.n_embd = 16;
  o.model.seq_len = 16;
  o.training.global_batch_size = 8;
  o.training.micro_batch_size = 8 / micro_batches;
  o.parallel.pp = pp;
  return o;
}

// The single-rank run with m micro-batches, once per m.
const RunResult& Serial(int m) {
  static std::map<int, RunResult>* runs = new std::map<int, RunResult>();
  auto it = runs->find(m);
  if (it == runs->end()) it = runs->emplace(m, RunRanks(Layers4(1, m))).first;
  return it->second;
}

// Grids of pp stages, m micro-batches, a schedule, and recompute or not.
class PipelineTest : public ::testing::TestWithParam<Grid> {};

TEST_P(PipelineTest, MatchesTheSingleRankRunWithExactBoundaryBytes) {
  const Grid& g = GetParam();
  const int pp = g.pp, m = g.micro_batches;
  const TrainOptions o = g.On(Layers4(1, m));  // pp = 1 with recompute: layer by layer
  RunResult run = RunRanks(o);
  if (kCompareWithSerial) ExpectSameRun(run, Serial(m));
  // Each boundary: the activations of every micro-batch forward, their gradients back:
  // b·s·h·4 bytes a step each way, whatever m is.
  const int64_t bsh_bytes =
      int64_t(o.training.global_batch_size) * o.model.seq_len * o.model.n_embd * 4;
  for (int s = 0; s + 1 < pp; ++s) {
    auto sent = [&](int rank, const std::string& label) {
      return run.traffic[rank].Sum([&](const comm::LedgerKey& k) {
        return k.group == "pp" && k.label == label;
      }).bytes_sent;
    };
    EXPECT_EQ(sent(s, parallel::BoundaryScope(s, s + 1)), o.training.steps * bsh_bytes) << s;
    EXPECT_EQ(sent(s + 1, parallel::BoundaryScope(s + 1, s)), o.training.steps * bsh_bytes) << s;
  }
  if (pp > 1) {
    // The tied embedding's gradient, summed between the first and the last stage.
    const int64_t wte = int64_t(o.model.vocab_size) * o.model.n_embd;
    const int64_t tied = run.traffic[0].Sum([](const comm::LedgerKey& k) {
      return k.group == "embedding" && k.label == "tied_embedding";
    }).bytes_sent;
    EXPECT_EQ(tied, o.training.steps * comm::ExactTraffic(comm::Primitive::kAllReduce,
                                                          comm::Algorithm::kRing, 2, 0, -1, wte, 4)
                                           .sent);
  }
}

// Every pp of 1, 2, 4 × m of 1, 2, 4, 8 × gpipe, 1f1b × recompute or not.
std::vector<Grid> PipelineGrids() {
  std::vector<Grid> grids;
  for (int pp : {1, 2, 4}) {
    for (int m : {1, 2, 4, 8}) {
      for (parallel::PipelineSchedule schedule :
           {parallel::PipelineSchedule::kGPipe, parallel::PipelineSchedule::k1F1B}) {
        for (bool recompute : {false, true}) {
          grids.push_back(Grid{.pp = pp, .schedule = schedule, .recompute = recompute, .micro_batches = m});
        }
      }
    }
  }
  return grids;
}

INSTANTIATE_TEST_SUITE_P(All, PipelineTest, ::testing::ValuesIn(Sweep(PipelineGrids())), GridName);

// 8 layers, so that pp = 4 with v = 2 puts one on each chunk.
TrainOptions Layers8(int micro_batches) {
  TrainOptions o = Layers4(1, micro_batches);
  o.model.n_layer = 8;
  return o;
}

const RunResult& Serial8(int m) {
  static std::map<int, RunResult>* runs = new std::map<int, RunResult>();
  auto it = runs->find(m);
  if (it == runs->end()) it = runs->emplace(m, RunRanks(Layers8(m))).first;
  return it->second;
}

class InterleavedTest : public ::testing::TestWithParam<Grid> {};

// Equal to the serial run; each virtual stage's boundary carries b·s·h·4 bytes a step each
// way, every row the formula's, so a stage sends v times what it sends under 1f1b.
TEST_P(InterleavedTest, MatchesTheSingleRankRunWithVTimesTheBoundaryBytes) {
  const Grid& g = GetParam();
  const int pp = g.pp, v = g.virtual_stages, m = g.micro_batches;
  const TrainOptions o = g.On(Layers8(m));
  ASSERT_TRUE(o.Validate().ok()) << o.Validate();
  RunResult run = RunRanks(o);
  if (kCompareWithSerial) ExpectSameRun(run, Serial8(m));
  ExpectReportRowsExact(o, run);
  const int64_t bsh_bytes =
      int64_t(o.training.global_batch_size) * o.model.seq_len * o.model.n_embd * 4;
  for (int vs = 0; vs + 1 < pp * v; ++vs) {
    auto sent = [&](int rank, const std::string& label) {
      return run.traffic[rank].Sum([&](const comm::LedgerKey& k) {
        return k.group == "pp" && k.label == label;
      }).bytes_sent;
    };
    // Virtual stage vs is on pipeline rank vs mod pp.
    EXPECT_EQ(sent(vs % pp, parallel::BoundaryScope(vs, vs + 1)), o.training.steps * bsh_bytes)
        << vs;
    EXPECT_EQ(sent((vs + 1) % pp, parallel::BoundaryScope(vs + 1, vs)),
              o.training.steps * bsh_bytes)
        << vs;
  }
  for (int r = 0; r < pp; ++r) {
    const int64_t boundaries = run.traffic[r].Sum([](const comm::LedgerKey& k) {
      return parallel::IsPipelineBoundary(k);
    }).bytes_sent;
    // v chunks a stage, each sending forward but the model's last and backward but its first.
    const int sends = 2 * v - (r == 0 ? 1 : 0) - (r == pp - 1 ? 1 : 0);
    EXPECT_EQ(boundaries, sends * o.training.steps * bsh_bytes) << "rank " << r;
  }
}

// pp 2 and 4 with v = 2, m of pp and 2·pp, with and without recompute; three chunks a
// stage; uneven chunks.
std::vector<Grid> InterleavedGrids() {
  std::vector<Grid> grids;
  for (int pp : {2, 4}) {
    for (int m : {pp, 2 * pp}) {
      for (bool recompute : {false, true}) {
        grids.push_back(Grid{.pp = pp, .schedule = parallel::PipelineSchedule::kInterleaved,
                             .virtual_stages = 2, .recompute = recompute, .micro_batches = m});
      }
    }
  }
  // Three chunks a stage, uneven chunks.
  grids.push_back(Grid{.pp = 2, .schedule = parallel::PipelineSchedule::kInterleaved,
                       .virtual_stages = 3, .micro_batches = 4});
  grids.push_back(Grid{.pp = 2, .schedule = parallel::PipelineSchedule::kInterleaved,
                       .virtual_stages = 2, .pp_layers = {3, 1, 2, 2}, .micro_batches = 2});
  return grids;
}

INSTANTIATE_TEST_SUITE_P(All, InterleavedTest, ::testing::ValuesIn(Sweep(InterleavedGrids())),
                         GridName);

// With more micro-batches than stages, 1f1b keeps at most pp of them in flight on stage
// 0 where gpipe keeps all m; recompute keeps only inputs.
TEST(PipelineMemory, OneFOneBAndRecomputeHoldFewerActivations) {
  auto stage0 = [](const std::string& schedule, bool recompute) {
    TrainOptions o = Layers4(2, 8);
    o.training.steps = 1;
    o.parallel.schedule = parallel::ParsePipelineSchedule(schedule).value();
    o.parallel.recompute = recompute;
    return RunRanks(o).memory[0].peak(MemoryCategory::kActivations);
  };
  const int64_t gpipe = stage0("gpipe", false), one_f_one_b = stage0("1f1b", false);
  EXPECT_LT(one_f_one_b, gpipe);
  EXPECT_LT(stage0("gpipe", true), gpipe);
  EXPECT_LT(stage0("1f1b", true), one_f_one_b);
}

// Megatron's scatter/gather (--pp_scatter_gather) moves the same values: every loss and
// parameter bit for bit the run without it, in fp32 and bf16, with early receives or
// not; each tp rank sends 1/tp of each boundary, and the receiving tp group all-gathers
// the rest under the boundary's scope, every row at its formula.
TEST(PipelineScatterGather, SameBitsOneTpthOfTheBoundaryBytes) {
  struct Case {
    DType precision;
    bool overlap;
  };
  for (const auto [precision, overlap] : Sweep<Case>({{DType::kF32, false},
                                                      {DType::kF32, true},
                                                      {DType::kBF16, false},
                                                      {DType::kBF16, true}})) {
    TrainOptions o = Layers4(2, 4);
    o.parallel.tp = 2;
    o.precision.dtype = precision;
    o.parallel.overlap = overlap;
    const RunResult whole = RunRanks(o);
    o.parallel.pp_scatter_gather = true;
    const RunResult scattered = RunRanks(o);
    const std::string what = absl::StrCat(PrecisionName(precision), overlap ? " overlap" : "");
    EXPECT_EQ(scattered.losses, whole.losses) << what;
    EXPECT_EQ(scattered.params, whole.params) << what;
    ExpectReportRowsExact(o, scattered);
    for (int rank = 0; rank < o.world(); ++rank) {
      auto bytes = [&](const RunResult& run, const std::string& group) {
        return run.traffic[size_t(rank)]
            .Sum([&](const comm::LedgerKey& k) {
              return k.group == group && parallel::ParseBoundaryScope(k.label).has_value();
            })
            .bytes_sent;
      };
      EXPECT_EQ(bytes(scattered, "pp") * o.parallel.tp, bytes(whole, "pp"))
          << what << " rank " << rank;
      // Each rank gathers (tp-1)/tp of what it receives: the chunk it did not.
      EXPECT_EQ(bytes(scattered, "tp"), bytes(scattered, "pp")) << what << " rank " << rank;
      EXPECT_EQ(bytes(whole, "tp"), 0) << what;
    }
  }
  // Without a tp group to gather over, or under sequence parallelism, it does nothing
  // and says so.
  TrainOptions one = Layers4(2, 4);
  one.parallel.pp_scatter_gather = true;
  EXPECT_FALSE(one.parallel.ScatterGather());
  EXPECT_TRUE(absl::StrContains(absl::StrJoin(one.Warnings(), "\n"), "--pp_scatter_gather has no effect"));
  one.parallel.tp = 2;
  one.parallel.sequence_parallel = true;
  EXPECT_FALSE(one.parallel.ScatterGather());
}

TEST(PipelineOptions, BadValuesAreClearErrors) {
  TrainOptions o = Layers4(5, 1);
  EXPECT_TRUE(absl::StrContains(o.Validate().message(), "--pp=5 is more stages than the 4 layers"));
  o = Layers4(2, 1);
  o.parallel.pp_layers = {3, 2};
  EXPECT_TRUE(absl::StrContains(o.Validate().message(), "--pp_layers sums to 5 layers"));
  o = Layers4(2, 1);
  o.training.micro_batch_size = 3;
  EXPECT_TRUE(absl::StrContains(o.Validate().message(), "must be a multiple of"));
  EXPECT_TRUE(absl::StrContains(parallel::ParsePipelineSchedule("zb").status().message(),
                                "--schedule must be gpipe, 1f1b or interleaved"));
}

}  // namespace
}  // namespace tally::train
