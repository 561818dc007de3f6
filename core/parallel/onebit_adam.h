// 1-bit Adam (Tang et al., 2021; DeepSpeed's OnebitAdam): data parallelism's sum, moved
// into the optimizer and cut to one bit a value. For the first `warmup` steps it is AdamW
// on the summed gradients (data_parallel.h), which estimates the variance v. Then v is
// frozen, the gradients are not summed, and each rank
//
//   g = p·g_r, clipped       its own estimate of the step's gradient: tally's g_r is the
//                            rank's share of the global mean's gradient (data_parallel.h),
//                            so p·g_r has the global gradient's scale; clipped by its own
//                            norm over tp and the stages (step_end.h)
//   m ← m + (1−β1)(g − m)    AdamW's momentum, of the rank's own g
//   m ← OneBitAverage(m)     the compressed average below, the same on every rank
//   p ← p·(1 − lr·wd) − lr/(1−β1^t) · m / (√v/√(1−β2^K) + eps)
//
// AdamW's update to the letter (core/optim/optimizer.h), with v and its bias correction frozen
// at K = warmup steps. (DeepSpeed's has no bias corrections and adds wd·p to the update;
// tally keeps AdamW's form in both phases, so the warm-up is the plain run bit for bit.)
//
// OneBitAverage, over p ranks, of n values zero-padded to N, the next multiple of 8p (so
// that each rank's chunk of c = N/p values is c/8 whole bytes):
//
//   1. y = m + e_w            e_w: the rank's worker error (N values, zero at first)
//      s = √(Σy²/N)           one scale a rank (Σ in double, then to float)
//      e_w ← y − s·sign(y)    sign(0) = +1
//   2. all-to-all of the sign bits: chunk j, c/8 bytes, to rank j     scope onebit_signs
//   3. all-gather of s (one float a rank)                             scope onebit_scales
//   4. on rank j, over its chunk:
//      z = (Σ_r s_r·sign_r) / p + e_s    the sum in float, in rank order; e_s: the server
//                                        error (c values, zero at first)
//      t = √(Σz²/c);  e_s ← z − t·sign(z)
//   5. all-gather of the server's sign bits (c/8 bytes a rank)         scope onebit_signs
//      and of t (one float a rank)                                     scope onebit_scales
//   6. m = t_j·sign(z_j) over chunk j, the padding dropped
//
// A sign bit: value i of a chunk is bit i mod 8 (least significant first) of its byte
// i / 8, set for +1. The calls run in phase optimizer, with the run's algorithm.
//
// A rank's buffer is averaged in parts (OneBitParts), each as above with its own scales
// and errors: a tensor held outside the dp group too (by every tp rank, or by a pipeline's
// first and last stage) must be compressed alike in all its copies, or they drift apart.
// Without tp and pp the one part is the whole buffer.
//
// Bytes a rank sends a step after the warm-up, ring, a part of N values (padded):
// 2(p−1)·N/(8p) + 2(p−1)·4, against 2(p−1)/p·4n for the fp32 all-reduce: about 32× fewer.
// The calls are OneBitAdamCalls. Memory (the optimizer's category), a part: e_w, N values,
// and e_s, N/p; y and z are formed in them. The call's (comm): the sent and received sign
// bits, N/8 bytes each, the server's N/(8p), and p + 1 scales.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "core/model/parameters.h"
#include "core/optim/optimizer.h"
#include "core/parallel/compression_error.h"
#include "core/parallel/seams.h"
#include "core/runtime/comm/algorithms/partition.h"
#include "core/runtime/comm/communicator.h"
#include "core/runtime/comm/ledger/expected_calls.h"
#include "core/runtime/tensor.h"

namespace tally::parallel {

// n values over `ranks` ranks: padded to N, a rank's chunk of N/p values and its bytes
// of signs.
struct OneBitShape {
  int64_t padded = 0, chunk = 0, chunk_bytes = 0;
};
OneBitShape OneBitShapeOf(int64_t count, int ranks);

// The calls of one compressed step of `count` values over a group of `ranks` (rank
// `rank`): the signs' all-to-all and all-gather, the scales' two all-gathers.
comm::ExpectedCalls OneBitAdamCalls(int64_t count, const char* group, int ranks, int rank,
                                    std::vector<int> nodes = {});

// A part of a rank's buffer that 1-bit Adam averages on its own: its ranges, in order.
struct OneBitPart {
  const char* name;  // "own", "replicated" or "tied"
  std::vector<comm::Chunk> ranges;
  int64_t count = 0;  // their values
};
// The parts of `layout`'s buffer, the empty ones left out: the tensors every tp rank holds
// whole (under tp: the LayerNorms, wpe, c_proj's biases), the tied embedding (under a
// pipeline: the first stage's wte and the last stage's copy), and the rest, the rank's own.
std::vector<OneBitPart> OneBitParts(const model::ParameterLayout& layout);
// One part of `count` values, the whole buffer (a model without a layout, or no tp and pp).
OneBitPart OneBitWhole(int64_t count);
// The calls of every part, in order; the memory of their errors in bytes.
comm::ExpectedCalls OneBitAdamCalls(const std::vector<OneBitPart>& parts, const char* group,
                                    int ranks, int rank, std::vector<int> nodes = {});
int64_t OneBitErrorBytes(const std::vector<OneBitPart>& parts, int ranks);

// OneBitAverage above, with its two errors.
class OneBitAverage {
 public:
  // e_w and e_s of `count` values over `group`'s ranks, in `alloc` (the optimizer's category).
  static absl::StatusOr<std::unique_ptr<OneBitAverage>> Create(comm::Communicator* group,
                                                               int64_t count,
                                                               comm::Algorithm algorithm,
                                                               Allocator& alloc);
  // Replaces `m` (fp32, `count` values) with the compressed average over the group.
  absl::Status Run(const Tensor& m) { return Run(m, {{0, m.numel()}}); }
  // The same over `ranges` of `m`, `count` values in all, as if they were one buffer.
  absl::Status Run(const Tensor& m, const std::vector<comm::Chunk>& ranges);

