// The report's and the replay's tests: work of a known size for a GPU of a known rate.
#pragma once

#include "core/runtime/timeline.h"

namespace tally::report {

// `flops` of matmuls in one call (a flat-rate GPU times them as FLOPs alone).
inline ComputeWork Flops(double flops) {
  ComputeWork w;
  w.AddMatmuls(flops, 0, 1);
  return w;
}

}  // namespace tally::report
