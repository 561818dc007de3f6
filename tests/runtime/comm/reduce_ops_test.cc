// Every reduce op (sum, avg, max, min, prod) and the non-f32 dtypes, through the three
// reducing collectives and both algorithms.
#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "core/runtime/comm/algorithms/partition.h"
#include "tests/runtime/comm/comm_test_util.h"

namespace tally::comm {
namespace {

using test_util::RunRanks;

// Rank r's element i: small values whose product over 4 ranks stays exact in fp32.
double Value(int r, int64_t i) { return double(1 + (r + i) % 3); }

double Expected(ReduceOp op, int p, int64_t i) {
  double acc = Value(0, i);
  for (int r = 1; r < p; ++r) {
    double v = Value(r, i);
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg: acc += v; break;
      case ReduceOp::kProd: acc *= v; break;
      case ReduceOp::kMax: acc = std::max(acc, v); break;
      case ReduceOp::kMin: acc = std::min(acc, v); break;
    }
  }
  return op == ReduceOp::kAvg ? acc / p : acc;
}

template <typename T>
absl::StatusOr<Tensor> Make(Communicator& comm, int64_t n, int r) {
  ASSIGN_OR_RETURN(Tensor t, Tensor::Empty({n}, DTypeOf<T>(), comm.allocator()));
  for (int64_t i = 0; i < n; ++i) t.data<T>()[i] = T(Value(r, i));
  return t;
}

template <typename T>
double At(const Tensor& t, int64_t i) {
  return double(t.data<T>()[i]);
}

class ReduceOpTest : public ::testing::TestWithParam<std::tuple<ReduceOp, Algorithm, int>> {};

TEST_P(ReduceOpTest, AllReduceReduceAndReduceScatterAgreeWithClosedForm) {
  auto [op, algorithm, p] = GetParam();
  const int64_t n = 11;
  absl::Status status = RunRanks(p, [&](Communicator& comm) -> absl::Status {
    int r = comm.rank();
    auto check = [&](const Tensor& t, int64_t offset, const char* what) -> absl::Status {
      for (int64_t i = 0; i < t.numel(); ++i) {
        double want = Expected(op, p, offset + i), got = At<float>(t, i);
        if (std::abs(got - want) > 1e-6 * std::abs(want)) {
          return absl::InternalError(absl::StrCat(what, " rank ", r, " element ", i, ": ", got,
                                                  " != ", want));
        }
      }
      return absl::OkStatus();
    };
    ASSIGN_OR_RETURN(Tensor data, Make<float>(comm, n, r));
    RETURN_IF_ERROR(comm.AllReduce(data, op, algorithm));
    RETURN_IF_ERROR(check(data, 0, "all_reduce"));

    ASSIGN_OR_RETURN(Tensor input, Make<float>(comm, n, r));
    ASSIGN_OR_RETURN(Tensor output, Tensor::Empty({n}, DType::kF32, comm.allocator()));
    RETURN_IF_ERROR(comm.Reduce(input, output, op, /*root=*/p - 1, algorithm));
    if (r == p - 1) RETURN_IF_ERROR(check(output, 0, "reduce"));

    Chunk own = ChunkOf(n, p, r);
    ASSIGN_OR_RETURN(Tensor shard, Tensor::Empty({own.count}, DType::kF32, comm.allocator()));
    RETURN_IF_ERROR(comm.ReduceScatter(input, shard, op, algorithm));
    return check(shard, own.offset, "reduce_scatter");
  });
  EXPECT_TRUE(status.ok()) << status;
}

std::string ReduceOpCaseName(
    const ::testing::TestParamInfo<std::tuple<ReduceOp, Algorithm, int>>& info) {
  return absl::StrCat(Name(std::get<0>(info.param)), "_", Name(std::get<1>(info.param)), "_",
                      std::get<2>(info.param), "ranks");
}

INSTANTIATE_TEST_SUITE_P(
    Ops, ReduceOpTest,
    ::testing::Combine(::testing::Values(ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax,
                                         ReduceOp::kMin, ReduceOp::kProd),
                       ::testing::Values(Algorithm::kRing, Algorithm::kNaive),
                       ::testing::Values(1, 3, 4)),
    ReduceOpCaseName);

// The other dtypes reduce with their own arithmetic: integer average truncates, bf16
// rounds once per addition.
TEST(ReduceDTypes, F64I32I64AndBF16AllReduce) {
  const int p = 3;
  const int64_t n = 10;
  absl::Status status = RunRanks(p, [&](Communicator& comm) -> absl::Status {
    int r = comm.rank();
    ASSIGN_OR_RETURN(Tensor f64, Make<double>(comm, n, r));
    ASSIGN_OR_RETURN(Tensor i32, Make<int32_t>(comm, n, r));
    ASSIGN_OR_RETURN(Tensor i64, Make<int64_t>(comm, n, r));
    ASSIGN_OR_RETURN(Tensor bf16, Tensor::Empty({n}, DType::kBF16, comm.allocator()));
    for (int64_t i = 0; i < n; ++i) bf16.data<BFloat16>()[i] = BFloat16::FromFloat(Value(r, i));
    RETURN_IF_ERROR(comm.AllReduce(f64, ReduceOp::kSum));
    RETURN_IF_ERROR(comm.AllReduce(i32, ReduceOp::kAvg, Algorithm::kNaive));
    RETURN_IF_ERROR(comm.AllReduce(i64, ReduceOp::kMax));
    RETURN_IF_ERROR(comm.AllReduce(bf16, ReduceOp::kSum));
    for (int64_t i = 0; i < n; ++i) {
      double sum = Expected(ReduceOp::kSum, p, i);
      if (At<double>(f64, i) != sum || At<int32_t>(i32, i) != int32_t(sum) / p ||
          At<int64_t>(i64, i) != Expected(ReduceOp::kMax, p, i) ||
          bf16.data<BFloat16>()[i].ToFloat() != float(sum)) {
        return absl::InternalError(absl::StrCat("rank ", r, " element ", i));
      }
    }
    return absl::OkStatus();
  });
  EXPECT_TRUE(status.ok()) << status;
}

}  // namespace
}  // namespace tally::comm
