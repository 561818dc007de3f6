#include "core/runtime/comm/algorithms/reduce.h"

#include <algorithm>
#include <type_traits>

#include "core/runtime/kernels/cpu/convert.h"

namespace tally::comm {
namespace {

// The loops are written so that the compiler vectorises them: restrict pointers, one
// operation per loop, no branches inside.
template <typename T, typename Combine>
void ReduceLoop(T* __restrict dst, const T* __restrict src, int64_t count, Combine combine) {
  for (int64_t i = 0; i < count; ++i) dst[i] = combine(dst[i], src[i]);
}

template <typename T>
void ReduceTyped(T* dst, const T* src, int64_t count, ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      // The sum every reducing collective runs: at the CPU's width (convert.h).
      if constexpr (std::is_same_v<T, float>) return cpu::Accumulate(dst, src, count);
      return ReduceLoop(dst, src, count, [](T a, T b) { return a + b; });
    case ReduceOp::kProd:
      return ReduceLoop(dst, src, count, [](T a, T b) { return a * b; });
    case ReduceOp::kMax:
      return ReduceLoop(dst, src, count, [](T a, T b) { return std::max(a, b); });
    case ReduceOp::kMin:
      return ReduceLoop(dst, src, count, [](T a, T b) { return std::min(a, b); });
  }
}

// bf16 reduces in fp32 and rounds once per element.
void ReduceBF16(BFloat16* dst, const BFloat16* src, int64_t count, ReduceOp op) {
  if (op == ReduceOp::kSum || op == ReduceOp::kAvg) return cpu::Accumulate(dst, src, count);
  for (int64_t i = 0; i < count; ++i) {
    float a = dst[i].ToFloat(), b = src[i].ToFloat();
    float r = 0;
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg: r = a + b; break;
      case ReduceOp::kProd: r = a * b; break;
      case ReduceOp::kMax: r = std::max(a, b); break;
      case ReduceOp::kMin: r = std::min(a, b); break;
    }
    dst[i] = BFloat16::FromFloat(r);
  }
}

template <typename T>
void DivideTyped(T* data, int64_t count, int divisor) {
  for (int64_t i = 0; i < count; ++i) data[i] = data[i] / T(divisor);
}

}  // namespace

void ReduceInto(void* dst, const void* src, int64_t count, DType dtype, ReduceOp op) {
  switch (dtype) {
    case DType::kF32:
      return ReduceTyped(static_cast<float*>(dst), static_cast<const float*>(src), count, op);
    case DType::kF64:
      return ReduceTyped(static_cast<double*>(dst), static_cast<const double*>(src), count, op);
    case DType::kI32:
      return ReduceTyped(static_cast<int32_t*>(dst), static_cast<const int32_t*>(src), count, op);
    case DType::kI64:
      return ReduceTyped(static_cast<int64_t*>(dst), static_cast<const int64_t*>(src), count, op);
    case DType::kI8:
      return ReduceTyped(static_cast<int8_t*>(dst), static_cast<const int8_t*>(src), count, op);
    case DType::kBF16:
      return ReduceBF16(static_cast<BFloat16*>(dst), static_cast<const BFloat16*>(src), count, op);
  }
}

void FinishAverage(void* data, int64_t count, DType dtype, int divisor) {
  switch (dtype) {
    case DType::kF32: return DivideTyped(static_cast<float*>(data), count, divisor);
    case DType::kF64: return DivideTyped(static_cast<double*>(data), count, divisor);
    case DType::kI32: return DivideTyped(static_cast<int32_t*>(data), count, divisor);
    case DType::kI64: return DivideTyped(static_cast<int64_t*>(data), count, divisor);
    case DType::kI8: return DivideTyped(static_cast<int8_t*>(data), count, divisor);
    case DType::kBF16: {
      auto* p = static_cast<BFloat16*>(data);
      for (int64_t i = 0; i < count; ++i) p[i] = BFloat16::FromFloat(p[i].ToFloat() / divisor);
      return;
    }
  }
}

}  // namespace tally::comm
