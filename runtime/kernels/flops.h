// The FLOPs a rank's kernels count into its timeline (runtime/timeline.h), for a replay on
// a modelled cluster (train/replay.h): the matmuls, which every device's kernels count the
// same way whatever they run.
//
//   linear     2·n·C·OC forward, 4·n·C·OC backward (dx and dW)
//   attention  4·b·T²·C forward (Q·Kᵀ and the probabilities times V), 8·b·T²·C backward
#pragma once

#include "runtime/timeline.h"

namespace tally {

inline void CountLinearForward(int n, int c, int oc) { CountFlops(2.0 * n * c * double(oc)); }
inline void CountLinearBackward(int n, int c, int oc) { CountFlops(4.0 * n * c * double(oc)); }
inline void CountAttentionForward(int b, int t, int c) { CountFlops(4.0 * b * t * double(t) * c); }
inline void CountAttentionBackward(int b, int t, int c) { CountFlops(8.0 * b * t * double(t) * c); }

}  // namespace tally
