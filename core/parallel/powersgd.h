// PowerSGD (Vogels et al., 2019; PyTorch DDP's powerSGD_hook): data parallelism's
// gradient sum, low-rank. After `warmup` steps of the plain all-reduce (data_parallel.h),
// each rank's gradient of every 2-D tensor, m × n, is sent as two thin matrices:
//
//   Δ = M + E              the rank's gradient plus its error from the step before
//   P = Δ·Q                m × r, Q the n × r of the step before (warm start)
//   P ← Σ_ranks P          all-reduce (scope powersgd_p)
//   P ← orthonormal(P)     Gram-Schmidt over its r columns, in order: each column less
//                          its projections on the columns before it, then divided by its
//                          norm (+ 1e-8); sums in double
//   Q_w = Δᵀ·P             n × r, this rank's
//   E = Δ − P·Q_wᵀ         the error kept for the next step: what this rank sent is P·Q_wᵀ,
//                          so sent + kept = Δ exactly as arithmetic, every step
//   Q ← Σ_ranks Q_w        all-reduce (scope powersgd_q)
//   M ← P·Qᵀ               the approximate sum every rank then updates with
//
// (PyTorch subtracts the ranks' mean P·Q̄ᵀ for its error; this is the paper's local form.)
// A tensor that is 1-D, or whose (m + n)·r ≥ m·n values would be no fewer than its own,
// is all-reduced whole, all of them packed in one call (scope powersgd_whole). Q starts as
// N(0, 1) from the run's seed (rng.h, stream "powersgd", the matrix's index), the same on
// every rank; E starts at zero. The sums are the ring's (or the run's --allreduce) in fp32.
//
// Bytes a rank sends a step after the warm-up, ring over p ranks, fp32:
//   2(p-1)/p · 4 · (W + Σ_matrices (m + n)·r)      W: the values sent whole
// against 2(p-1)/p · 4Φ for the plain sum: the calls are PowerSgdCalls.
//
// Memory (the optimizer's category, kept across steps): E, m·n a matrix, and Q, n·r; P
// and the packed sends are comm memory for the call.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "core/model/parameters.h"
#include "core/parallel/compression_error.h"
#include "core/parallel/grad_compression.h"
#include "core/parallel/seams.h"
#include "core/runtime/comm/algorithms/partition.h"
#include "core/runtime/comm/communicator.h"
#include "core/runtime/comm/ledger/expected_calls.h"
#include "core/runtime/tensor.h"

namespace tally::parallel {

// A tensor PowerSGD compresses: its place in the buffer and its m × n.
struct PowerSgdMatrix {
  int64_t offset = 0, rows = 0, cols = 0;
};
// The tensors of `layout` sent as P and Q at rank `rank`, in buffer order, and the ranges
// sent whole.
struct PowerSgdSplit {
  std::vector<PowerSgdMatrix> matrices;
  std::vector<comm::Chunk> whole;
  int64_t whole_values = 0, p_values = 0, q_values = 0;  // the three sends' counts
};
PowerSgdSplit SplitForPowerSgd(const model::ParameterLayout& layout, int rank);

// The calls of one compressed step over a group of `ranks` (rank `rank`), `element` bytes
// a value, in phase backward: the whole values', P's and Q's all-reduces.
comm::ExpectedCalls PowerSgdCalls(const PowerSgdSplit& split, const char* group, int ranks,
                                  int rank, std::vector<int> nodes = {});

class PowerSgd {
 public:
  // Q from `seed`; E and Q in `alloc` (the optimizer's category).
  static absl::StatusOr<std::unique_ptr<PowerSgd>> Create(comm::Communicator* dp,
                                                          const model::ParameterLayout& layout,
                                                          int rank, uint64_t seed,
                                                          comm::Algorithm algorithm,
                                                          Allocator& alloc);
  // Replaces `grads` (fp32, the whole buffer; the rank's own) with the approximate sum.
  absl::Status Reduce(const Tensor& grads);

  const PowerSgdSplit& split() const { return split_; }
  // The last Reduce's error (compression_error.h): Σ E² and Σ Δ² over the matrices, the
  // values sent whole adding their squares to `value` only.
  const ErrorSums& error_sums() const { return error_sums_; }
  // The error kept for a matrix (tests): m·n values at E's offset of matrix i.
  Tensor error(size_t i) const;
  Tensor q(size_t i) const;
  // What a checkpoint keeps (core/train/checkpoints.cc): E and Q, every matrix's, by name.
  std::vector<std::pair<std::string, Tensor*>> State() {
    return {{"powersgd.error", &error_}, {"powersgd.q", &q_}};
  }

 private:
  PowerSgd(comm::Communicator* dp, PowerSgdSplit split, int rank, comm::Algorithm algorithm)
      : dp_(dp), split_(std::move(split)), rank_(rank), algorithm_(algorithm) {}

  comm::Communicator* dp_;
  const PowerSgdSplit split_;
  const int rank_;
  const comm::Algorithm algorithm_;
  Tensor error_, q_;                          // every matrix's, packed in order
  std::vector<int64_t> error_at_, q_at_, p_at_;  // each matrix's offset into them (and P's)
  ErrorSums error_sums_;
};

// PowerSGD as a replica's gradient hook (seams.h), from optimizer step `warmup`
// on: the low-rank sum over `dp` in place of the buckets', in phase backward.
class PowerSgdHook final : public GradientHook {
 public:
  PowerSgdHook(std::unique_ptr<PowerSgd> powersgd, comm::Communicator& dp, int64_t warmup)
      : powersgd_(std::move(powersgd)), dp_(dp), warmup_(warmup) {}

  bool Takes(int64_t steps) const override { return steps >= warmup_; }
  absl::Status Reduce(Tensor& grads) override;
  ErrorSums error_sums() const override { return powersgd_->error_sums(); }
  std::vector<std::pair<std::string, Tensor*>> State() override { return powersgd_->State(); }

 private:
  std::unique_ptr<PowerSgd> powersgd_;
  comm::Communicator& dp_;
  const int64_t warmup_;
};

}  // namespace tally::parallel
