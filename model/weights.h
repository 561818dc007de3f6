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
// pointer arithmetic. ZeRO (parallel/zero.h) shards them: ZeRO-2 reduce-scatters in
// CloseGrads, ZeRO-3 also all-gathers in Params. The model's code is the same for all.
#pragma once

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/parameters.h"
#include "runtime/tensor.h"

namespace tally::model {

class WeightStore {
 public:
  virtual ~WeightStore() = default;

  // The parameters of `unit` (its count() floats), valid until ReleaseParams(unit).
  virtual absl::StatusOr<float*> Params(int unit) = 0;
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

// The whole parameter and gradient buffers, on this rank.
class Replica : public WeightStore {
 public:
  // Parameters initialised from `seed` (parameters.h), on the host and then copied to
  // the allocator's device.
  static absl::StatusOr<std::unique_ptr<Replica>> Create(const ParameterLayout& layout,
                                                         uint64_t seed, Allocator& alloc);

  absl::StatusOr<float*> Params(int unit) override { return At(params_, unit); }
  absl::Status ReleaseParams(int) override { return absl::OkStatus(); }
  absl::StatusOr<float*> OpenGrads(int unit) override { return At(grads_, unit); }
  absl::Status CloseGrads(int) override { return absl::OkStatus(); }
  absl::Status ZeroGrad() override { return grads_.SetZero(); }
  absl::StatusOr<Tensor> TiedEmbeddingGrads() override {
    return grads_.Flat(0, layout_.specs()[0].numel);  // wte leads the buffer
  }

  Tensor& params() { return params_; }
  Tensor& grads() { return grads_; }

 private:
  Replica(const ParameterLayout& layout) : layout_(layout) {}
  float* At(Tensor& buffer, int unit) {
    return buffer.data<float>() + layout_.units()[unit].begin;
  }

  ParameterLayout layout_;
  Tensor params_, grads_;
};

}  // namespace tally::model