  // The last Run's error (compression_error.h): the worker's Σ(e_w)² and Σy² plus the
  // server's Σ(e_s)² and Σz².
  const ErrorSums& error_sums() const { return error_sums_; }
  const Tensor& worker_error() const { return worker_error_; }
  const Tensor& server_error() const { return server_error_; }
  // What a checkpoint keeps (core/train/checkpoints.cc): e_w and e_s.
  Tensor& worker_error() { return worker_error_; }
  Tensor& server_error() { return server_error_; }

 private:
  OneBitAverage(comm::Communicator* group, int64_t count, comm::Algorithm algorithm)
      : group_(group), count_(count), algorithm_(algorithm),
        shape_(OneBitShapeOf(count, group->size())) {}

  comm::Communicator* group_;
  const int64_t count_;
  const comm::Algorithm algorithm_;
  const OneBitShape shape_;
  Tensor worker_error_, server_error_;
  ErrorSums error_sums_;
};

// The optimizer: AdamW (its state, its name: a checkpoint sees AdamW) until step
// `warmup`, 1-bit Adam after it.
class OneBitAdam final : public optim::Optimizer {
 public:
  // `adam` must be an AdamW over the whole replica, cut in `parts` (OneBitParts; empty:
  // one part, the whole buffer).
  static absl::StatusOr<std::unique_ptr<OneBitAdam>> Create(std::unique_ptr<optim::Optimizer> adam,
                                                            comm::Communicator* dp,
                                                            int64_t warmup,
                                                            comm::Algorithm algorithm,
                                                            Allocator& alloc,
                                                            std::vector<OneBitPart> parts = {});

  using Optimizer::Step;
  // Past the warm-up, `grads` are the rank's own p·g_r (fp32).
  absl::Status Step(float* params, const void* grads, DType grad_type, float lr,
                    const std::vector<optim::Segment>& segments, float grad_scale) override;
  std::vector<std::pair<std::string, Tensor*>> State() override { return adam_->State(); }
  const char* name() const override { return adam_->name(); }

  // Whether the next step is compressed (its gradients then go unsummed).
  bool Compressing() const { return step() >= warmup_; }
  int64_t warmup() const { return warmup_; }
  // The last step's error: its parts' OneBitAverage's summed, or zeros in the warm-up.
  const ErrorSums& error_sums() const { return error_sums_; }
  // What a checkpoint keeps (core/train/checkpoints.cc): each part's two errors, by name
  // ("onebit_adam.<part>.worker_error", ".server_error").
  std::vector<std::pair<std::string, Tensor*>> CompressionState();

 private:
  OneBitAdam(std::unique_ptr<optim::AdamW> adam, int64_t warmup)
      : adam_(std::move(adam)), warmup_(warmup) {}

  std::unique_ptr<optim::AdamW> adam_;  // its step is this one's, set before each of its own
  const int64_t warmup_;
  std::vector<OneBitPart> parts_;
  std::vector<std::unique_ptr<OneBitAverage>> averages_;  // one a part
  ErrorSums error_sums_;
};

// 1-bit Adam's side of a replica's gradient hook (seams.h): past the warm-up the
// gradients go unsummed, each rank's own scaled by p = `ranks` (the dp group's) to its
// estimate of the step's (on the CPU); `adam`, the replica's optimizer, averages momentum.
class OneBitAdamHook final : public GradientHook {
 public:
  OneBitAdamHook(OneBitAdam& adam, int ranks) : adam_(adam), ranks_(ranks) {}

  bool Takes(int64_t steps) const override { return steps >= adam_.warmup(); }
  absl::Status Reduce(Tensor& grads) override;
  ErrorSums error_sums() const override { return adam_.error_sums(); }
  std::vector<std::pair<std::string, Tensor*>> State() override { return adam_.CompressionState(); }

 private:
  OneBitAdam& adam_;
  const int ranks_;
};

}  // namespace tally::parallel
