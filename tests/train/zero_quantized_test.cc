// ZeRO++'s quantised communication in training.
// qwZ (--zero_quantized_weights): ZeRO-3's gathers over the dp group carry one byte a value
// and a scale a block (every report row exact, the scales' rows among them), the forward's
// bytes are the plain gather's over the parameters' size, the measured error of step 1 is
// the one a reference quantiser here computes from the initial weights, and training stays
// beside the unquantised run.
// qgZ (--zero_quantized_gradients): ZeRO-3's reduce-scatters become quantised all-to-alls,
// inside the node and then across it when the dp group spans nodes (every report row
// exact), and training stays beside the unquantised run. (The all-to-alls themselves are
// held to their algorithm unrolled in tests/parallel/quantize_test.cc.)
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "core/parallel/zero/sharding.h"
#include "core/runtime/comm/algorithms/partition.h"
#include "core/runtime/comm/ledger/names.h"
#include "extensions/zero_pp/names.h"
#include "tests/sweep.h"
#include "tests/train/run_ranks.h"

namespace tally::train {
namespace {

struct QwzGrid {
  int dp = 2;
  int per_node = 0;  // --gpus_per_node (0: one node)
  int tp = 1, pp = 1;
  bool bf16 = false, overlap = false, hpz = false, hsdp = false;
  bool weights = true, grads = false;  // qwZ, qgZ
  int grad_bits = 8;                   // qgZ's
  int64_t block = 16;
  comm::Algorithm allreduce = comm::Algorithm::kRing;

