#include "runtime/kernels/cpu/linear.h"

#include "runtime/kernels/cpu/gemm.h"

namespace tally::cpu {

template <typename T>
void LinearForward(T* y, const T* x, const T* w, const T* b, int n, int c, int oc) {
  // Start every row from the bias, then let the GEMM add x·Wᵀ on top (beta = 1).
  for (int i = 0; i < n; ++i) {
    T* row = y + static_cast<long>(i) * oc;
    for (int o = 0; o < oc; ++o) row[o] = b != nullptr ? b[o] : T(0);
  }
  Gemm(Trans::kNo, Trans::kYes, n, oc, c, T(1), x, c, w, c, T(1), y, oc);
}

template <typename T>
void LinearBackward(T* dx, T* dw, T* db, const T* dy, const T* x, const T* w, int n, int c, int oc,
                    bool accumulate_dx) {
  if (dx != nullptr) {
    Gemm(Trans::kNo, Trans::kNo, n, c, oc, T(1), dy, oc, w, c, accumulate_dx ? T(1) : T(0), dx, c);
  }
  if (dw != nullptr) Gemm(Trans::kYes, Trans::kNo, oc, c, n, T(1), dy, oc, x, c, T(1), dw, c);
  if (db != nullptr) {
    for (int i = 0; i < n; ++i) {
      const T* row = dy + static_cast<long>(i) * oc;
      for (int o = 0; o < oc; ++o) db[o] += row[o];
    }
  }
}

template void LinearForward(float*, const float*, const float*, const float*, int, int, int);
template void LinearForward(double*, const double*, const double*, const double*, int, int, int);
template void LinearBackward(float*, float*, float*, const float*, const float*, const float*, int,
                             int, int, bool);
template void LinearBackward(double*, double*, double*, const double*, const double*,
                             const double*, int, int, int, bool);

}  // namespace tally::cpu
