// Writing a loop's fp32 results to fp32 or bf16 outputs.
#pragma once

#include <algorithm>
#include <type_traits>

#include "core/runtime/dtype.h"
#include "core/runtime/kernels/cpu/convert.h"

namespace tally::cpu {

// y[j] = StoredAs<Y>(value(j)) for j < n, in tiles of 256. A bf16 y is written through an
// fp32 tile, computed and then rounded (Round, convert.h): one loop of mixed widths
// vectorises at half the width (GELU's and LayerNorm's bf16 outputs ran 1.2-1.8 times
// slower that way), and the rounding has an instruction of its own on some CPUs. Always
// inlined, so that a clone (cpu_clones.h) compiles it for its own target.
template <typename Y, typename F>
[[gnu::always_inline]] inline void StoreEach(Y* y, long n, F&& value) {
  constexpr long kTile = 256;
  for (long i = 0; i < n; i += kTile) {
    const int m = int(std::min(kTile, n - i));
    Y* to = y + i;
    if constexpr (std::is_same_v<Y, BFloat16>) {
      float tile[kTile];
      for (int j = 0; j < m; ++j) tile[j] = value(i + j);
      Round(to, tile, m);
    } else {
      for (int j = 0; j < m; ++j) to[j] = value(i + j);
    }
  }
}

}  // namespace tally::cpu
