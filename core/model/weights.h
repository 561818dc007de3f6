// Where the model's parameters and gradients live, one unit at a time
// (ParameterLayout::units(): the embeddings, each layer, the final LayerNorm).
//
// The model asks for a unit's parameters just before it uses them and releases them right
// after; in backward it also opens the unit's gradients, adds into them, and closes them
// once they are final:
//
//   ASSIGN_OR_RETURN(float* w, weights.Params(unit));       // forward or backward
//   ASSIGN_OR_RETURN(float* g, weights.OpenGrads(unit));    // backward only
//   ... compute, adding into g ...
//   RETURN_IF_ERROR(weights.CloseGrads(unit));
//   RETURN_IF_ERROR(weights.ReleaseParams(unit));
//
// A replica (one rank, data parallelism) holds the whole buffers, so these calls are
// pointer arithmetic. ZeRO (core/parallel/zero/zero.h) shards them: ZeRO-2 reduce-scatters in
// CloseGrads, ZeRO-3 also all-gathers in Params. The model's code is the same for all.
//
// Under mixed precision (precision.h) a store keeps bf16 buffers and fp32 master weights:
// Params widens the unit into an fp32 working copy, OpenGrads hands out a zeroed fp32
// one, and CloseGrads adds it into the bf16 gradients, rounding once. The linears' weights
// enter the bf16 matmuls from the store's own buffer (Stored), not from the working copy.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/model/parameters.h"
#include "core/model/precision.h"
#include "core/runtime/kernels/kernels.h"
#include "core/runtime/tensor.h"

namespace tally::model {

class WeightStore {
 public:
  virtual ~WeightStore() = default;

  // The parameters of `unit` (its count() floats), valid until ReleaseParams(unit).
  virtual absl::StatusOr<float*> Params(int unit) = 0;
  // The same parameters as the store keeps them (bf16 under mixed precision, else the
  // floats Params handed out), valid as long as those. The linears' weights enter bf16
  // matmuls from here: Params' fp32 copy would be rounded back to these same values.
  virtual absl::StatusOr<ConstTypedPtr> Stored(int unit) = 0;
  virtual absl::Status ReleaseParams(int unit) = 0;
  // The gradients of `unit` for one backward, added into until CloseGrads(unit).
  virtual absl::StatusOr<float*> OpenGrads(int unit) = 0;
  virtual absl::Status CloseGrads(int unit) = 0;
  // Zeroes the accumulated gradients (the start of a step).
  virtual absl::Status ZeroGrad() = 0;
  // After a step's last backward, on a pipeline stage that holds a copy of the tied token
  // embedding: this rank's part of wte's gradients, which the first and the last stage
  // sum. Whole where the store holds whole gradients; a sharding store's own chunk.
  virtual absl::StatusOr<Tensor> TiedEmbeddingGrads() = 0;
};

// fp32 working copies of units (their bf16 parameters widened; not the master weights),
// by unit, while the model computes on them: what a store of bf16 buffers hands out.
// Charged to activations memory (they are the compute's operands, as a bf16 kernel's
// registers would be).
class WorkingCopies {
 public:
  WorkingCopies(Allocator& alloc, Kernels& kernels, size_t units)
      : alloc_(alloc), kernels_(kernels), copies_(units) {}

  // The unit's fp32 copy of `stored` (fp32 or bf16), made on the first call and kept
  // until Release.
  absl::StatusOr<float*> Widen(int unit, const Tensor& stored);
  // A zero-filled fp32 buffer of `count` elements for the unit, kept until Take.
  absl::StatusOr<float*> Zeroed(int unit, int64_t count);
  // The unit's copy, which this no longer holds (empty if none).
  Tensor Take(int unit);
  void Release(int unit) { copies_[unit] = Tensor(); }

 private:
  Allocator& alloc_;
  Kernels& kernels_;
  std::vector<Tensor> copies_;
};

// The whole parameter and gradient buffers, on this rank.
class Replica : public WeightStore {
 public:
  // Parameters initialised from `seed` (parameters.h), on the host and then copied to
  // the allocator's device; buffers of `precision`'s types (with master weights when the
  // parameters are bf16).
  static absl::StatusOr<std::unique_ptr<Replica>> Create(const ParameterLayout& layout,
                                                         uint64_t seed, Allocator& alloc,
                                                         const Precision& precision = {});

  absl::StatusOr<float*> Params(int unit) override;
  absl::StatusOr<ConstTypedPtr> Stored(int unit) override {
    const Tensor stored = Unit(params_, unit);
    return ConstTypedPtr(stored.raw_data(), stored.dtype());
  }
  absl::Status ReleaseParams(int unit) override;
  absl::StatusOr<float*> OpenGrads(int unit) override;
  absl::Status CloseGrads(int unit) override;
  absl::Status ZeroGrad() override { return grads_.SetZero(); }
  absl::StatusOr<Tensor> TiedEmbeddingGrads() override {
    return grads_.Flat(0, layout_.specs()[0].numel);  // wte leads the buffer
  }

  // The parameters the model reads (fp32, or bf16 under mixed precision), and the fp32
  // ones the optimizer updates and checkpoints hold: the same tensor in fp32, the master
  // weights otherwise. After changing master(), Publish() rounds it into params().
  Tensor& params() { return params_; }
  Tensor& master() { return master_.defined() ? master_ : params_; }
  absl::Status Publish();
  Tensor& grads() { return grads_; }

 private:
  Replica(const ParameterLayout& layout, Allocator& alloc, std::unique_ptr<Kernels> kernels)
      : layout_(layout),
        kernels_(std::move(kernels)),
        working_params_(alloc, *kernels_, layout.units().size()),
        working_grads_(alloc, *kernels_, layout.units().size()) {}
  Tensor Unit(const Tensor& buffer, int unit) const {
    const ParamUnit& u = layout_.units()[unit];
    return buffer.Flat(u.begin, u.end);
  }

  ParameterLayout layout_;
  std::unique_ptr<Kernels> kernels_;
  Tensor params_, grads_;
  Tensor master_;  // fp32 master weights, when params_ is bf16
  WorkingCopies working_params_, working_grads_;
};

}  // namespace tally::model
