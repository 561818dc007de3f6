// --grad_compression: how data parallelism's gradient sum is compressed (--zero=0 only).
//   none          the all-reduce of the gradients as they are (data_parallel.h)
//   powersgd      low-rank P and Q of each matrix (powersgd.h)
//   onebit_adam   the optimizer's momentum, one bit a value (onebit_adam.h)
// Each sends plainly for its warm-up steps first.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace tally::parallel {

enum class GradCompression : uint8_t { kNone, kPowerSgd, kOneBitAdam };

inline const char* Name(GradCompression c) {
  switch (c) {
    case GradCompression::kPowerSgd: return "powersgd";
    case GradCompression::kOneBitAdam: return "onebit_adam";
    default: return "none";
  }
}

inline absl::StatusOr<GradCompression> ParseGradCompression(std::string_view name) {
  for (GradCompression c :
       {GradCompression::kNone, GradCompression::kPowerSgd, GradCompression::kOneBitAdam}) {
    if (name == Name(c)) return c;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("[flags] --grad_compression must be none, powersgd or onebit_adam, got '",
                   std::string(name), "'"));
}

}  // namespace tally::parallel
