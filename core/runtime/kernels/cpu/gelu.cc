#include "core/runtime/kernels/cpu/gelu.h"

#include "core/runtime/kernels/cpu/cpu_clones.h"
#include "core/runtime/kernels/cpu/fast_math.h"
#include "core/runtime/kernels/cpu/parallel.h"
#include "core/runtime/kernels/cpu/store.h"

namespace tally::cpu {
namespace {

constexpr double kSqrt2OverPi = 0.7978845608028654;
constexpr double kCubic = 0.044715;

// Always inlined, so that each clone below compiles the loop for its own target.
template <typename T, typename Y>
[[gnu::always_inline]] inline void Forward(Y* y, const T* x, long n) {
  StoreEach(y, n, [x](long i) {
    T u = T(kSqrt2OverPi) * (x[i] + T(kCubic) * x[i] * x[i] * x[i]);
    return T(0.5) * x[i] * (T(1) + FastTanh(u));
  });
}

template <typename T>
[[gnu::always_inline]] inline void Backward(T* dx, const T* x, const T* dy, long n) {
  StoreEach(dx, n, [x, dy](long i) {
    T xi = x[i];
    T u = T(kSqrt2OverPi) * (xi + T(kCubic) * xi * xi * xi);
    T th = FastTanh(u);
    T sech2 = T(1) - th * th;
    T du = T(kSqrt2OverPi) * (T(1) + T(3 * kCubic) * xi * xi);
    return (T(0.5) * (T(1) + th) + T(0.5) * xi * sech2 * du) * dy[i];
  });
}

// The float versions (the training path) are compiled for AVX-512, for AVX2 and for the
// baseline (cpu_clones.h), and run on the intra-op threads, a block of elements each.
TALLY_CPU_CLONES void ForwardBlock(float* y, const float* x, long n) { Forward(y, x, n); }
TALLY_CPU_CLONES void ForwardBlock(BFloat16* y, const float* x, long n) { Forward(y, x, n); }
TALLY_CPU_CLONES void BackwardBlock(float* dx, const float* x, const float* dy, long n) {
  Backward(dx, x, dy, n);
}

}  // namespace

void GeluForward(float* y, const float* x, long n) {
  ParallelFor(n, GrainFor(8), [&](int64_t i, int64_t end) { ForwardBlock(y + i, x + i, end - i); });
}
void GeluForward(BFloat16* y, const float* x, long n) {
  ParallelFor(n, GrainFor(8), [&](int64_t i, int64_t end) { ForwardBlock(y + i, x + i, end - i); });
}
void GeluBackward(float* dx, const float* x, const float* dy, long n) {
  ParallelFor(n, GrainFor(8),
              [&](int64_t i, int64_t end) { BackwardBlock(dx + i, x + i, dy + i, end - i); });
}
void GeluForward(double* y, const double* x, long n) { Forward(y, x, n); }
void GeluBackward(double* dx, const double* x, const double* dy, long n) { Backward(dx, x, dy, n); }

}  // namespace tally::cpu
