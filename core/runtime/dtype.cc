#include "core/runtime/dtype.h"

#include <string>

namespace tally {

const char* Name(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "f32";
    case DType::kBF16: return "bf16";
    case DType::kF64: return "f64";
    case DType::kI32: return "i32";
    case DType::kI64: return "i64";
    case DType::kI8: return "i8";
  }
  return "?";
}

absl::StatusOr<DType> ParseDType(std::string_view name) {
  for (DType d : {DType::kF32, DType::kBF16, DType::kF64, DType::kI32, DType::kI64, DType::kI8}) {
    if (name == Name(d)) return d;
  }
  return absl::InvalidArgumentError("[dtype] unknown dtype '" + std::string(name) +
                                    "'; expected f32, bf16, f64, i32, i64 or i8");
}

}  // namespace tally
