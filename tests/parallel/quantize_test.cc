// ZeRO++'s qwZ quantiser (parallel/zero/quantize.h) against a reference written here from
// the header's rule, and its all-gather over thread ranks: every chunk dequantised as the
// reference says, and the two calls' bytes as the formula says.
#include "parallel/zero/quantize.h"

#include <cmath>
#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "runtime/comm/algorithms/partition.h"
#include "runtime/comm/launch.h"
#include "runtime/comm/ledger/exact_traffic.h"
#include "runtime/comm/ledger/names.h"
#include "runtime/status_macros.h"

namespace tally::parallel {
namespace {

// Values of every size, a block of zeros among them.
std::vector<float> Values(int64_t n, int seed) {
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    x[size_t(i)] = float(std::sin(0.37 * double(i) + seed)) * float(1 + (i % 17)) * 1e-2f;
  }
  for (int64_t i = 64; i < std::min<int64_t>(n, 128); ++i) x[size_t(i)] = 0;
  return x;
}

// The header's rule, value by value: what the wire carries for x.
std::vector<float> Reference(const std::vector<float>& x, int64_t block) {
  std::vector<float> out(x.size());
  for (size_t begin = 0; begin < x.size(); begin += size_t(block)) {
    const size_t end = std::min(x.size(), begin + size_t(block));
    float most = 0;
    for (size_t i = begin; i < end; ++i) most = std::max(most, std::abs(x[i]));
    const float scale = most / 127;
    for (size_t i = begin; i < end; ++i) {
      const float q = scale > 0 ? std::nearbyint(x[i] / scale) : 0;
      EXPECT_LE(std::abs(q), 127);
      out[i] = q * scale;
      EXPECT_LE(std::abs(out[i] - x[i]), scale / 2 * (1 + 1e-6f)) << i;
    }
  }
  return out;
}

TEST(Quantize, EveryValueAsTheRuleSaysAndItsErrorSums) {
  for (int64_t block : {1, 7, 64, 256}) {
    for (int64_t n : {int64_t{1}, int64_t{255}, int64_t{1000}}) {
      SCOPED_TRACE(absl::StrCat("block ", block, ", n ", n));
      const std::vector<float> x = Values(n, 1);
      std::vector<int8_t> q(static_cast<size_t>(n));
      std::vector<float> scales(static_cast<size_t>(BlocksOf(n, block)), -1.0f);
      std::vector<float> back(static_cast<size_t>(n));
      Quantize(x.data(), n, block, q.data(), scales.data());
      Dequantize(q.data(), scales.data(), n, block, back.data());
      const std::vector<float> want = Reference(x, block);
      ErrorSums sums;
      for (size_t i = 0; i < x.size(); ++i) {
        ASSERT_EQ(back[i], want[i]) << i;
        sums.residual += double(want[i] - x[i]) * double(want[i] - x[i]);
        sums.value += double(x[i]) * double(x[i]);
      }
      const ErrorSums got = QuantizationError(x.data(), n, block);
      EXPECT_EQ(got.residual, sums.residual);
      EXPECT_EQ(got.value, sums.value);
      if (n > 128 && block > 1) {
        EXPECT_GT(got.residual, 0);
      }
      if (block == 1) {  // q = ±127 (or 0): exact but for the scale's rounding
        EXPECT_LT(got.residual, 1e-12 * got.value);
      }
    }
  }
}

// A block larger than the run (up to 2^63 - 1) is one block: the same as a block of n.
TEST(Quantize, AHugeBlockIsOneBlock) {
  const int64_t n = 300;
  const std::vector<float> x = Values(n, 4);
  EXPECT_EQ(BlocksOf(n, INT64_MAX), 1);
  EXPECT_EQ(ScalesPerRank(n, 3, INT64_MAX), 1);
  for (int64_t block : {INT64_MAX, INT64_MAX / 2 + 1, n}) {
    std::vector<int8_t> q(static_cast<size_t>(n));
    float scale = 0;
    Quantize(x.data(), n, block, q.data(), &scale);
    std::vector<float> back(static_cast<size_t>(n));
    Dequantize(q.data(), &scale, n, block, back.data());
    EXPECT_EQ(back, Reference(x, n)) << block;
    EXPECT_EQ(QuantizationError(x.data(), n, block).residual,
              QuantizationError(x.data(), n, n).residual);
  }
}

TEST(Quantize, Bf16RoundsWhatComesBack) {
  const int64_t n = 300, block = 32;
  const std::vector<float> x = Values(n, 2);
  std::vector<BFloat16> stored(static_cast<size_t>(n));
  std::vector<float> widened(static_cast<size_t>(n));
  for (size_t i = 0; i < x.size(); ++i) {
    stored[i] = BFloat16::FromFloat(x[i]);
    widened[i] = stored[i].ToFloat();
  }
  std::vector<int8_t> q(static_cast<size_t>(n));
  std::vector<float> scales(static_cast<size_t>(BlocksOf(n, block)));
  Quantize(ConstTypedPtr(stored.data(), DType::kBF16), n, block, q.data(), scales.data());
  std::vector<BFloat16> back(static_cast<size_t>(n));
  Dequantize(q.data(), scales.data(), n, block, TypedPtr(back.data(), DType::kBF16));
  const std::vector<float> want = Reference(widened, block);
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(back[i].bits, BFloat16::FromFloat(want[i]).bits) << i;
  }
}

