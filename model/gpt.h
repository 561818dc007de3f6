// GPT: token + position embedding, n_layer pre-LN blocks, a final LayerNorm, an LM head
// tied to the token embedding, and the mean cross-entropy.
//
//   ASSIGN_OR_RETURN(auto gpt, GPT::Create(config, allocator, /*seed=*/1337));
//   gpt->ZeroGrad();
//   ASSIGN_OR_RETURN(float loss, gpt->Forward(tokens, targets, /*b=*/4));   // (4, T) each
//   gpt->Backward(1.0f / (4 * T));   // d(mean loss over 4·T tokens)/d(each token's loss)
//
// Parameters and gradients are flat buffers (parameters.h), held by a WeightStore
// (weights.h) that hands them out unit by unit: the model's own Replica, or a ZeRO store
// that shards them. Backward adds to the gradients, so micro-batches accumulate until
// ZeroGrad().
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "model/block.h"
#include "model/config.h"
#include "model/parameters.h"
#include "model/weights.h"
#include "parallel/tensor_parallel.h"
#include "runtime/status_macros.h"
#include "runtime/tensor.h"

namespace tally::model {

class GPT {
 public:
  // A model with its own Replica, GPT-2's initialisation from the counter RNG; over `tp`
  // tensor-parallel ranks, this rank's part of every layer (parameters.h).
  static absl::StatusOr<std::unique_ptr<GPT>> Create(const GPTConfig& config, Allocator& alloc,
                                                     uint64_t seed,
                                                     parallel::TensorParallel tp = {});
  // A model whose parameters and gradients are in `weights` (not owned; it must outlive
  // the model and be laid out by ParameterLayout::ForGPT(config, tp.size(), tp.rank())).
  static absl::StatusOr<std::unique_ptr<GPT>> Create(const GPTConfig& config, Allocator& alloc,
                                                     WeightStore* weights,
                                                     parallel::TensorParallel tp = {});

  const GPTConfig& config() const { return config_; }
  const ParameterLayout& layout() const { return layout_; }
  WeightStore& weights() { return *weights_; }
  // The whole buffers of a model that has its own Replica (the first Create).
  Tensor& params() { return replica()->params(); }
  Tensor& grads() { return replica()->grads(); }

  // tokens, targets: (b, T) row-major, values in [0, V). Returns the mean loss over the
  // b·T positions. With targets == nullptr only the logits are computed (sampling).
  absl::StatusOr<float> Forward(const int32_t* tokens, const int32_t* targets, int b);
  // Called during Backward as the gradients of a unit [begin, end) become final, from the
  // end of the buffer toward its start: ln_f, then h.{L-1} ... h.0, then the embeddings
  // (wte last, since the tied LM head adds to it first). Data parallelism reduces
  // gradient buckets from here while the rest of backward still runs.
  using GradientsReady = std::function<absl::Status(int64_t begin, int64_t end)>;

  // After a Forward with targets: adds this micro-batch's gradients, each position's loss
  // weighted by `dloss` (1 / tokens of the global batch, for its mean).
  absl::Status Backward(float dloss, const GradientsReady& ready = nullptr);
  void ZeroGrad() { weights_->ZeroGrad(); }

  // (b, T, vocab_local()) logits of the last Forward: this rank's vocabulary slice
  // (tensor-parallel rank r holds entries [r·vocab_local, ...); all of them on one rank).
  const float* logits() const { return logits_.data<float>(); }
  int vocab_local() const { return int(layout_.specs().front().shape[0]); }
  const parallel::TensorParallel& tp() const { return tp_; }

 private:
  GPT(const GPTConfig& config, Allocator& alloc, parallel::TensorParallel tp);
  absl::Status EnsureActivations(int b);
  Replica* replica() {
    CHECK(replica_ != nullptr) << "the model's weights are not a replica";
    return replica_.get();
  }

  GPTConfig config_;
  parallel::TensorParallel tp_;
  ParameterLayout layout_;
  Allocator& alloc_;
  std::unique_ptr<Replica> replica_;  // when the model owns its weights
  WeightStore* weights_ = nullptr;

  // Activations of the current micro-batch size.
  int batch_ = 0;
  Tensor activations_, logits_, probs_, losses_, tokens_, targets_, loss_scratch_, comm_scratch_;
  float *encoded_ = nullptr, *lnf_ = nullptr, *lnf_mean_ = nullptr, *lnf_rstd_ = nullptr;
  std::vector<BlockActivations> blocks_;
  Tensor scratch_;
  BlockScratch block_scratch_{};
  float* dresidual_ = nullptr;
};

}  // namespace tally::model
