// Training on a GPU (--device=cuda) against the same run on the CPU: fp32 without TF32
// keeps every step's loss within 1e-4 relative over 5 steps (the kernels differ only in
// the order of their additions). Several ranks share the one GPU through the threads
// transport on device memory: DP, TP and PP runs match the single-rank GPU run, and
// their ledgers book exactly the CPU run's bytes; over NCCL, a GPU per rank, the same.
// Skipped, with the reason, without a GPU (NCCL's grids: without as many GPUs as
// ranks). The options that the GPU path does not run are checked on any machine.
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "core/runtime/cuda/cuda.h"
#include "tests/train/run_ranks.h"
#include "core/train/trainer.h"

namespace tally::train {
namespace {

TrainOptions Small(DeviceType device) {
  TrainOptions o;
  o.model.n_layer = 2;
  o.model.n_head = 4;
  o.model.n_embd = 64;
  o.model.seq_len = 64;
  o.training.global_batch_size = 8;
  o.training.micro_batch_size = 4;  // two micro-batches: gradients accumulate on the device
  o.training.steps = 5;
  o.training.warmup_steps = 2;
  o.data.eval_every = 0;
  o.sampling.sample_bytes = 0;
  o.training.threads = 1;
  o.placement.device = device;
  return o;
}

void SkipWithoutGpu() {
  absl::StatusOr<int> gpus = cuda::DeviceCount();
  if (!gpus.ok()) GTEST_SKIP() << gpus.status().message();
}

TEST(CudaTrain, FiveStepsMatchTheCpuRun) {
  SkipWithoutGpu();
  if (::testing::Test::IsSkipped()) return;
  auto cpu = Trainer::Create(Small(DeviceType::kCPU));
  auto gpu = Trainer::Create(Small(DeviceType::kCUDA));
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  for (int64_t k = 0; k < 5; ++k) {
    absl::StatusOr<StepStats> want = (*cpu)->TrainStep(k);
    absl::StatusOr<StepStats> got = (*gpu)->TrainStep(k);
    ASSERT_TRUE(want.ok()) << want.status();
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_NEAR(got->loss, want->loss, 1e-4 * std::fabs(want->loss)) << "step " << k + 1;
    EXPECT_NEAR(got->grad_norm, want->grad_norm, 1e-3 * want->grad_norm) << "step " << k + 1;
  }
  absl::StatusOr<float> want = (*cpu)->Evaluate();
  absl::StatusOr<float> got = (*gpu)->Evaluate();
  ASSERT_TRUE(want.ok() && got.ok());
  EXPECT_NEAR(*got, *want, 1e-4 * std::fabs(*want));
}

TEST(CudaTrain, Tf32TrainsAndSamples) {
  SkipWithoutGpu();
  if (::testing::Test::IsSkipped()) return;
  TrainOptions o = Small(DeviceType::kCUDA);
  o.precision.tf32 = true;
  o.training.steps = 20;
  o.training.lr = 3e-3f;
  auto trainer = Trainer::Create(o);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  float first = 0, last = 0;
  for (int64_t k = 0; k < o.training.steps; ++k) {
    absl::StatusOr<StepStats> s = (*trainer)->TrainStep(k);
    ASSERT_TRUE(s.ok()) << s.status();
    (k == 0 ? first : last) = s->loss;
  }
  EXPECT_LT(last, first - 1.0f);
  absl::StatusOr<std::string> text = (*trainer)->Sample(16);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(text->size(), 16u);
}

// Losses within 1e-4 of `want`'s (the ranks sum gradients in another order).
void ExpectLossesNear(const RunResult& got, const RunResult& want) {
  ASSERT_EQ(got.losses.size(), want.losses.size());
  for (size_t k = 0; k < want.losses.size(); ++k) {
    EXPECT_NEAR(got.losses[k], want.losses[k], 1e-4 * std::fabs(want.losses[k])) << "step " << k;
  }
}

// Every rank's traffic rows, peer by peer, with `want`'s bytes.
void ExpectSameBytes(const RunResult& got, const RunResult& want) {
  ASSERT_EQ(got.traffic.size(), want.traffic.size());
  for (size_t r = 0; r < want.traffic.size(); ++r) {
    const auto& w_rows = want.traffic[r].transfers();
    const auto& g_rows = got.traffic[r].transfers();
    ASSERT_EQ(g_rows.size(), w_rows.size()) << "rank " << r;
    for (auto g = g_rows.begin(), w = w_rows.begin(); w != w_rows.end(); ++g, ++w) {
      EXPECT_EQ(g->first, w->first) << "rank " << r;
      EXPECT_EQ(g->second.bytes_sent, w->second.bytes_sent) << "rank " << r;
      EXPECT_EQ(g->second.bytes_recv, w->second.bytes_recv) << "rank " << r;
    }
  }
}

// A grid of ranks on GPUs (and the transport that joins them, native_collectives: NCCL's
// own, whose bytes are booked as the ring's): the losses of the single-rank GPU run, and (ring and
// naive) every traffic row's bytes those of the same grid on the CPU.
void CheckGrid(TrainOptions o, const Grid& g) {
  o.training.steps = 3;
  TrainOptions one = o;
  one.placement.backend = Backend::kThreads;
  const RunResult single = RunRanks(one);
  const RunResult gpu = RunRanks(g.On(o));
  ExpectLossesNear(gpu, single);
  if (g.native_collectives) return;
  o.placement.device = DeviceType::kCPU;
  o.placement.backend = Backend::kThreads;
  ExpectSameBytes(gpu, RunRanks(g.On(o)));
}

// dp=2, tp=2, pp=2, 2×2×2, ZeRO-1/2/3 and sequence parallelism on one GPU, the ranks
// sharing it through the threads transport.
class CudaGrid : public ::testing::TestWithParam<Grid> {};

TEST_P(CudaGrid, MatchesOneGpuAndBooksTheCpuBytes) {
  SkipWithoutGpu();
  if (::testing::Test::IsSkipped()) return;
  CheckGrid(Small(DeviceType::kCUDA), GetParam());
}

INSTANTIATE_TEST_SUITE_P(OneGpu, CudaGrid,
                         ::testing::Values(Grid{.dp = 2}, Grid{.tp = 2}, Grid{.pp = 2},
                                           Grid{.dp = 2, .tp = 2, .pp = 2}, Grid{.dp = 2, .zero = 1},
                                           Grid{.dp = 2, .zero = 2}, Grid{.dp = 2, .zero = 3},
                                           Grid{.dp = 2, .pp = 2, .zero = 3},
                                           Grid{.tp = 2, .sequence_parallel = true},
                                           Grid{.dp = 2, .tp = 2, .pp = 2, .zero = 1,
                                                .sequence_parallel = true}),
                         GridName);

// --backend=nccl: a GPU per rank, the bytes over NCCL. One GPU runs the one-rank world
// (NCCL's communicators; ZeRO-1 over it with NCCL's own reduce-scatter and all-gather);
// the grids of several ranks need as many GPUs and skip, saying so, where there are
// fewer.
class NcclGrid : public ::testing::TestWithParam<Grid> {};

TEST_P(NcclGrid, MatchesOneGpuAndBooksTheCpuBytes) {
  const Grid g = GetParam();
  absl::StatusOr<int> gpus = cuda::DeviceCount();
  if (!gpus.ok()) GTEST_SKIP() << gpus.status().message();
  const int world = g.dp * g.tp * g.pp;
  if (*gpus < world) GTEST_SKIP() << "needs " << world << " GPUs, this machine has " << *gpus;
  TrainOptions o = Small(DeviceType::kCUDA);
  o.placement.backend = Backend::kNccl;
  CheckGrid(o, g);
}

INSTANTIATE_TEST_SUITE_P(GpuPerRank, NcclGrid,
                         ::testing::Values(Grid{}, Grid{.zero = 1, .native_collectives = true},
                                           Grid{.dp = 2}, Grid{.dp = 2, .native_collectives = true},
                                           Grid{.tp = 2}, Grid{.pp = 2}, Grid{.dp = 2, .zero = 3},
                                           Grid{.dp = 2, .tp = 2, .zero = 1, .sequence_parallel = true},
                                           Grid{.dp = 2, .tp = 2, .pp = 2},
                                           Grid{.dp = 2, .pp = 2, .zero = 3}),
                         GridName);

// A GPU run's checkpoint (ZeRO-3 over two ranks: the shards gathered on the GPU, then
// to the host) resumes on the GPU and on the CPU, each continuing the uninterrupted GPU
// run's losses.
TEST(CudaTrain, CheckpointsMoveBetweenGpuAndCpu) {
  SkipWithoutGpu();
  if (::testing::Test::IsSkipped()) return;
  TrainOptions o = Small(DeviceType::kCUDA);
  o.parallel.dp = 2;
  o.parallel.zero = 3;
  o.training.steps = 4;
  const RunResult whole = RunRanks(o);
  const std::string path = ::testing::TempDir() + "/cuda_zero3.safetensors";
  TrainAndSave(o, 2, path);
  o.checkpoint.load = path;
  const std::vector<float> gpu = Resume(o);
  o.placement.device = DeviceType::kCPU;
  const std::vector<float> cpu = Resume(o);
  ASSERT_EQ(gpu.size(), 2u);
  ASSERT_EQ(cpu.size(), 2u);
  for (size_t k = 0; k < 2; ++k) {
    const float want = whole.losses[2 + k];
    EXPECT_NEAR(gpu[k], want, 1e-4 * std::fabs(want)) << "GPU, step " << 3 + k;
    EXPECT_NEAR(cpu[k], want, 1e-4 * std::fabs(want)) << "CPU, step " << 3 + k;
  }
}

TEST(CudaTrain, WhatTheGpuDoesNotRunIsAClearError) {
  TrainOptions o = Small(DeviceType::kCUDA);
  o.placement.backend = Backend::kMpi;
  absl::Status s = o.Validate();
  EXPECT_TRUE(absl::StrContains(s.message(), "MPI moving GPU memory is not built")) << s;
  o = Small(DeviceType::kCPU);
  o.precision.tf32 = true;
  s = o.Validate();
  EXPECT_TRUE(absl::StrContains(s.message(), "--tf32 needs --device=cuda")) << s;
  o = Small(DeviceType::kCPU);
  o.placement.backend = Backend::kNccl;
  s = o.Validate();
  EXPECT_TRUE(absl::StrContains(s.message(), "--backend=nccl needs --device=cuda")) << s;
}

}  // namespace
}  // namespace tally::train
