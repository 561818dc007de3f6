// Faults end in a Status on every rank, within the deadline; nothing hangs.
#include <algorithm>
#include <chrono>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "core/runtime/comm/transport/threads/threads_transport.h"
#include "core/runtime/cuda/cuda.h"
#include "tests/runtime/comm/comm_test_util.h"

namespace tally::comm {
namespace {

using test_util::Filled;
using test_util::RunRanks;

// A waiting thread rank wakes every slice to ask whether to give up. With many ranks a core
// those wake-ups would outnumber the messages, so the slice grows with the ranks a core,
// from kBaseSlice (up to 16 ranks a core) to kMaxSlice; spinning stops once ranks
// outnumber cores.
TEST(ThreadsWaitPolicy, SliceGrowsWithTheRanksACoreUpToItsMost) {
  using threads::Session;
  using threads::WaitPolicy;
  const int cores = int(std::max(1u, std::thread::hardware_concurrency()));
  auto policy = [](int ranks) { return Session(ranks, absl::Seconds(1)).wait_policy(); };
  EXPECT_EQ(policy(cores).slice, WaitPolicy::kBaseSlice);
  EXPECT_GT(policy(cores).spin, absl::ZeroDuration());
  EXPECT_EQ(policy(16 * cores).slice, WaitPolicy::kBaseSlice);
  EXPECT_EQ(policy(16 * cores).spin, absl::ZeroDuration());
  EXPECT_EQ(policy(64 * cores).slice, 4 * WaitPolicy::kBaseSlice);
  EXPECT_EQ(policy(1024 * cores).slice, WaitPolicy::kMaxSlice);
}

// Runs `fn` on p ranks and collects the status each rank returned.
struct Outcome {
  absl::Status run;
  std::vector<absl::Status> ranks;
  absl::Duration elapsed;
};

Outcome RunCollecting(int p, const RankFunction& fn, absl::Duration timeout = absl::Seconds(30),
                      Algorithm algorithm = Algorithm::kRing) {
  Outcome out;
  out.ranks.resize(p);
  absl::Time start = absl::Now();
  out.run = RunRanks(p, [&](Communicator& comm) {
    absl::Status s = fn(comm);
    out.ranks[comm.rank()] = s;
    return s;
  }, test_util::Options(algorithm, size_t(4) << 20), timeout);
  out.elapsed = absl::Now() - start;
  return out;
}

class MismatchTest : public ::testing::TestWithParam<Algorithm> {};

TEST_P(MismatchTest, CountMismatchNamesBothSidesOnEveryRank) {
  Outcome out = RunCollecting(3, [](Communicator& comm) -> absl::Status {
    int64_t n = comm.rank() == 2 ? 96 : 128;
    ASSIGN_OR_RETURN(Tensor t, Filled(comm, n, [](int64_t) { return 1.0f; }));
    return comm.AllReduce(t, ReduceOp::kSum);
  }, absl::Seconds(30), GetParam());
  EXPECT_FALSE(out.run.ok());
  for (int r = 0; r < 3; ++r) {
    SCOPED_TRACE(r);
    const absl::Status& s = out.ranks[r];
    EXPECT_FALSE(s.ok());
    EXPECT_TRUE(absl::StrContains(s.message(), "[AllReduce on 'world']")) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "passed 96")) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "passed 128")) << s;
  }
  EXPECT_LT(out.elapsed, absl::Seconds(5));
}

TEST_P(MismatchTest, PrimitiveRootAndDTypeMismatches) {
  struct Case {
    const char* want;
    std::function<absl::Status(Communicator&)> fn;
  };
  std::vector<Case> cases = {
      {"called AllGather", [](Communicator& comm) -> absl::Status {
         ASSIGN_OR_RETURN(Tensor t, Filled(comm, 8, [](int64_t) { return 1.0f; }));
         if (comm.rank() != 1) return comm.AllReduce(t, ReduceOp::kSum);
         ASSIGN_OR_RETURN(Tensor part, Filled(comm, 4, [](int64_t) { return 1.0f; }));
         return comm.AllGather(part, t);
       }},
      {"passed root", [](Communicator& comm) -> absl::Status {
         ASSIGN_OR_RETURN(Tensor t, Filled(comm, 8, [](int64_t) { return 1.0f; }));
         return comm.Broadcast(t, comm.rank() == 0 ? 0 : 1);
       }},
      {"passed dtype", [](Communicator& comm) -> absl::Status {
         DType dtype = comm.rank() == 0 ? DType::kF32 : DType::kI32;
         ASSIGN_OR_RETURN(Tensor t, Tensor::Empty({8}, dtype, comm.allocator()));
         return comm.AllReduce(t, ReduceOp::kSum);
       }},
      {"passed reduce op", [](Communicator& comm) -> absl::Status {
         ASSIGN_OR_RETURN(Tensor t, Filled(comm, 8, [](int64_t) { return 1.0f; }));
         return comm.AllReduce(t, comm.rank() == 0 ? ReduceOp::kSum : ReduceOp::kMax);
       }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.want);
    Outcome out = RunCollecting(2, c.fn, absl::Seconds(30), GetParam());
    for (const absl::Status& s : out.ranks) {
      EXPECT_FALSE(s.ok());
      EXPECT_TRUE(absl::StrContains(s.message(), c.want)) << s;
      EXPECT_TRUE(absl::StrContains(s.message(), "rank 0") && absl::StrContains(s.message(), "rank 1"))
          << s;
    }
    EXPECT_LT(out.elapsed, absl::Seconds(5));
  }
}

