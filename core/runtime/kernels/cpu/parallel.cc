#include "core/runtime/kernels/cpu/parallel.h"

#include <omp.h>

#include <algorithm>
#include <atomic>

namespace tally::cpu {
namespace {

std::atomic<int> intra_op_threads{1};

}  // namespace

void SetIntraOpThreads(int threads) {
#if defined(__SANITIZE_THREAD__)
  threads = 1;
#endif
  intra_op_threads.store(std::max(1, threads), std::memory_order_relaxed);
}

int IntraOpThreads() { return intra_op_threads.load(std::memory_order_relaxed); }

void UseIntraOpThreads() {
  thread_local int current = 0;
  const int wanted = IntraOpThreads();
  if (current != wanted) {
    omp_set_num_threads(wanted);
    current = wanted;
  }
}

void ParallelFor(int64_t n, int64_t grain, absl::FunctionRef<void(int64_t, int64_t)> body) {
  if (n <= 0) return;
  const int64_t blocks = std::min<int64_t>(IntraOpThreads(), n / std::max<int64_t>(1, grain));
  if (blocks <= 1 || omp_in_parallel()) {
    body(0, n);
    return;
  }
#pragma omp parallel for schedule(static, 1) num_threads(static_cast<int>(blocks))
  for (int64_t i = 0; i < blocks; ++i) body(n * i / blocks, n * (i + 1) / blocks);
}

}  // namespace tally::cpu
