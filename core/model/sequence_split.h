// How the model's sequence may be split over ranks (context parallelism,
// core/parallel/context_parallel.h): which positions of each sequence this rank's rows are,
// and attention, the one layer that mixes positions, over the whole sequence from them.
// The model calls only this interface; without one (null) every rank holds every position
// and attention is the kernels'.
//
// With a split of N ranks the model's b sequences are b·(T/N) rows on each rank: its
// tokens and targets are those rows (the caller cuts them), the position table is read at
// the rows' positions, and each layer keeps Kept(b, ·) values for attention's backward
// where serial attention keeps its probabilities (BlockActivations::att). A mixture of
// experts routes each rank's rows, and sums the statistics of its load-balancing loss
// over the split (SumOverSequence), so that the loss is the whole micro-batch's.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace tally::model {

// Positions start .. start + length − 1 of a sequence.
struct PositionRun {
  int start = 0;
  int length = 0;
};

// The rows of `runs` of each of b sequences of t ids: whole (b, t) -> mine (b, Σ lengths).
inline void TakePositions(const std::vector<PositionRun>& runs, const int32_t* whole, int b, int t,
                          int32_t* mine) {
  for (int i = 0; i < b; ++i) {
    for (const PositionRun& run : runs) {
      const int32_t* from = whole + int64_t(i) * t + run.start;
      mine = std::copy(from, from + run.length, mine);
    }
  }
}

class SequenceSplit {
 public:
  virtual ~SequenceSplit() = default;

  // Ranks that share each sequence.
  virtual int size() const = 0;
  // This rank's positions of every sequence, in the order of its rows (T/N in all).
  virtual std::vector<PositionRun> positions() const = 0;
  // Values a layer keeps for attention's backward, for b sequences of c channels and nh
  // heads on this rank.
  virtual int64_t Kept(int b, int c, int nh) const = 0;
  // Causal attention of this rank's rows: qkv (b·T/N, 3c) fused ([q | k | v]) -> y
  // (b·T/N, c), writing `kept`; every pointer on the CPU (or, in a dry run, the meta
  // device: no values). `scope` names its collectives.
  virtual absl::Status AttentionForward(float* y, float* kept, const float* qkv, int b, int c,
                                        int nh, const std::string& scope) const = 0;
  // dy -> dqkv (written whole), from the forward's qkv, y and kept.
  virtual absl::Status AttentionBackward(float* dqkv, const float* dy, const float* qkv,
                                         const float* y, const float* kept, int b, int c, int nh,
                                         const std::string& scope) const = 0;
  // `values` (n doubles on the host) summed over the ranks that share each sequence, in
  // place: what a layer reads of the whole sequences, not of this rank's rows (the
  // router's statistics for the load-balancing loss, moe.h).
  virtual absl::Status SumOverSequence(double* values, int64_t n,
                                       const std::string& scope) const = 0;
};

}  // namespace tally::model
