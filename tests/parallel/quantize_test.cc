// ZeRO++'s qwZ quantiser (extensions/zero_pp/quantize.h) against a reference written here from
// the header's rule, and its all-gather over thread ranks: every chunk dequantised as the
// reference says, and the two calls' bytes as the formula says. The same for qgZ's
// reduce-scatter (extensions/zero_pp/qgz.h), in one hop and in two, against its algorithm
// unrolled here.
#include "extensions/zero_pp/quantize.h"

#include "extensions/zero_pp/qgz.h"

#include <cmath>
#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "core/runtime/comm/algorithms/partition.h"
#include "core/runtime/comm/launch.h"
#include "core/runtime/comm/ledger/exact_traffic.h"
#include "core/runtime/comm/ledger/names.h"
#include "core/runtime/status_macros.h"
#include "extensions/zero_pp/names.h"

namespace tally::extensions {
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

// The header's rule, value by value: what the wire carries for x (qgZ's int4: qmax 7).
std::vector<float> Reference(const std::vector<float>& x, int64_t block, int qmax = 127) {
  std::vector<float> out(x.size());
  for (size_t begin = 0; begin < x.size(); begin += size_t(block)) {
    const size_t end = std::min(x.size(), begin + size_t(block));
    float most = 0;
    for (size_t i = begin; i < end; ++i) most = std::max(most, std::abs(x[i]));
    const float scale = most / float(qmax);
    for (size_t i = begin; i < end; ++i) {
      const float q = scale > 0 ? std::nearbyint(x[i] / scale) : 0;
      EXPECT_LE(std::abs(q), qmax);
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
    for (auto [scope, count, element] : {std::tuple{extensions::scope::kQwz, n, int64_t{1}},
                                         std::tuple{extensions::scope::kQwzScales, ranks * blocks, int64_t{4}}}) {
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
      return k.label == extensions::scope::kQwzScales;
    }).bytes_sent;
    EXPECT_EQ(scales, 2 * (ranks - 1) * blocks * 4) << w;
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, QuantizedGatherTest, ::testing::Values(2, 3, 4));

// qgZ's dp group: `nodes` nodes of `local` ranks (nodes 1: one hop).
struct QgzGrid {
  int nodes = 1, local = 2;
  int64_t n = 1001, block = 16;
  int bits = 8;
};

// qgz.h's algorithm unrolled over every rank's gradients `g`: each rank's reduced chunk,
// and the error sums of the quantisations each rank makes.
struct QgzReference {
  std::vector<std::vector<float>> reduced;
  std::vector<ErrorSums> error;

  QgzReference(const QgzGrid& grid, const std::vector<std::vector<float>>& g)
      : reduced(g.size()), error(g.size()) {
    const int p = grid.nodes * grid.local;
    auto chunk = [&](const std::vector<float>& x, int j) {
      const comm::Chunk c = comm::ChunkOf(grid.n, p, j);
      return std::vector<float>(x.begin() + c.offset, x.begin() + c.end());
    };
    // What rank `by` sends for x, and its error.
    auto quantised = [&](const std::vector<float>& x, int by) {
      std::vector<float> back = Reference(x, grid.block, grid.bits == 4 ? 7 : 127);
      for (size_t i = 0; i < x.size(); ++i) {
        error[size_t(by)].residual += (double(back[i]) - x[i]) * (double(back[i]) - x[i]);
        error[size_t(by)].value += double(x[i]) * x[i];
      }
      return back;
    };
    auto add = [](std::vector<float>& sum, const std::vector<float>& x) {
      if (sum.empty()) sum.assign(x.size(), 0.0f);
      for (size_t i = 0; i < x.size(); ++i) sum[i] += x[i];
    };
    // Every rank quantises every chunk first, in dp rank order.
    std::vector<std::vector<std::vector<float>>> sent(static_cast<size_t>(p));  // [rank][chunk]
    for (int r = 0; r < p; ++r) {
      for (int j = 0; j < p; ++j) sent[size_t(r)].push_back(quantised(chunk(g[size_t(r)], j), r));
    }
    if (grid.nodes == 1) {
      for (int d = 0; d < p; ++d) {
        for (int r = 0; r < p; ++r) add(reduced[size_t(d)], sent[size_t(r)][size_t(d)]);
      }
      return;
    }
    // Rank (node, l) sums chunk n'·L + l over its node's ranks, for every node n'; then
    // quantises it for node n'; rank (n', l) sums what the nodes sent, in node order.
    const int L = grid.local;
    std::vector<std::vector<std::vector<float>>> node_sum(static_cast<size_t>(p));  // [rank][n']
    for (int node = 0; node < grid.nodes; ++node) {
      for (int l = 0; l < L; ++l) {
        const int r = node * L + l;
        for (int to = 0; to < grid.nodes; ++to) {
          std::vector<float> sum;
          for (int j = 0; j < L; ++j) add(sum, sent[size_t(node * L + j)][size_t(to * L + l)]);
          node_sum[size_t(r)].push_back(quantised(sum, r));
        }
      }
    }
    for (int d = 0; d < p; ++d) {
      for (int node = 0; node < grid.nodes; ++node) {
        add(reduced[size_t(d)], node_sum[size_t(node * L + d % L)][size_t(d / L)]);
      }
    }
  }
};

class QgzTest : public ::testing::TestWithParam<QgzGrid> {};

TEST_P(QgzTest, ReducedAsTheAlgorithmUnrolledAndTheBytesOfTheFormula) {
  const QgzGrid grid = GetParam();
  const int p = grid.nodes * grid.local;
  std::vector<std::vector<float>> g;
  for (int r = 0; r < p; ++r) g.push_back(Values(grid.n, 10 + r));
  const QgzReference want(grid, g);
  std::vector<comm::TrafficLedger> ledgers(static_cast<size_t>(p));
  comm::LaunchOptions launch;
  launch.world_size = p;
  const absl::Status status = comm::RunThreadRanks(launch, [&](comm::Communicator& dp) -> absl::Status {
    const int r = dp.rank();
    QgzConfig how{.block = grid.block, .bits = grid.bits};
    std::unique_ptr<comm::Communicator> node, across;
    if (grid.nodes > 1) {  // placed in blocks: node r / L
      ASSIGN_OR_RETURN(node, dp.Split(r / grid.local, r, comm::group::kDpShard));
      ASSIGN_OR_RETURN(across, dp.Split(r % grid.local, r, comm::group::kDpReplicate));
      how.node = node.get();
      how.across = across.get();
    }
    ASSIGN_OR_RETURN(Tensor grads, Tensor::Empty({grid.n}, DType::kF32, dp.allocator()));
    RETURN_IF_ERROR(grads.CopyFromHost(g[size_t(r)].data()));
    const comm::Chunk own = comm::ChunkOf(grid.n, p, r);
    ASSIGN_OR_RETURN(Tensor reduced, Tensor::Empty({own.count}, DType::kF32, dp.allocator()));
    ErrorSums error;
    RETURN_IF_ERROR(QuantizedReduceScatter(dp, how, grads, reduced, &error));
    for (int64_t i = 0; i < own.count; ++i) {
      if (reduced.data<float>()[i] != want.reduced[size_t(r)][size_t(i)]) {
        return absl::InternalError(absl::StrCat("rank ", r, " value ", i, ": ",
                                                reduced.data<float>()[i],
                                                " != ", want.reduced[size_t(r)][size_t(i)]));
      }
    }
    if (error.residual != want.error[size_t(r)].residual ||
        error.value != want.error[size_t(r)].value || !(error.residual > 0)) {
      return absl::InternalError(absl::StrCat("rank ", r, " error ", error.residual, "/",
                                              error.value));
    }
    ledgers[size_t(r)] = dp.ledger();  // every group's rows (one ledger a rank)
    return absl::OkStatus();
  });
  ASSERT_TRUE(status.ok()) << status;
  // qgz.h's closed form: (p-1)·(b + 4B) in one hop; (L-1)·N·(b + 4B) inside the node and
  // (N-1)·(b + 4B) across in two, b = c values at 8 bits, ⌈c/2⌉ bytes at 4.
  const QgzPart part = QgzPartOf(grid.n, p, grid.block, grid.bits);
  const int64_t c = comm::ChunkOf(grid.n, p, 0).count;
  EXPECT_EQ(part.values, c);
  EXPECT_EQ(part.bytes, grid.bits == 8 ? c : (c + 1) / 2);
  auto sent = [&](int r, const std::string& group) {
    return ledgers[size_t(r)].Sum([&](const comm::LedgerKey& k) {
      return k.group == group && k.primitive == comm::Primitive::kAllToAll &&
             (k.label == extensions::scope::kQgz || k.label == extensions::scope::kQgzScales);
    }).bytes_sent;
  };
  const int64_t one = part.bytes + 4 * part.scales;
  for (int r = 0; r < p; ++r) {
    if (grid.nodes == 1) {
      EXPECT_EQ(sent(r, "world"), (p - 1) * one) << r;
    } else {
      EXPECT_EQ(sent(r, comm::group::kDpShard), (grid.local - 1) * grid.nodes * one) << r;
      EXPECT_EQ(sent(r, comm::group::kDpReplicate), (grid.nodes - 1) * one) << r;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Grids, QgzTest,
                         ::testing::Values(QgzGrid{.nodes = 1, .local = 2},
                                           QgzGrid{.nodes = 1, .local = 3, .block = 1},
                                           QgzGrid{.nodes = 2, .local = 2},
                                           QgzGrid{.nodes = 2, .local = 3, .block = 256},
                                           QgzGrid{.nodes = 3, .local = 2, .n = 37, .block = 5},
                                           QgzGrid{.nodes = 1, .local = 3, .bits = 4},
                                           QgzGrid{.nodes = 2, .local = 2, .n = 37, .block = 3, .bits = 4},
                                           QgzGrid{.nodes = 3, .local = 2, .block = 64, .bits = 4}),
                         [](const ::testing::TestParamInfo<QgzGrid>& grid_info) {
                           const QgzGrid& g = grid_info.param;
                           return absl::StrCat(g.nodes, "x", g.local, "_n", g.n, "_block", g.block,
                                               "_int", g.bits);
                         });

}  // namespace
}  // namespace tally::extensions
