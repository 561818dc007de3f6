// The CPU kernels' intra-op threads: a loop over [0, n) cut into one contiguous block per
// thread, on the OpenMP team oneDNN's matmuls run on (the count SetBlasThreads set), so a
// kernel's threads and the matmul's are the same threads and never oversubscribe the cores.
//
// Every kernel that uses it gives each item (a row, a column, an element, a head) the same
// arithmetic whatever the block it falls in: results do not depend on the thread count, and
// are bit-identical to one thread's. A sum across items (a bias gradient over rows) is cut by
// columns instead, each column still summed over the rows in order.
#pragma once

#include <cstdint>

#include "absl/functional/function_ref.h"

namespace tally::cpu {

// The intra-op threads every rank of the process uses (at least 1; 1 under ThreadSanitizer,
// whose builds cannot see into the OpenMP runtime). SetBlasThreads (gemm.h) sets it.
void SetIntraOpThreads(int threads);
int IntraOpThreads();
// Gives the calling thread's OpenMP team that size (OpenMP's count belongs to each calling
// thread: every rank's thread takes the process's figure before its matmul or loop).
void UseIntraOpThreads();

// body(begin, end) over blocks covering [0, n) once, each at least `grain` items long (all of
// [0, n) on the calling thread when n < 2·grain or there is one thread). Blocks run
// concurrently: body must write only what its items own.
void ParallelFor(int64_t n, int64_t grain, absl::FunctionRef<void(int64_t, int64_t)> body);

// A grain for loops whose items are `cost` floats of work each: about 16 Ki floats a block,
// below which a thread's start costs more than it saves.
inline int64_t GrainFor(int64_t cost) {
  return cost >= (int64_t(1) << 14) ? 1 : (int64_t(1) << 14) / (cost < 1 ? 1 : cost);
}

}  // namespace tally::cpu
