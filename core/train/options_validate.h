// What the options' checks share (options_validate.cc, options_validate_sharding.cc).
#pragma once

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace tally::train {

// A bad flag value's error: one line naming the flag, "[flags] --tp must be >= 1, got 0".
template <typename... Parts>
absl::Status Bad(const Parts&... parts) {
  return absl::InvalidArgumentError(absl::StrCat("[flags] ", parts...));
}

}  // namespace tally::train
