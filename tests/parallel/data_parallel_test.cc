// Data parallelism and ZeRO in closed form: buckets, shards, calls and bytes per step,
// and the update every strategy ends its step with, without running a model.
#include "core/parallel/data_parallel.h"

#include <cmath>
#include <memory>
#include <numeric>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "core/model/parameters.h"
#include "core/optim/optimizer.h"
#include "core/parallel/zero/sharding.h"
#include "core/runtime/comm/launch.h"
#include "core/runtime/kernels/kernels.h"
#include "core/runtime/status_macros.h"

namespace tally::parallel {
namespace {

using comm::Algorithm;
using comm::Phase;
using comm::Primitive;

TEST(GradientBuckets, CutFromTheEndAndCoverTheBuffer) {
  std::vector<comm::Chunk> b = GradientBuckets(10, 4);
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[0].offset, 6);
  EXPECT_EQ(b[0].count, 4);
  EXPECT_EQ(b[2].offset, 0);
  EXPECT_EQ(b[2].count, 2);
}

// The ring sends 2(N−1)/N of each bucket; the star, the whole of it (N−1 times from the
// root). The bucket size changes the calls, never the ring's bytes when N divides the
// buckets; when it does not, the ranks' chunks differ and their sum is still 2(N−1)·M.
TEST(GradientSyncBytes, RingIsTwoNMinusOneOverNAndTheStarLoadsTheRoot) {
  const int64_t params = 4 * 1200;  // divisible by every N below and by the buckets
  for (int n : {2, 3, 4}) {
    for (int64_t bucket_bytes : {int64_t(4 * 1200), int64_t(4 * 600), int64_t(4 * 240)}) {
      for (int r = 0; r < n; ++r) {
        EXPECT_EQ(GradientSyncBytesPerStep(params, n, r, bucket_bytes, Algorithm::kRing),
                  2 * (n - 1) * params * 4 / n)
            << n << " " << bucket_bytes << " " << r;
      }
    }
    int64_t uneven = 0;  // buckets of 7 elements
    for (int r = 0; r < n; ++r) uneven += GradientSyncBytesPerStep(params, n, r, 4 * 7, Algorithm::kRing);
    EXPECT_EQ(uneven, 2 * (n - 1) * params * 4) << n;
    EXPECT_EQ(GradientSyncBytesPerStep(params, n, 0, 4 * params, Algorithm::kNaive), (n - 1) * params * 4);
    EXPECT_EQ(GradientSyncBytesPerStep(params, n, 1, 4 * params, Algorithm::kNaive), params * 4);
  }
}

model::ParameterLayout Tiny() {
  model::GPTConfig c;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 8;
  c.seq_len = 4;
  c.vocab_size = 16;
  return model::ParameterLayout::ForGPT(c);
}

// ZeRO-1 is one unit; ZeRO-2 and 3 the model's units (embeddings, each layer, ln_f).
// Every rank's shard is its chunk of each unit, and the shards tile the buffer.
TEST(ZeroUnits, EachStageCutsTheBufferAsItShould) {
  const model::ParameterLayout layout = Tiny();
  ASSERT_EQ(ZeroUnits(layout, 1).size(), 1u);
  EXPECT_EQ(ZeroUnits(layout, 1)[0].range.count, layout.total());
  for (int stage : {2, 3}) {
    const std::vector<ZeroUnit> units = ZeroUnits(layout, stage);
    EXPECT_EQ(units.size(), layout.units().size()) << stage;
    int64_t covered = 0;
    for (const ZeroUnit& u : units) {
      EXPECT_EQ(u.range.offset, covered);
      EXPECT_FALSE(u.experts);
      covered += u.range.count;
    }
    EXPECT_EQ(covered, layout.total());
    for (int ranks : {2, 3}) {
      std::vector<int> owner(size_t(layout.total()), -1);
      int64_t shards = 0;
      for (int r = 0; r < ranks; ++r) {
        const Sharding shard(units, ranks, r);
        shards += shard.size();
        for (const Sharding::Piece& p : shard.pieces()) {
          for (int64_t i = p.own.offset; i < p.own.end(); ++i) {
            EXPECT_EQ(owner[size_t(i)], -1) << "element " << i << " owned twice";
            owner[size_t(i)] = r;
          }
        }
      }
      EXPECT_EQ(shards, layout.total());
      EXPECT_EQ(std::count(owner.begin(), owner.end(), -1), 0);
    }
  }
}

// Under expert parallelism every unit is cut into runs of the experts' tensors and of the
// others, which still tile the buffer in order; a layer's unit is two, its dense tensors
// and its experts'. The experts' runs are sharded over the edp group alone: each of their
// elements is one rank's of each edp group.
TEST(ZeroUnits, ExpertParallelismCutsTheExpertsApart) {
  model::GPTConfig c;
  c.n_layer = 2;
  c.n_embd = 8;
  c.n_head = 2;
  c.seq_len = 4;
  c.n_experts = 4;
  const model::ParameterLayout layout = model::ParameterLayout::ForGPT(c, 1, 0, {}, /*ep=*/2, 1);
  for (int stage : {1, 2, 3}) {
    const std::vector<ZeroUnit> units = ZeroUnits(layout, stage, /*expert_parallel=*/true);
    int64_t covered = 0, experts = 0;
    for (const ZeroUnit& u : units) {
      EXPECT_EQ(u.range.offset, covered) << stage;
      covered += u.range.count;
      for (const model::ParamSpec& spec : layout.specs()) {
        if (spec.offset >= u.range.offset && spec.offset < u.range.end()) {
          EXPECT_EQ(spec.expert, u.experts) << spec.name;
          if (spec.expert) experts += spec.numel;
        }
      }
    }
    EXPECT_EQ(covered, layout.total());
    EXPECT_GT(experts, 0);
    // ZeRO-1: [embeddings, layer 0's dense] [layer 0's experts] [layer 1's dense] [experts] [ln_f]
    EXPECT_EQ(units.size(), stage == 1 ? 5u : 2u * c.n_layer + 2) << stage;
    EXPECT_EQ(PiecesOfUnits(layout, stage, true).back().second, units.size()) << stage;
    // 4 dp ranks, ep 2: edp groups {0, 2} and {1, 3}; dp rank d is edp rank d / 2.
    std::vector<int> owners(size_t(layout.total()), 0);
    for (int d = 0; d < 4; ++d) {
      const Sharding shard(units, {4, d}, {2, d / 2});
      for (const Sharding::Piece& p : shard.pieces()) {
        for (int64_t i = p.own.offset; i < p.own.end(); ++i) ++owners[size_t(i)];
      }
    }
    for (const ZeroUnit& u : units) {
      for (int64_t i = u.range.offset; i < u.range.end(); ++i) {
        // Dense elements: one dp rank's; experts': one rank of each of the 2 edp groups.
        ASSERT_EQ(owners[size_t(i)], u.experts ? 2 : 1) << "element " << i;
      }
    }
  }
}

// The seed's per-step passes: ZeRO-1 one reduce-scatter after backward and one
// all-gather after the update; ZeRO-2 a reduce-scatter per micro-batch; ZeRO-3 an
// all-gather per forward and per backward (twice with recompute) and no all-gather after
// the update.
TEST(ZeroCalls, ThePassesOfEachStage) {
  const int m = 3;
  EXPECT_EQ(ZeroCallsPerStep(1, m, Primitive::kReduceScatter, Phase::kBackward), 1);
  EXPECT_EQ(ZeroCallsPerStep(1, m, Primitive::kAllGather, Phase::kOptimizer), 1);
  EXPECT_EQ(ZeroCallsPerStep(2, m, Primitive::kReduceScatter, Phase::kBackward), m);
  EXPECT_EQ(ZeroCallsPerStep(2, m, Primitive::kAllGather, Phase::kOptimizer), 1);
  EXPECT_EQ(ZeroCallsPerStep(3, m, Primitive::kAllGather, Phase::kForward), m);
  EXPECT_EQ(ZeroCallsPerStep(3, m, Primitive::kAllGather, Phase::kBackward), m);
  EXPECT_EQ(ZeroCallsPerStep(3, m, Primitive::kAllGather, Phase::kBackward, /*recompute=*/true), 2 * m);
  EXPECT_EQ(ZeroCallsPerStep(3, m, Primitive::kAllGather, Phase::kOptimizer), 0);
  EXPECT_EQ(ZeroCallsPerStep(0, m, Primitive::kReduceScatter, Phase::kBackward), 0);
}

// A ring reduce-scatter or all-gather of the buffer sends (N−1)/N of it: over the ranks,
// (N−1)·4Φ in all, whatever the uneven chunks.
TEST(ZeroBytes, EachPassSendsNMinusOneOverNOfTheBuffer) {
  const model::ParameterLayout layout = Tiny();
  for (int stage : {1, 2, 3}) {
    for (int n : {2, 3}) {
      int64_t all = 0;
      for (int r = 0; r < n; ++r) {
        all += ZeroBytesPerStep(UnitRanges(ZeroUnits(layout, stage), false), stage, n, r, /*micro_batches=*/1, Algorithm::kRing,
                                Primitive::kReduceScatter, Phase::kBackward, false);
      }
      EXPECT_EQ(all, (n - 1) * layout.total() * 4) << stage << " " << n;
    }
  }
}

// The update on one rank: the norm over every tensor, torch's clipping, then the
// optimizer (SGD without momentum's history: p − lr·g on the first step).
TEST(ClipAndStep, ClipsByTheGlobalNormThenSteps) {
  const model::ParameterLayout layout = Tiny();
  const int64_t n = layout.total();
  Allocator alloc(nullptr);
  std::unique_ptr<Kernels> k = Kernels::Create(Device::CPU()).value();
  Tensor grads = Tensor::Empty({n}, DType::kF32, alloc).value();
  std::vector<float> params(size_t(n), 1.0f);
  for (int64_t i = 0; i < n; ++i) grads.data<float>()[i] = 0.5f;  // norm 0.5·√n
  const std::vector<model::TensorRange> ranges = model::TensorRanges(layout);
  std::vector<optim::Segment> segments = model::OptimizerSegments(ranges);
  for (optim::Segment& s : segments) s.decay = false;
  optim::SGDOptions sgd;
  sgd.weight_decay = 0;
  auto optimizer = optim::SGD::Create(sgd, n, alloc).value();
  const TensorParallel one_rank;
  const double norm = ClipAndStep(*k, *optimizer, params.data(), grads, ranges, segments, /*lr=*/0.1f,
                                  /*clip=*/1.0f, GradientGroups{nullptr, &one_rank}).value();
  EXPECT_NEAR(norm, 0.5 * std::sqrt(double(n)), 1e-9 * norm);
  const float scale = float(1.0 / (norm + 1e-6));
  // The update is the clipped gradients' (clipped as the optimizer reads them: the
  // gradients' buffer keeps what backward left).
  EXPECT_NEAR(params[0], 1.0f - 0.1f * 0.5f * scale, 1e-6f);
  EXPECT_EQ(grads.data<float>()[0], 0.5f);
}

// Data parallelism's store: the gradients are summed over dp only in the step's last
// backward, a unit's buckets once backward has closed its gradients and released its
// parameters (not before), whatever is left at EndBackward; the sums are the ranks'.
TEST(ReplicaWeights, SumsTheLastBackwardsUnitsAsBackwardFinishesThem) {
  const model::ParameterLayout layout = Tiny();
  const int units = int(layout.units().size());
  comm::LaunchOptions launch;
  launch.world_size = 2;
  const absl::Status status = comm::RunThreadRanks(launch, [&](comm::Communicator& world) {
    // Buckets no larger than the last unit (ln_f), so that its release sends one.
    ReplicaConfig config;
    config.dp = &world;
    config.bucket_bytes = 4 * layout.units().back().count();
    auto sgd = [](int64_t n, Allocator& alloc) -> absl::StatusOr<std::unique_ptr<optim::Optimizer>> {
      ASSIGN_OR_RETURN(auto o, optim::SGD::Create(optim::SGDOptions(), n, alloc));
      return std::unique_ptr<optim::Optimizer>(std::move(o));
    };
    ASSIGN_OR_RETURN(auto store, ReplicaWeights::Create(config, layout, 1, world.allocator(), sgd));
    auto all_reduces = [&] {
      int64_t calls = 0;
      for (const auto& [key, totals] : world.ledger().calls()) {
        if (key.primitive == Primitive::kAllReduce) calls += totals.calls;
      }
      return calls;
    };
    // A backward as the model makes it: the units from the last down, each rank adding
    // rank + 1 to every gradient; the calls booked before and after the last unit's release.
    int64_t before_release = -1, after_release = -1;
    auto backward = [&]() -> absl::Status {
      for (int unit = units - 1; unit >= 0; --unit) {
        RETURN_IF_ERROR(store->Params(unit).status());
        ASSIGN_OR_RETURN(float* g, store->OpenGrads(unit));
        for (int64_t i = 0; i < layout.units()[unit].count(); ++i) g[i] += float(world.rank() + 1);
        RETURN_IF_ERROR(store->CloseGrads(unit));
        if (unit == units - 1) before_release = all_reduces();
        RETURN_IF_ERROR(store->ReleaseParams(unit));
        if (unit == units - 1) after_release = all_reduces();
      }
      return absl::OkStatus();
    };
    RETURN_IF_ERROR(store->ZeroGrad());
    RETURN_IF_ERROR(backward());  // an earlier micro-batch: accumulates only
    EXPECT_EQ(all_reduces(), 0);
    store->BeginLastBackward();
    RETURN_IF_ERROR(backward());
    EXPECT_EQ(before_release, 0);
    EXPECT_GT(after_release, 0);
    const int64_t in_backward = all_reduces();
    RETURN_IF_ERROR(store->EndBackward());
    EXPECT_EQ(all_reduces(), in_backward);  // the embeddings' release sent the rest
    const float* g = store->grads().data<float>();
    for (int64_t i = 0; i < layout.total(); ++i) {
      if (g[i] != 6.0f) return absl::InternalError(absl::StrCat("gradient ", i, " is ", g[i]));
    }
    return absl::OkStatus();
  });
  EXPECT_TRUE(status.ok()) << status;
}

}  // namespace
}  // namespace tally::parallel