TEST_P(MismatchTest, AlgorithmMismatch) {
  Outcome out = RunCollecting(2, [](Communicator& comm) -> absl::Status {
    ASSIGN_OR_RETURN(Tensor t, Filled(comm, 8, [](int64_t) { return 1.0f; }));
    return comm.AllReduce(t, ReduceOp::kSum, comm.rank() == 0 ? Algorithm::kRing : Algorithm::kNaive);
  }, absl::Seconds(30), GetParam());
  for (const absl::Status& s : out.ranks) {
    EXPECT_TRUE(absl::StrContains(s.message(), "uses algorithm")) << s;
  }
}

std::string AlgorithmName(const ::testing::TestParamInfo<Algorithm>& info) {
  return Name(info.param);
}

INSTANTIATE_TEST_SUITE_P(Algorithms, MismatchTest,
                         ::testing::Values(Algorithm::kRing, Algorithm::kNaive),
                         AlgorithmName);

TEST(Faults, SkippedCallIsCaughtBySequenceNumber) {
  Outcome out = RunCollecting(2, [](Communicator& comm) -> absl::Status {
    ASSIGN_OR_RETURN(Tensor t, Filled(comm, 8, [](int64_t) { return 1.0f; }));
    if (comm.rank() == 0) RETURN_IF_ERROR(comm.Broadcast(t, 0));
    return comm.AllReduce(t, ReduceOp::kSum);
  });
  for (const absl::Status& s : out.ranks) {
    EXPECT_FALSE(s.ok());
  }
  EXPECT_LT(out.elapsed, absl::Seconds(5));
}

TEST(Faults, DeadlineEndsAWaitForAPeerThatNeverComes) {
  Outcome out = RunCollecting(2, [](Communicator& comm) -> absl::Status {
    ASSIGN_OR_RETURN(Tensor t, Filled(comm, 8, [](int64_t) { return 1.0f; }));
    if (comm.rank() == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // busy elsewhere
    }
    return comm.AllReduce(t, ReduceOp::kSum);
  }, absl::Milliseconds(300));
  EXPECT_EQ(out.ranks[0].code(), absl::StatusCode::kDeadlineExceeded) << out.ranks[0];
  EXPECT_TRUE(absl::StrContains(out.ranks[0].message(), "for rank 1")) << out.ranks[0];
  EXPECT_FALSE(out.ranks[1].ok());  // it arrives to find the run aborted
  EXPECT_EQ(out.run.code(), absl::StatusCode::kDeadlineExceeded);
}

TEST(Faults, AFailingRankAbortsTheOthersWithItsName) {
  Outcome out = RunCollecting(4, [](Communicator& comm) -> absl::Status {
    if (comm.rank() == 2) return absl::InternalError("out of coffee");
    ASSIGN_OR_RETURN(Tensor t, Filled(comm, 1000, [](int64_t) { return 1.0f; }));
    return comm.AllReduce(t, ReduceOp::kSum);
  });
  EXPECT_TRUE(absl::StrContains(out.run.message(), "rank 2 failed: out of coffee")) << out.run;
  for (int r : {0, 1, 3}) {
    EXPECT_TRUE(absl::StrContains(out.ranks[r].message(), "rank 2 failed")) << out.ranks[r];
  }
  EXPECT_LT(out.elapsed, absl::Seconds(5));
}

TEST(Faults, AThrowingRankAbortsTheOthers) {
  absl::Status run = RunRanks(3, [](Communicator& comm) -> absl::Status {
    if (comm.rank() == 0) throw std::runtime_error("kaboom");
    ASSIGN_OR_RETURN(Tensor t, Filled(comm, 10, [](int64_t) { return 1.0f; }));
    return comm.AllReduce(t, ReduceOp::kSum, Algorithm::kNaive);
  });
  EXPECT_TRUE(absl::StrContains(run.message(), "rank 0 failed: threw an exception: kaboom")) << run;
}

