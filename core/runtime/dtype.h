// Element types of tensors and collective buffers.
//
// fp32 is the type every model computes in; bf16 has its storage type here so that buffers
// and collectives can carry it; i8 carries ZeRO++'s quantised blocks (core/parallel/zero/
// quantize.h); f64 and the other integers serve tests and bookkeeping.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <type_traits>

#include "absl/status/statusor.h"
#include "core/runtime/status_macros.h"

namespace tally {

enum class DType : uint8_t { kF32, kBF16, kF64, kI32, kI64, kI8 };

// Bytes per element.
constexpr size_t SizeOf(DType dtype) {
  switch (dtype) {
    case DType::kF32: return 4;
    case DType::kBF16: return 2;
    case DType::kF64: return 8;
    case DType::kI32: return 4;
    case DType::kI64: return 8;
    case DType::kI8: return 1;
  }
  return 0;
}
const char* Name(DType dtype);  // "f32", "bf16", ...
absl::StatusOr<DType> ParseDType(std::string_view name);

// bfloat16: the upper half of an IEEE fp32, rounded to nearest even.
struct BFloat16 {
  uint16_t bits = 0;

  // Written without a branch, so that loops storing bf16 vectorise.
  static BFloat16 FromFloat(float value) {
    uint32_t u;
    std::memcpy(&u, &value, sizeof(u));
    const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    const uint32_t nan = (u >> 16) | 0x40u;  // a NaN stays a NaN, made quiet
    return BFloat16{uint16_t((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded)};
  }
  float ToFloat() const {
    uint32_t u = uint32_t(bits) << 16;
    float value;
    std::memcpy(&value, &u, sizeof(value));
    return value;
  }
};

// A stored value as fp32: a bf16 widened (exactly), a float as it is.
inline float AsFloat(float value) { return value; }
inline float AsFloat(BFloat16 value) { return value.ToFloat(); }

// `value` as it is stored in a Y: rounded to nearest even for a BFloat16, else converted.
template <typename Y, typename V>
Y StoredAs(V value) {
  if constexpr (std::is_same_v<Y, BFloat16>) {
    return BFloat16::FromFloat(float(value));
  } else {
    return Y(value);
  }
}

// The DType of a C++ element type: DTypeOf<float>() == DType::kF32.
template <typename T>
constexpr DType DTypeOf();
template <> constexpr DType DTypeOf<float>() { return DType::kF32; }
template <> constexpr DType DTypeOf<BFloat16>() { return DType::kBF16; }
template <> constexpr DType DTypeOf<double>() { return DType::kF64; }
template <> constexpr DType DTypeOf<int32_t>() { return DType::kI32; }
template <> constexpr DType DTypeOf<int64_t>() { return DType::kI64; }
template <> constexpr DType DTypeOf<int8_t>() { return DType::kI8; }

// An address and the type of the values there: a buffer that is fp32 or bf16 by the
// precision (under mixed precision the activations a matmul reads are kept in bf16). A
// float* converts to one, so fp32 callers pass their pointers as they are.
struct TypedPtr {
  void* data = nullptr;
  DType type = DType::kF32;

  TypedPtr() = default;
  TypedPtr(void* p, DType t) : data(p), type(t) {}
  TypedPtr(float* p) : data(p) {}  // NOLINT(google-explicit-constructor)

  template <typename T>
  T* as() const {
    CHECK(DTypeOf<T>() == type) << "buffer is " << Name(type) << ", asked for "
                                << Name(DTypeOf<T>());
    return static_cast<T*>(data);
  }
  // The address `elements` values further on.
  TypedPtr operator+(int64_t elements) const {
    return {static_cast<char*>(data) + elements * int64_t(SizeOf(type)), type};
  }
};

struct ConstTypedPtr {
  const void* data = nullptr;
  DType type = DType::kF32;

  ConstTypedPtr() = default;
  ConstTypedPtr(const void* p, DType t) : data(p), type(t) {}
  ConstTypedPtr(const float* p) : data(p) {}  // NOLINT(google-explicit-constructor)
  ConstTypedPtr(TypedPtr p) : data(p.data), type(p.type) {}  // NOLINT(google-explicit-constructor)

  template <typename T>
  const T* as() const {
    CHECK(DTypeOf<T>() == type) << "buffer is " << Name(type) << ", asked for "
                                << Name(DTypeOf<T>());
    return static_cast<const T*>(data);
  }
  ConstTypedPtr operator+(int64_t elements) const {
    return {static_cast<const char*>(data) + elements * int64_t(SizeOf(type)), type};
  }
};

}  // namespace tally