// Ranks, and the values of the unit they gather (not a multiple of the ranks or blocks).
class QuantizedGatherTest : public ::testing::TestWithParam<int> {};

TEST_P(QuantizedGatherTest, EveryChunkDequantisedAndTheBytesOfTheFormula) {
  const int ranks = GetParam();
  const int64_t n = 1001, block = 64;
  const std::vector<float> unit = Values(n, 3);
  std::vector<float> want;  // each rank's chunk quantised on its own
  for (int r = 0; r < ranks; ++r) {
    const comm::Chunk c = comm::ChunkOf(n, ranks, r);
    const std::vector<float> chunk(unit.begin() + c.offset, unit.begin() + c.end());
    const std::vector<float> back = Reference(chunk, block);
    want.insert(want.end(), back.begin(), back.end());
  }
  std::vector<comm::TrafficLedger> ledgers(static_cast<size_t>(ranks));
  comm::LaunchOptions launch;
  launch.world_size = ranks;
  const absl::Status status = comm::RunThreadRanks(launch, [&](comm::Communicator& world) -> absl::Status {
    const comm::Chunk c = comm::ChunkOf(n, ranks, world.rank());
    ASSIGN_OR_RETURN(Tensor mine, Tensor::Empty({c.count}, DType::kF32, world.allocator()));
    RETURN_IF_ERROR(mine.CopyFromHost(unit.data() + c.offset));
    for (bool blocking : {true, false}) {
      ASSIGN_OR_RETURN(Tensor all, Tensor::Empty({n}, DType::kF32, world.allocator()));
      QuantizedGather gather(world, block, comm::Algorithm::kRing);
      RETURN_IF_ERROR(gather.Post(mine, all, blocking));
      if (!blocking) RETURN_IF_ERROR(gather.Finish());
      for (int64_t i = 0; i < n; ++i) {
        if (all.data<float>()[i] != want[size_t(i)]) {
          return absl::InternalError(absl::StrCat("rank ", world.rank(), " value ", i, ": ",
                                                  all.data<float>()[i], " != ", want[size_t(i)]));
        }
      }
    }
    ledgers[size_t(world.rank())] = world.ledger();
    return absl::OkStatus();
  });
  ASSERT_TRUE(status.ok()) << status;
  const int64_t blocks = ScalesPerRank(n, ranks, block);
  EXPECT_EQ(blocks, BlocksOf(comm::ChunkOf(n, ranks, 0).count, block));
  for (int w = 0; w < ranks; ++w) {
    for (auto [scope, count, element] : {std::tuple{comm::scope::kQwz, n, int64_t{1}},
                                         std::tuple{comm::scope::kQwzScales, ranks * blocks, int64_t{4}}}) {
      const int64_t sent = ledgers[size_t(w)].Sum([&](const comm::LedgerKey& k) {
        return k.label == scope;
      }).bytes_sent;
      EXPECT_EQ(sent, 2 * comm::ExactTraffic(comm::Primitive::kAllGather, comm::Algorithm::kRing,
                                             ranks, w, -1, count, element).sent)
          << scope << " rank " << w;
    }
    // The ring's closed form of quantize.h: (p-1)/p·n bytes (n/p each hop when p | n) and
    // (p-1)·B scales.
    const int64_t scales = ledgers[size_t(w)].Sum([](const comm::LedgerKey& k) {
      return k.label == comm::scope::kQwzScales;
    }).bytes_sent;
    EXPECT_EQ(scales, 2 * (ranks - 1) * blocks * 4) << w;
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, QuantizedGatherTest, ::testing::Values(2, 3, 4));

}  // namespace
}  // namespace tally::parallel