TEST(Faults, WaitingForARankThatReturnedFailsAtOnce) {
  Outcome out = RunCollecting(2, [](Communicator& comm) -> absl::Status {
    if (comm.rank() == 0) return absl::OkStatus();  // forgets its part
    ASSIGN_OR_RETURN(Tensor t, Filled(comm, 10, [](int64_t) { return 1.0f; }));
    return comm.Recv(t, 0);
  });
  EXPECT_TRUE(out.ranks[0].ok());
  EXPECT_TRUE(absl::StrContains(out.ranks[1].message(), "has already returned")) << out.ranks[1];
  EXPECT_LT(out.elapsed, absl::Seconds(5));
}

// The same faults end a non-blocking collective's wait, which runs on the communication
// thread: a failing rank, and a peer that never comes before the deadline.
TEST(Faults, ANonBlockingCallEndsWithTheRunsFault) {
  Outcome failing = RunCollecting(3, [](Communicator& comm) -> absl::Status {
    if (comm.rank() == 1) return absl::InternalError("out of tea");
    ASSIGN_OR_RETURN(Tensor t, Filled(comm, 1000, [](int64_t) { return 1.0f; }));
    ASSIGN_OR_RETURN(auto work, comm.IAllReduce(t, ReduceOp::kSum));
    return work->Wait();
  });
  for (int r : {0, 2}) {
    EXPECT_TRUE(absl::StrContains(failing.ranks[r].message(), "rank 1 failed")) << failing.ranks[r];
  }
  EXPECT_LT(failing.elapsed, absl::Seconds(5));
  Outcome late = RunCollecting(2, [](Communicator& comm) -> absl::Status {
    ASSIGN_OR_RETURN(Tensor t, Filled(comm, 8, [](int64_t) { return 1.0f; }));
    if (comm.rank() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    ASSIGN_OR_RETURN(auto work, comm.IAllReduce(t, ReduceOp::kSum));
    return work->Wait();
  }, absl::Milliseconds(300));
  EXPECT_EQ(late.ranks[0].code(), absl::StatusCode::kDeadlineExceeded) << late.ranks[0];
  EXPECT_FALSE(late.ranks[1].ok());
}

TEST(Faults, BadArgumentsAreStatusesNotCrashes) {
  absl::Status run = RunRanks(2, [](Communicator& comm) -> absl::Status {
    ASSIGN_OR_RETURN(Tensor t, Filled(comm, 10, [](int64_t) { return 1.0f; }));
    absl::Status root = comm.Broadcast(t, 7);
    if (!absl::StrContains(root.message(), "root 7 is not a rank")) return absl::InternalError("root");
    ASSIGN_OR_RETURN(Tensor small, Filled(comm, 3, [](int64_t) { return 1.0f; }));
    absl::Status shard = comm.ReduceScatter(t, small, ReduceOp::kSum);
    if (!absl::StrContains(shard.message(), "output has 3 elements, expected 5")) {
      return absl::InternalError(std::string(shard.message()));
    }
    absl::Status peer = comm.Send(t, 5);
    if (!absl::StrContains(peer.message(), "cannot exchange with rank 5")) {
      return absl::InternalError(std::string(peer.message()));
    }
    return absl::OkStatus();
  });
  EXPECT_TRUE(run.ok()) << run;
}

// GPU buffers reach the transport as such: ranks that pass host memory and GPU memory
// to one call fail naming both sides, and without a GPU (or without CUDA in the build)
// moving them is the CUDA error, not a crash. The buffers are views whose pointers the
// transport never touches here: the mismatch is found first, the CUDA call fails first.
TEST(Faults, GpuBuffersOnAMachineWithoutAGpuAreClearErrors) {
  std::vector<float> host(8, 1.0f);
  Outcome mixed = RunCollecting(2, [&](Communicator& comm) -> absl::Status {
    Device device = comm.rank() == 1 ? Device{DeviceType::kCUDA, 0} : Device::CPU();
    Tensor t = Tensor::Borrow(host.data() + 4 * comm.rank(), 4, device);
    return comm.AllReduce(t, ReduceOp::kSum);
  });
  EXPECT_TRUE(absl::StrContains(mixed.run.message(), "passed buffers in")) << mixed.run;
  EXPECT_TRUE(absl::StrContains(mixed.run.message(), "GPU memory")) << mixed.run;

  if (cuda::DeviceCount().ok()) GTEST_SKIP() << "a GPU is here: cuda_train_test moves its memory";
  Outcome gpu = RunCollecting(2, [&](Communicator& comm) -> absl::Status {
    Tensor t = Tensor::Borrow(host.data() + 4 * comm.rank(), 4, Device{DeviceType::kCUDA, 0});
    return comm.AllReduce(t, ReduceOp::kSum);
  });
  EXPECT_TRUE(absl::StrContains(gpu.run.message(), "[cuda] ")) << gpu.run;
}

TEST(Faults, LaunchRejectsBadWorldSize) {
  absl::Status s = RunRanks(0, [](Communicator&) { return absl::OkStatus(); });
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tally::comm
