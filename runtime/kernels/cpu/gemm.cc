#include "runtime/kernels/cpu/gemm.h"

namespace tally::cpu {

void SetBlasThreads(int threads) { openblas_set_num_threads(threads < 1 ? 1 : threads); }

}  // namespace tally::cpu
