#include "runtime/kernels/cpu/gelu.h"

#include "runtime/kernels/cpu/fast_math.h"

namespace tally::cpu {
namespace {

constexpr double kSqrt2OverPi = 0.7978845608028654;
constexpr double kCubic = 0.044715;

}  // namespace

template <typename T>
void GeluForward(T* y, const T* x, long n) {
  for (long i = 0; i < n; ++i) {
    T u = T(kSqrt2OverPi) * (x[i] + T(kCubic) * x[i] * x[i] * x[i]);
    y[i] = T(0.5) * x[i] * (T(1) + FastTanh(u));
  }
}

template <typename T>
void GeluBackward(T* dx, const T* x, const T* dy, long n) {
  for (long i = 0; i < n; ++i) {
    T xi = x[i];
    T u = T(kSqrt2OverPi) * (xi + T(kCubic) * xi * xi * xi);
    T th = FastTanh(u);
    T sech2 = T(1) - th * th;
    T du = T(kSqrt2OverPi) * (T(1) + T(3 * kCubic) * xi * xi);
    dx[i] = (T(0.5) * (T(1) + th) + T(0.5) * xi * sech2 * du) * dy[i];
  }
}

template void GeluForward(float*, const float*, long);
template void GeluForward(double*, const double*, long);
template void GeluBackward(float*, const float*, const float*, long);
template void GeluBackward(double*, const double*, const double*, long);

}  // namespace tally::cpu
