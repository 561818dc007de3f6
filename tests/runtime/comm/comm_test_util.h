// Helpers for tests that run ranks as threads.
#pragma once

#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "core/runtime/comm/launch.h"
#include "core/runtime/status_macros.h"

namespace tally::comm::test_util {

// Runs `fn` on `n` thread ranks and returns the run's status.
inline absl::Status RunRanks(int n, const RankFunction& fn, CommOptions comm = {},
                        absl::Duration timeout = absl::Seconds(30)) {
  LaunchOptions options;
  options.world_size = n;
  options.timeout = timeout;
  options.comm = comm;
  return RunThreadRanks(options, fn);
}

// A 1-D f32 tensor with values f(i).
inline absl::StatusOr<Tensor> Filled(Communicator& comm, int64_t n,
                                     const std::function<float(int64_t)>& f) {
  ASSIGN_OR_RETURN(Tensor t, Tensor::Empty({n}, DType::kF32, comm.allocator()));
  float* p = t.data<float>();
  for (int64_t i = 0; i < n; ++i) p[i] = f(i);
  return t;
}

// Communicator options with an algorithm and a message piece size.
inline CommOptions Options(Algorithm algorithm, size_t max_chunk_bytes) {
  CommOptions options;
  options.algorithm = algorithm;
  options.max_chunk_bytes = max_chunk_bytes;
  return options;
}

}  // namespace tally::comm::test_util
