// Element types of tensors and collective buffers.
//
// fp32 is the type every model computes in; bf16 has its storage type here so that buffers
// and collectives can carry it; f64 and the integers serve tests and bookkeeping.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "absl/status/statusor.h"

namespace tally {

enum class DType : uint8_t { kF32, kBF16, kF64, kI32, kI64 };

// Bytes per element.
size_t SizeOf(DType dtype);
const char* Name(DType dtype);  // "f32", "bf16", ...
absl::StatusOr<DType> ParseDType(std::string_view name);

// bfloat16: the upper half of an IEEE fp32, rounded to nearest even.
struct BFloat16 {
  uint16_t bits = 0;

  static BFloat16 FromFloat(float value) {
    uint32_t u;
    std::memcpy(&u, &value, sizeof(u));
    if ((u & 0x7fffffffu) > 0x7f800000u) return BFloat16{uint16_t((u >> 16) | 0x40)};  // NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    return BFloat16{uint16_t(u >> 16)};
  }
  float ToFloat() const {
    uint32_t u = uint32_t(bits) << 16;
    float value;
    std::memcpy(&value, &u, sizeof(value));
    return value;
  }
};

// The DType of a C++ element type: DTypeOf<float>() == DType::kF32.
template <typename T>
constexpr DType DTypeOf();
template <> constexpr DType DTypeOf<float>() { return DType::kF32; }
template <> constexpr DType DTypeOf<BFloat16>() { return DType::kBF16; }
template <> constexpr DType DTypeOf<double>() { return DType::kF64; }
template <> constexpr DType DTypeOf<int32_t>() { return DType::kI32; }
template <> constexpr DType DTypeOf<int64_t>() { return DType::kI64; }

}  // namespace tally