  TrainOptions On(TrainOptions o) const {
    o.parallel.dp = dp;
    o.parallel.tp = tp;
    o.parallel.pp = pp;
    o.parallel.zero = 3;
    o.parallel.zero_quantized_weights = weights;
    o.parallel.zero_quantized_gradients = grads;
    o.parallel.zero_quant_grad_bits = grad_bits;
    o.parallel.zero_quant_block = block;
    o.parallel.zero_hpz = hpz;
    if (hsdp) o.parallel.zero_shard = parallel::ZeroShard::kNode;
    o.parallel.overlap = overlap;
    o.parallel.allreduce = allreduce;
    if (pp > 1) o.model.n_layer = pp;
    if (bf16) o.precision.dtype = DType::kBF16;
    o.placement.gpus_per_node = per_node * tp;
    return o;
  }
};

std::string Name(const ::testing::TestParamInfo<QwzGrid>& info) {
  const QwzGrid& g = info.param;
  return absl::StrCat("dp", g.dp, g.per_node > 0 ? absl::StrCat("_node", g.per_node) : "",
                      g.tp > 1 ? "_tp2" : "", g.pp > 1 ? "_pp2" : "", g.bf16 ? "_bf16" : "",
                      g.overlap ? "_overlap" : "", g.hpz ? "_hpz" : "", g.hsdp ? "_hsdp" : "",
                      g.weights ? "" : "_noqwz", g.grads ? "_qgz" : "",
                      g.grad_bits == 4 ? "_int4" : "",
                      "_block", g.block,
                      g.allreduce == comm::Algorithm::kHierarchical ? "_hier" : "");
}

// Bytes of `run`'s rank `r` in the dp groups' all-gathers of `phase` labelled `label`.
int64_t Gathered(const RunResult& run, int r, comm::Phase phase, const std::string& label) {
  return run.traffic[size_t(r)].Sum([&](const comm::LedgerKey& k) {
    return (k.group == comm::group::kDp || k.group == comm::group::kDpShard) &&
           k.primitive == comm::Primitive::kAllGather && k.phase == phase && k.label == label;
  }).bytes_sent;
}

// The grid's run and the same without quantisation. Every report row and model-state
// formula of the run exact, its error within the quantiser's bound, its loss beside the
// plain run's.
struct AgainstPlain {
  TrainOptions options;
  RunResult run, plain;
};
AgainstPlain RunAgainstPlain(const QwzGrid& g) {
  AgainstPlain out;
  out.options = g.On(TinyDataParallel(1));
  const TrainOptions& o = out.options;
  TrainOptions plain_options = o;
  plain_options.parallel.zero_quantized_weights = false;
  plain_options.parallel.zero_quantized_gradients = false;
  out.run = RunRanks(o);
  out.plain = RunRanks(plain_options);
  ExpectReportRowsExact(o, out.run);
  ExpectMemoryFormulaExact(o, out.run);
  // Each value's error is at most half its block's scale, max|x|/qmax, so a block's
  // relative error is at most sqrt(block)/(2·qmax), and so is the whole's (every
  // quantisation a rank makes, weights or gradients, summed; qmax 127, or 7 for int4).
  const int qmax = g.grads && g.grad_bits == 4 ? 7 : 127;
  EXPECT_EQ(out.run.compression_errors.size(), size_t(o.training.steps));
  for (double e : out.run.compression_errors) {
    EXPECT_GT(e, 0);
    EXPECT_LE(e, std::sqrt(double(g.block)) / (2 * qmax));
  }
  // The loss within 1% of the unquantised run's over these few steps (what the model
  // reads moves by the error above, about 1e-3 here).
  EXPECT_EQ(out.run.losses.size(), out.plain.losses.size());
  for (size_t k = 0; k < std::min(out.run.losses.size(), out.plain.losses.size()); ++k) {
    EXPECT_NEAR(out.run.losses[k], out.plain.losses[k], 0.01 * out.plain.losses[k]) << "step " << k;
  }
  return out;
}

class QwzTest : public ::testing::TestWithParam<QwzGrid> {};

TEST_P(QwzTest, QuantisedGathersExactAndTrainingBesideThePlainRun) {
  const QwzGrid& g = GetParam();
  const auto [o, run, plain] = RunAgainstPlain(g);

  const int64_t param_bytes = g.bf16 ? 2 : 4;
  for (int r = 0; r < o.world(); ++r) {
    // Nothing gathered as it is over the dp group; the forward's values at one byte each.
    EXPECT_EQ(Gathered(run, r, comm::Phase::kForward, ""), 0) << "rank " << r;
    EXPECT_EQ(param_bytes * Gathered(run, r, comm::Phase::kForward, extensions::scope::kQwz),
              Gathered(plain, r, comm::Phase::kForward, ""))
        << "rank " << r;
    EXPECT_GT(Gathered(run, r, comm::Phase::kForward, extensions::scope::kQwzScales), 0) << "rank " << r;
    // hpZ's backward gathers the secondary copy inside the node as it is.
    EXPECT_EQ(Gathered(run, r, comm::Phase::kBackward, extensions::scope::kQwz) == 0, g.hpz)
        << "rank " << r;
  }
}

std::vector<QwzGrid> QwzGrids() {
  std::vector<QwzGrid> grids;
  for (int dp : {2, 3, 4}) {
    for (int64_t block : {1, 16, 256}) grids.push_back({.dp = dp, .block = block});
  }
  grids.push_back({.dp = 2, .bf16 = true});
  grids.push_back({.dp = 3, .overlap = true});
  grids.push_back({.dp = 2, .tp = 2});
  grids.push_back({.dp = 2, .pp = 2});
  grids.push_back({.dp = 4, .per_node = 2, .hpz = true});
  grids.push_back({.dp = 4, .per_node = 2, .overlap = true, .hpz = true});
  grids.push_back({.dp = 4, .per_node = 2, .hsdp = true});
  grids.push_back({.dp = 6, .per_node = 3, .allreduce = comm::Algorithm::kHierarchical});
  return grids;
}

INSTANTIATE_TEST_SUITE_P(Grids, QwzTest, ::testing::ValuesIn(Sweep(QwzGrids())), Name);

// Bytes of `run`'s rank `r` in `group` (any, when empty) with `primitive` and `label`.
int64_t Sent(const RunResult& run, int r, const std::string& group, comm::Primitive primitive,
             const std::string& label) {
  return run.traffic[size_t(r)].Sum([&](const comm::LedgerKey& k) {
    return (group.empty() || k.group == group) && k.primitive == primitive && k.label == label;
  }).bytes_sent;
}

class QgzTest : public ::testing::TestWithParam<QwzGrid> {};

TEST_P(QgzTest, QuantisedAllToAllsExactAndTrainingBesideThePlainRun) {
  const QwzGrid& g = GetParam();
  const auto [o, run, plain] = RunAgainstPlain(g);
  // Two hops where the dp group spans nodes (HSDP's shard group is on one).
  const bool two_hops = g.per_node > 0 && g.dp > g.per_node && !g.hsdp;
  using comm::Primitive;
  for (int r = 0; r < o.world(); ++r) {
    SCOPED_TRACE(absl::StrCat("rank ", r));
    for (const char* group : {comm::group::kDp, comm::group::kDpShard}) {
      EXPECT_EQ(Sent(run, r, group, Primitive::kReduceScatter, ""), 0) << group;
    }
    EXPECT_GT(Sent(run, r, "", Primitive::kAllToAll, extensions::scope::kQgz), 0);
    EXPECT_GT(Sent(run, r, "", Primitive::kAllToAll, extensions::scope::kQgzScales), 0);
    EXPECT_EQ(Sent(run, r, comm::group::kDpReplicate, Primitive::kAllToAll, extensions::scope::kQgz) > 0,
              two_hops);
    if (two_hops) {  // across the nodes: the node's sums, each value a byte
      EXPECT_LT(Sent(run, r, comm::group::kDpReplicate, Primitive::kAllToAll, extensions::scope::kQgz),
                Sent(plain, r, comm::group::kDp, Primitive::kReduceScatter, "") / 4);
    }
  }
}

std::vector<QwzGrid> QgzGrids() {
  std::vector<QwzGrid> grids;
  for (auto [dp, block] : {std::pair{2, int64_t{16}}, std::pair{3, int64_t{256}},
                           std::pair{4, int64_t{1}}}) {
    grids.push_back({.dp = dp, .weights = false, .grads = true, .block = block});
  }
  grids.push_back({.dp = 2, .bf16 = true, .weights = false, .grads = true});
  grids.push_back({.dp = 3, .overlap = true, .weights = false, .grads = true});
  grids.push_back({.dp = 2, .tp = 2, .weights = false, .grads = true});
  grids.push_back({.dp = 2, .pp = 2, .weights = false, .grads = true});
  grids.push_back({.dp = 4, .per_node = 2, .weights = false, .grads = true});
  grids.push_back({.dp = 6, .per_node = 2, .weights = false, .grads = true, .block = 8});
  grids.push_back({.dp = 6, .per_node = 3, .weights = false, .grads = true,
                   .allreduce = comm::Algorithm::kHierarchical});
  grids.push_back({.dp = 4, .per_node = 2, .hsdp = true, .weights = false, .grads = true});
  grids.push_back({.dp = 4, .per_node = 4, .weights = false, .grads = true});  // one node
  grids.push_back({.dp = 3, .weights = false, .grads = true, .grad_bits = 4});
  grids.push_back({.dp = 6, .per_node = 3, .bf16 = true, .weights = false, .grads = true,
                   .grad_bits = 4});
  // ZeRO++ whole: hpZ, qwZ and qgZ.
  grids.push_back({.dp = 4, .per_node = 2, .overlap = true, .hpz = true, .grads = true});
  grids.push_back({.dp = 4, .per_node = 2, .hpz = true, .grads = true, .grad_bits = 4});
  return grids;
}

INSTANTIATE_TEST_SUITE_P(Grids, QgzTest, ::testing::ValuesIn(Sweep(QgzGrids())), Name);

// Step 1's measured error is the quantisation of the initial weights, chunk by chunk as
// ZeRO-3 cuts them, written out here from quantize.h's rule.
TEST(Qwz, FirstStepErrorIsTheInitialWeightsQuantised) {
  for (int dp : {2, 3}) {
    const TrainOptions o = QwzGrid{.dp = dp, .block = 8}.On(TinyDataParallel(1));
    TrainOptions initial = o;
    initial.training.steps = 0;
    const std::vector<float> w = RunRanks(initial).params;
    ASSERT_FALSE(w.empty());
    double residual = 0, value = 0;
    for (const parallel::ZeroUnit& unit : parallel::ZeroUnits(o.RankLayout(0), 3)) {
      for (int r = 0; r < dp; ++r) {
        const comm::Chunk c = comm::ChunkOf(unit.range.count, dp, r);
        const float* x = w.data() + unit.range.offset + c.offset;
        for (int64_t begin = 0; begin < c.count; begin += 8) {
          const int64_t end = std::min(c.count, begin + 8);
          float most = 0;
          for (int64_t i = begin; i < end; ++i) most = std::max(most, std::abs(x[i]));
          const float scale = most / 127;
          for (int64_t i = begin; i < end; ++i) {
            const float back = scale > 0 ? std::nearbyint(x[i] / scale) * scale : 0;
            residual += double(back - x[i]) * double(back - x[i]);
            value += double(x[i]) * double(x[i]);
          }
        }
      }
    }
    const RunResult run = RunRanks(o);
    ASSERT_FALSE(run.compression_errors.empty());
    EXPECT_NEAR(run.compression_errors[0], std::sqrt(residual / value), 1e-12) << "dp " << dp;
  }
}

// qwZ and qgZ keep no state of their own: a run saved after 3 steps and resumed goes on
// as the uninterrupted one, bit for bit.
class QuantizedResumeTest : public ::testing::TestWithParam<QwzGrid> {};

TEST_P(QuantizedResumeTest, ResumesBitForBit) {
  TrainOptions o = GetParam().On(TinyDataParallel(1));
  o.training.steps = 6;
  const RunResult straight = RunRanks(o);
  // A file of its own: ctest runs each grid as a process of its own, side by side.
  const std::string path = absl::StrCat(
      ::testing::TempDir(), "/quantized_resume_", Name({GetParam(), 0}), ".safetensors");
  TrainAndSave(o, 3, path);
  TrainOptions resumed = o;
  resumed.checkpoint.load = path;
  const std::vector<float> losses = Resume(resumed);
  ASSERT_EQ(losses.size(), 3u);
  for (size_t k = 0; k < 3; ++k) EXPECT_EQ(losses[k], straight.losses[3 + k]) << k;
}

// A dry run (meta tensors: no values to quantise) books the real run's calls and bytes.
TEST_P(QuantizedResumeTest, DryRunBooksTheRealRunsBytes) {
  const TrainOptions o = GetParam().On(TinyDataParallel(1));
  TrainOptions dry = o;
  dry.dry_run = true;
  const RankLedgers want = RunSteps(o.Resolved());
  const RankLedgers got = RunSteps(dry.Resolved());
  for (size_t r = 0; r < want.traffic.size(); ++r) {
    ASSERT_EQ(got.traffic[r].calls().size(), want.traffic[r].calls().size()) << "rank " << r;
    for (const auto& [key, calls] : want.traffic[r].calls()) {
      const auto it = got.traffic[r].calls().find(key);
      ASSERT_NE(it, got.traffic[r].calls().end()) << key.group << " " << key.label;
      EXPECT_EQ(it->second.payload_bytes, calls.payload_bytes) << key.group << " " << key.label;
      EXPECT_EQ(it->second.calls, calls.calls) << key.group << " " << key.label;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Grids, QuantizedResumeTest,
    ::testing::ValuesIn(Sweep<QwzGrid>(
        {QwzGrid{.dp = 3, .overlap = true},
         QwzGrid{.dp = 4, .per_node = 2, .weights = false, .grads = true},
         QwzGrid{.dp = 4, .per_node = 2, .overlap = true, .hpz = true, .grads = true}})),
    Name);

TEST(Qgz, BadValuesAreClearErrors) {
  auto message = [](const TrainOptions& o) { return std::string(o.Validate().message()); };
  const TrainOptions o = QwzGrid{.dp = 4, .weights = false, .grads = true}.On(TinyDataParallel(1));
  ASSERT_TRUE(o.Validate().ok()) << o.Validate();
  TrainOptions bad = o;
  bad.parallel.zero = 2;
  EXPECT_TRUE(absl::StrContains(message(bad), "--zero_quantized_gradients quantises ZeRO-3's"))
      << message(bad);
  bad = o;
  bad.placement.device = DeviceType::kCUDA;
  EXPECT_TRUE(absl::StrContains(message(bad), "--zero_quantized_gradients with --device=cuda"))
      << message(bad);
  bad = o;
  bad.parallel.ep = 2;
  bad.model.n_experts = 2;
  EXPECT_TRUE(absl::StrContains(message(bad), "--zero_quantized_gradients with --ep=2"))
      << message(bad);
  bad = o;  // dp 4 on nodes of 3: the dp group's nodes hold 3 and 1
  bad.placement.gpus_per_node = 3;
  EXPECT_FALSE(bad.Validate().ok());
  EXPECT_TRUE(absl::StrContains(message(bad), "--zero_quantized_gradients")) << message(bad);
  for (int bits : {0, 2, 16}) {
    bad = o;
    bad.parallel.zero_quant_grad_bits = bits;
    EXPECT_TRUE(absl::StrContains(message(bad), absl::StrCat("--zero_quant_grad_bits must be 8 or 4, got ", bits)))
        << message(bad);
  }
  TrainOptions unused = o;
  unused.precision.grad_comm_dtype = DType::kBF16;
  ASSERT_FALSE(unused.Warnings().empty());
  EXPECT_TRUE(absl::StrContains(unused.Warnings().back(), "--grad_comm_dtype has no effect"))
      << unused.Warnings().back();
  EXPECT_TRUE(o.Warnings().empty());
}

TEST(Qwz, BadValuesAreClearErrors) {
  auto message = [](const TrainOptions& o) { return std::string(o.Validate().message()); };
  const TrainOptions o = QwzGrid{}.On(TinyDataParallel(1));
  ASSERT_TRUE(o.Validate().ok()) << o.Validate();
  TrainOptions bad = o;
  bad.parallel.zero = 2;
  EXPECT_TRUE(absl::StrContains(message(bad), "--zero_quantized_weights quantises ZeRO-3's"))
      << message(bad);
  for (int64_t block : {0, -4}) {
    bad = o;
    bad.parallel.zero_quant_block = block;
    EXPECT_TRUE(absl::StrContains(message(bad), absl::StrCat("--zero_quant_block must be at least 1 value a block, got ", block)))
        << message(bad);
  }
  bad = o;
  bad.placement.device = DeviceType::kCUDA;
  EXPECT_TRUE(absl::StrContains(message(bad), "--zero_quantized_weights with --device=cuda"))
      << message(bad);
  TrainOptions unused = o;
  unused.parallel.zero_quantized_weights = false;
  unused.parallel.zero_quant_block = 64;
  ASSERT_FALSE(unused.Warnings().empty());
  EXPECT_TRUE(absl::StrContains(unused.Warnings().back(), "--zero_quant_block has no effect"))
      << unused.Warnings().back();
  EXPECT_TRUE(o.Warnings().empty());
}

}  // namespace
}  // namespace tally::train
