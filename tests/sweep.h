// The suite comes in two sizes. The Release build runs every grid of every sweep. The
// ThreadSanitizer build, whose runs are ten to twenty times slower, runs the small form
// (TALLY_TEST_FORM=small, its default): each sweep keeps its first grid, its last, and
// one in eight between, so that every mechanism a sweep covers (the simplest grid is
// first, the busiest last) still runs under the sanitizer, at about a fifth of the time.
// One rank on one thread gives the sanitizer nothing to watch: the small form leaves out
// the single-rank runs the grids are held to (kCompareWithSerial, tests/train/run_ranks.h)
// and the tests that run only one rank; the full form runs them.
//
//   INSTANTIATE_TEST_SUITE_P(Grids, ThreeDTest, ::testing::ValuesIn(Sweep<Grid>({...})));
//   for (const Grid& g : Sweep<Grid>({...})) { ... }
#pragma once

#include <cstddef>
#include <vector>

namespace tally {

#ifdef TALLY_SMALL_FORM
inline constexpr bool kSmallForm = true;
#else
inline constexpr bool kSmallForm = false;
#endif

// The small form keeps a sweep's grids 0, 8, 16, ... and its last.
inline constexpr std::size_t kSmallFormStride = 8;

template <typename T>
std::vector<T> Sweep(std::vector<T> grids) {
  if (!kSmallForm) return grids;
  std::vector<T> kept;
  for (std::size_t i = 0; i < grids.size(); ++i) {
    if (i % kSmallFormStride == 0 || i + 1 == grids.size()) kept.push_back(grids[i]);
  }
  return kept;
}

}  // namespace tally
