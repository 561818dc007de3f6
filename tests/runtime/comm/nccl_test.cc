// The NCCL transport (core/runtime/comm/transport/nccl), its ranks threads of this process, one GPU
// each: every collective gives the closed-form result on host and on GPU buffers, books
// the bytes the threads transport books (the algorithms are the same code), and NCCL's
// own collectives book the ring's. NCCL takes one GPU per rank, so the tests of several
// ranks need several GPUs and skip, saying so, where there are fewer; a machine with one
// GPU runs the one-rank world (communicators, staging, NCCL's collectives of one rank),
// and every machine checks that a world larger than its GPUs fails in one clear line.
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "core/runtime/comm/check/collective_check.h"
#include "core/runtime/comm/ledger/exact_traffic.h"
#include "core/runtime/comm/launch.h"
#include "core/runtime/comm/transport/nccl/nccl_transport.h"
#include "core/runtime/cuda/cuda.h"
#include "core/runtime/status_macros.h"
#include "tests/runtime/comm/transport_checks.h"

namespace tally::comm {
namespace {

int Gpus() {
  absl::StatusOr<int> gpus = cuda::DeviceCount();
  return gpus.ok() ? *gpus : 0;
}

// Skips a test that needs `n` GPUs where there are fewer.
#define SKIP_WITHOUT_GPUS(n)                                                 \
  do {                                                                       \
    if (!nccl::Available()) GTEST_SKIP() << "this build has no NCCL";        \
    absl::StatusOr<int> gpus = cuda::DeviceCount();                          \
    if (!gpus.ok()) GTEST_SKIP() << gpus.status().message();                 \
    if (*gpus < (n))                                                         \
      GTEST_SKIP() << "needs " << (n) << " GPUs (NCCL takes one per rank), " \
                   << "this machine has " << *gpus;                          \
  } while (false)

LaunchOptions NcclWorld(int n) {
  LaunchOptions launch;
  launch.world_size = n;
  launch.timeout = absl::Seconds(60);
  launch.comm.max_chunk_bytes = 4096;  // several messages per transfer
  launch.world_transport = nccl::WorldTransport;
  return launch;
}

using test_util::BytesByPeer;
using test_util::LedgerOnThreads;
using test_util::Rooted;

// One call with closed-form data on `comm`, its buffers on the host or on the rank's GPU;
// the count of wrong output elements.
absl::StatusOr<int64_t> CheckedCall(Communicator& comm, Primitive p, Algorithm a, int64_t count,
                                    int root, bool on_gpu) {
  if (!on_gpu) return test_util::CheckedCall(comm, p, a, count, root);
  ASSIGN_OR_RETURN(CallBuffers host, MakeCallBuffers(comm, p, count, root));
  FillInputs(comm, p, host, count, root);
  Allocator gpu(&comm.memory(), Device{DeviceType::kCUDA, comm.gpu()});
  ASSIGN_OR_RETURN(CallBuffers b, CopyCallBuffers(host, gpu));
  RETURN_IF_ERROR(Call(comm, p, a, b, count, root));
  RETURN_IF_ERROR(CopyContents(b, host));
  return CountWrong(comm, p, host, count, root);
}

// Every collective, ring and naive, host and GPU buffers, on an NCCL world of `n` ranks:
// the closed-form results, and the threads transport's bytes peer by peer.
void CheckEveryCollective(int n) {
  const LaunchOptions launch = NcclWorld(n);
  std::vector<std::vector<TrafficLedger>> threads_ledgers;  // computed once, outside the run
  int checked = 0;
  absl::Status status = RunThreadRanks(launch, [&](Communicator& world) -> absl::Status {
    EXPECT_EQ(world.gpu(), world.rank());
    for (Primitive p : kAllPrimitives) {
      for (Algorithm a : {Algorithm::kRing, Algorithm::kNaive}) {
        for (int64_t count : {0, 1, 7, 5000}) {
          for (int root : Rooted(p) ? std::vector<int>{0, n - 1} : std::vector<int>{-1}) {
            for (bool on_gpu : {false, true}) {
              const std::string what =
                  absl::StrCat(Name(p), " ", Name(a), " count ", count, " root ", root, " rank ",
                               world.rank(), on_gpu ? " GPU" : " host");
              world.ledger().Clear();
              ASSIGN_OR_RETURN(int64_t wrong, CheckedCall(world, p, a, count, root, on_gpu));
              EXPECT_EQ(wrong, 0) << what;
              ASSIGN_OR_RETURN(TrafficLedger threads,
                               LedgerOnThreads(n, world.rank(), p, a, count, root, launch.comm));
              EXPECT_EQ(BytesByPeer(world.ledger()), BytesByPeer(threads)) << what;
              if (world.rank() == 0) ++checked;
            }
          }
        }
      }
    }
    return absl::OkStatus();
  });
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_GT(checked, 160);
}

// NCCL's own collectives: the closed-form results (uneven chunks too), the ring's bytes.
void CheckNativeCollectives(int n) {
  LaunchOptions launch = NcclWorld(n);
  launch.comm.native_collectives = true;
  absl::Status status = RunThreadRanks(launch, [&](Communicator& world) -> absl::Status {
    for (Primitive p : kAllPrimitives) {
      if (p == Primitive::kSendRecv) continue;  // point-to-point has no native form
      for (int64_t count : {0, 1, 7, 5000, 4096 * n}) {
        for (bool on_gpu : {false, true}) {
          const int root = Rooted(p) ? n - 1 : -1;
          const std::string what = absl::StrCat(Name(p), " count ", count, " rank ", world.rank(),
                                                on_gpu ? " GPU" : " host");
          world.ledger().Clear();
          ASSIGN_OR_RETURN(int64_t wrong,
                           CheckedCall(world, p, Algorithm::kNative, count, root, on_gpu));
          EXPECT_EQ(wrong, 0) << what;
          const RankTraffic ring =
              ExactTraffic(p, Algorithm::kRing, n, world.rank(), root, count, 4);
          const TransferTotals booked = world.ledger().Total();
          EXPECT_EQ(booked.bytes_sent, ring.sent) << what;
          EXPECT_EQ(booked.bytes_recv, ring.recv) << what;
        }
      }
    }
    return absl::OkStatus();
  });
  ASSERT_TRUE(status.ok()) << status;
}

TEST(Nccl, AWorldLargerThanTheGpusFailsSayingWhy) {
  const int gpus = Gpus();
  absl::Status status =
      RunThreadRanks(NcclWorld(gpus + 1), [](Communicator&) { return absl::OkStatus(); });
  ASSERT_FALSE(status.ok());
  const std::string message(status.message());
  if (!nccl::Available()) {
    EXPECT_TRUE(absl::StrContains(message, "[nccl] this build has no NCCL")) << message;
  } else if (gpus == 0) {
    EXPECT_TRUE(absl::StrContains(message, "[cuda]")) << message;
  } else {
    EXPECT_TRUE(absl::StrContains(
        message, absl::StrCat("needs GPU ", gpus, ", and this machine has ", gpus)))
        << message;
  }
}

TEST(Nccl, OneRankRunsEveryCollective) {
  SKIP_WITHOUT_GPUS(1);
  CheckEveryCollective(1);
  CheckNativeCollectives(1);
}

TEST(Nccl, ResultsAndBytesAreTheThreadsTransports) {
  SKIP_WITHOUT_GPUS(2);
  CheckEveryCollective(std::min(Gpus(), 4));
}

TEST(Nccl, NativeCollectivesGiveTheResultsAndBookTheRingsBytes) {
  SKIP_WITHOUT_GPUS(2);
  CheckNativeCollectives(std::min(Gpus(), 4));
}

// The pattern of a 1F1B pipeline of two stages, with messages larger than NCCL buffers:
// stage 0 sends two activations before it receives the first gradient; stage 1 sends
// that gradient before it receives the second activation. On one NCCL communicator the
// second activation's send would wait behind the gradient's receive on stage 0 and the
// gradient's send behind the second activation's receive on stage 1.
TEST(Nccl, PipelineSendsDoNotWaitBehindReceives) {
  SKIP_WITHOUT_GPUS(2);
  constexpr int64_t kCount = 4 << 20;  // 16 MiB of f32
  absl::Status status = RunThreadRanks(NcclWorld(2), [&](Communicator& world) -> absl::Status {
    ASSIGN_OR_RETURN(auto pp, world.Split(0, world.rank(), "pp"));
    Allocator gpu(&world.memory(), Device{DeviceType::kCUDA, world.gpu()});
    std::vector<Tensor> buffers;
    for (int i = 0; i < 3; ++i) {
      ASSIGN_OR_RETURN(Tensor t, Tensor::Empty({kCount}, DType::kF32, gpu));
      std::vector<float> values(kCount, float(10 * world.rank() + i));
      RETURN_IF_ERROR(t.CopyFromHost(values.data()));
      buffers.push_back(std::move(t));
    }
    std::vector<float> got(kCount);
    if (pp->rank() == 0) {
      auto a0 = pp->Isend(buffers[0], 1);
      auto a1 = pp->Isend(buffers[1], 1);
      RETURN_IF_ERROR(pp->Recv(buffers[2], 1));  // gradient 0
      RETURN_IF_ERROR(a0->Wait());
      RETURN_IF_ERROR(a1->Wait());
      RETURN_IF_ERROR(buffers[2].CopyToHost(got.data()));
      EXPECT_EQ(got.front(), 11.0f);  // stage 1's buffer 1
      EXPECT_EQ(got.back(), 11.0f);
    } else {
      RETURN_IF_ERROR(pp->Recv(buffers[0], 0));  // activation 0
      auto g0 = pp->Isend(buffers[1], 0);
      RETURN_IF_ERROR(pp->Recv(buffers[2], 0));  // activation 1
      RETURN_IF_ERROR(g0->Wait());
      RETURN_IF_ERROR(buffers[0].CopyToHost(got.data()));
      EXPECT_EQ(got.back(), 0.0f);
      RETURN_IF_ERROR(buffers[2].CopyToHost(got.data()));
      EXPECT_EQ(got.back(), 1.0f);
    }
    return absl::OkStatus();
  });
  ASSERT_TRUE(status.ok()) << status;
}

TEST(Nccl, MismatchedCallsFailNamingBothSides) {
  SKIP_WITHOUT_GPUS(2);
  absl::Status status = RunThreadRanks(NcclWorld(2), [](Communicator& world) -> absl::Status {
    Allocator gpu(&world.memory(), Device{DeviceType::kCUDA, world.gpu()});
    ASSIGN_OR_RETURN(Tensor t, Tensor::Empty({world.rank() == 0 ? 96 : 128}, DType::kF32, gpu));
    return world.AllReduce(t, ReduceOp::kSum);
  });
  ASSERT_FALSE(status.ok());
  EXPECT_TRUE(absl::StrContains(status.message(), "passed 96")) << status;
  EXPECT_TRUE(absl::StrContains(status.message(), "passed 128")) << status;
}

}  // namespace
}  // namespace tally::comm
