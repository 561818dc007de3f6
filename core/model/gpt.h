// GPT: token + position embedding, n_layer pre-LN blocks, a final LayerNorm, an LM head
// tied to the token embedding, and the mean cross-entropy.
//
//   ASSIGN_OR_RETURN(auto gpt, GPT::Create(config, allocator, /*seed=*/1337));
//   RETURN_IF_ERROR(gpt->ZeroGrad());
//   ASSIGN_OR_RETURN(float loss, gpt->Forward(tokens, targets, /*b=*/4));   // (4, T) each
//   gpt->Backward(1.0f / (4 * T));   // d(mean loss over 4·T tokens)/d(each token's loss)
//
// Parameters and gradients are flat buffers (parameters.h), held by a WeightStore
// (weights.h) that hands them out unit by unit: the model's own Replica, or a ZeRO store
// that shards them. Backward adds to the gradients, so micro-batches accumulate until
// ZeroGrad().
//
// The model computes on its allocator's device with that device's Kernels
// (core/runtime/kernels/kernels.h): the CPU, or a CUDA GPU whose memory then holds the
// parameters, gradients and activations. Tokens and targets come from the host; the loss
// goes back to it.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "core/model/activations.h"
#include "core/model/block.h"
#include "core/model/config.h"
#include "core/model/parameters.h"
#include "core/model/precision.h"
#include "core/model/weights.h"
#include "core/model/expert_split.h"
#include "core/model/layer_split.h"
#include "core/model/sequence_split.h"
#include "core/runtime/kernels/kernels.h"
#include "core/runtime/status_macros.h"
#include "core/runtime/tensor.h"

namespace tally::model {

class GPT {
 public:
  // A model with its own Replica, GPT-2's initialisation from the counter RNG; with a
  // `split` over several ranks (not owned; it must outlive the model; null: Serial),
  // this rank's part of every layer (parameters.h); as a pipeline stage, the layers of its
  // `chunks` only (empty: all; parameters.h). Its buffers are of `precision`'s types
  // (precision.h). With `experts` (not owned; null: every expert here) a mixture of
  // experts' experts are split over its ranks, this rank holding its share (moe.h).
  static absl::StatusOr<std::unique_ptr<GPT>> Create(const GPTConfig& config, Allocator& alloc,
                                                     uint64_t seed,
                                                     const LayerSplit* split = nullptr,
                                                     const ModelChunks& chunks = {},
                                                     const Precision& precision = {},
                                                     const ExpertSplit* experts = nullptr);
  // A model whose parameters and gradients are in `weights` (not owned; it must outlive
  // the model and be laid out by ParameterLayout::ForGPT(config, split.size(),
  // split.rank(), chunks, experts.size(), experts.rank())).
  static absl::StatusOr<std::unique_ptr<GPT>> Create(const GPTConfig& config, Allocator& alloc,
                                                     WeightStore* weights,
                                                     const LayerSplit* split = nullptr,
                                                     const ModelChunks& chunks = {},
                                                     const ExpertSplit* experts = nullptr);

  const GPTConfig& config() const { return config_; }
  const ParameterLayout& layout() const { return layout_; }
  WeightStore& weights() { return *weights_; }
  // The whole buffers of a model that has its own Replica (the first Create): the fp32
  // parameters (under mixed precision the master weights, which PublishParams rounds
  // into the bf16 copy the model reads) and the gradients (fp32 or bf16).
  Tensor& params() { return replica()->master(); }
  absl::Status PublishParams() { return replica()->Publish(); }
  Tensor& grads() { return replica()->grads(); }

  // tokens, targets: (b, T) row-major (T: positions()), values in [0, V). Returns the mean
  // loss over the b·T positions. With targets == nullptr only the logits are computed (sampling).
  absl::StatusOr<float> Forward(const int32_t* tokens, const int32_t* targets, int b);
  // After a Forward with targets: adds this micro-batch's gradients, each position's loss
  // weighted by `dloss` (1 / tokens of the global batch, for its mean). A unit's
  // gradients are final when its store's CloseGrads and ReleaseParams have been called,
  // from the end of the buffer toward its start: ln_f, then h.{L-1} ... h.0, then the
  // embeddings (wte last, since the tied LM head adds to it first); data parallelism's
  // store sums buckets from there while the rest of backward still runs.
  absl::Status Backward(float dloss);
  absl::Status ZeroGrad() { return weights_->ZeroGrad(); }

  // What backward makes again instead of keeping it (activations.h), the same values
  // either way (the same kernels on the same operands): the same gradients.
  //  - kAttention, selective recompute (Korthikanti et al. 2022; Megatron's
  //    --recompute-granularity=selective): no layer keeps its attention probabilities;
  //    backward makes them again from the kept qkv (block.h): b·(nh/tp)·T² fp32 kept once
  //    instead of once a layer, attention's core forward once more a layer.
  //  - kLayers, full recompute one layer at a time (Megatron's full granularity with one
  //    layer a checkpoint): a layer keeps only its output; backward runs the layer's
  //    forward again from its input into one room every layer shares, just before the
  //    layer's backward (a layer's forward once more, its collectives included).
  // Before the first forward (activations made earlier keep their layout).
  void SetRecompute(Recompute recompute) {
    recompute_ = recompute;
    own_ = Activations();
    last_forward_ = nullptr;
    scratch_batch_ = 0;
  }

  // Context parallelism: each sequence split over `sequence`'s ranks (not owned; it must
  // outlive the model; null: whole here), this model holding b·T/cp rows of b sequences:
  // Forward's tokens and targets are (b, T/cp), the rows at sequence->positions(), and its
  // loss their mean. Before the first forward; CPU, fp32 activations, no recompute.
  absl::Status SetSequenceSplit(const SequenceSplit* sequence);
  // T, or T/cp under a SequenceSplit: the positions of each sequence this model holds.
  int positions() const {
    return sequence_ != nullptr ? config_.seq_len / sequence_->size() : config_.seq_len;
  }

  // The kernels the model computes with (by default its allocator's device's, fp32);
  // UseKernels replaces them, e.g. by CUDA kernels that allow TF32. Same device only.
  Kernels& kernels() { return *kernels_; }
  absl::Status UseKernels(std::unique_ptr<Kernels> kernels);

  // A stage's forward and backward over activations the caller owns (Forward and Backward
  // above use the model's own). A pipeline keeps one set per micro-batch in flight
  // (core/parallel/pipeline_parallel.h), each of one chunk of the stage's layers.
  struct Activations {
    int batch = 0;  // b: sequences of the micro-batch
    int model_chunk = 0;  // of layout().model_chunks(): the layers they are of
    // buffer: the fp32 activations; operands: those the matmuls read, of the kernels'
    // activation_operand_type() (block.h).
    Tensor buffer, operands, logits, probs, losses, tokens, targets;
    Tensor input;  // room for a saved stage input (recompute)
    float *encoded = nullptr, *lnf_mean = nullptr, *lnf_rstd = nullptr;
    TypedPtr lnf;
    std::vector<BlockActivations> blocks;
    std::vector<MoeRouting> routing;  // with experts: each block's (moe.h)
  };
  // The activations of b sequences on the layers of chunk `chunk`, charged to its
  // allocator: `whole`, everything backward needs; otherwise the ids only (a micro-batch
  // whose forward is recomputed keeps its ids and its input).
  absl::StatusOr<Activations> NewActivations(int b, bool whole, int chunk = 0);
  // The micro-batch's ids to the device, into `ids` (backward reads them again): tokens
  // on a first stage and targets on a last one, (b, T) each, null elsewhere; each in
  // [0, V).
  absl::Status LoadIds(Activations& ids, const int32_t* tokens, const int32_t* targets);
  // Forward of the layers of a's chunk into `a` (whole), with the ids of `ids` (`a`
  // itself, or the micro-batch's own set when its forward is recomputed into a shared
  // one) and, unless the chunk starts at layer 0, `input` (b·T, C): the previous chunk's
  // output. With `loss` (the last stage's targets loaded) returns the mean loss over the
  // b·T positions when the chunk ends the model, else 0. StageOutput(a) is what the next
  // chunk takes.
  absl::StatusOr<float> ForwardStage(Activations& a, const Activations& ids, const float* input,
                                     bool loss);
  const float* StageOutput(const Activations& a) const { return a.blocks.back().out; }
  // Backward through `a` after its forward: d_output (b·T, C) the next chunk's d_input,
  // null on the model's last chunk (which starts from dloss); d_input (b·T, C) filled
  // except on the first.
  absl::Status BackwardStage(Activations& a, const Activations& ids, float dloss,
                             const float* d_output, float* d_input);

  // With experts: over the backwards since the last call (each micro-batch's routing
  // through each of this model's layers, once), the auxiliary losses summed, the choices
  // dropped at capacity and made, and the tokens each expert took; reset by the call.
  struct MoeStats {
    double aux_loss = 0;
    int64_t dropped = 0, assignments = 0;
    // Choices each expert received, by layer of the model and expert: [l·E + e]
    // (a pipeline stage's other layers 0).
    std::vector<int64_t> expert_tokens;
  };
  MoeStats TakeMoeStats();

  // Row `row` of the last forward's logits, (b, T, vocab_local()), copied to the host
  // (vocab_local() floats): this rank's vocabulary slice (tensor-parallel rank r holds
  // entries [r·vocab_local, ...); all of them on one rank).
  absl::Status LogitsRowToHost(int64_t row, float* host);
  int vocab_local() const { return int(layout_.specs().front().shape[0]); }
  const LayerSplit& split() const { return split_; }

 private:
  GPT(const GPTConfig& config, Allocator& alloc, const LayerSplit& split, const ModelChunks& chunks,
      const ExpertSplit* experts);
  // Ranks the experts are split over (1: all here).
  int expert_ranks() const { return experts_ != nullptr ? experts_->size() : 1; }
  // Whether chunk `chunk` holds the model's first layer (and the embedding lookup), and
  // its last (and the LM head).
  bool FirstModelChunk(int chunk) const { return layout_.model_chunks()[size_t(chunk)].begin == 0; }
  bool LastModelChunk(int chunk) const {
    return layout_.model_chunks()[size_t(chunk)].end == config_.n_layer;
  }
  // The scratch of a micro-batch of b sequences (reused from layer to layer), and under
  // layer recompute the layers' room.
  absl::Status EnsureScratch(int b);
  // Cursors into the buffers a set of activations is carved from (gpt_activations.cc).
  struct Carver;
  // Carves a layer's activations but its output, for micro-batches of b sequences.
  void CarveLayer(Carver& at, int64_t b, BlockActivations& x) const;
  // Layer i of `a` as the block reads it: its own activations, or under layer recompute
  // the room with the layer's own output and routing.
  BlockActivations LayerActivations(const Activations& a, int i) const;
  // What this model's activation sizes depend on (activations.h).
  ActivationShape ActivationsShape() const;
  absl::StatusOr<float> RunForward(Activations& a, const int32_t* tokens, const float* input,
                                   const int32_t* targets);
  // `ids`: the activations holding the micro-batch's tokens and targets (`a` itself, or
  // its own set when `a` is the one its forward was recomputed into).
  absl::Status RunBackward(Activations& a, const Activations& ids, float dloss,
                           const float* d_output, float* d_input);
  // Where unit `unit`'s matrices enter the matmuls, `values` being its parameters as
  // Params handed them out: the store's own copy when that is of the matmuls' operand type
  // (bf16 under mixed precision), else `values` themselves.
  absl::StatusOr<UnitOperands> Operands(int unit, const float* values);
  Replica* replica() {
    CHECK(replica_ != nullptr) << "the model's weights are not a replica";
    return replica_.get();
  }

  GPTConfig config_;
  const LayerSplit& split_;
  const ExpertSplit* experts_;  // null: every expert here
  const SequenceSplit* sequence_ = nullptr;  // null: every position here
  ParameterLayout layout_;
  Allocator& alloc_;
  std::unique_ptr<Kernels> kernels_;
  std::unique_ptr<Replica> replica_;  // when the model owns its weights
  WeightStore* weights_ = nullptr;

  Activations own_;  // Forward's and Backward's
  const Activations* last_forward_ = nullptr;
  Recompute recompute_ = Recompute::kNone;
  int scratch_batch_ = 0;  // of the scratch
  Tensor scratch_, loss_scratch_, comm_scratch_;
  Tensor room_, room_operands_;  // layer recompute: the layers' room (fp32, operands)
  BlockActivations room_layer_{};
  BlockScratch block_scratch_{};
  float* dresidual_ = nullptr;
  float* position_rows_ = nullptr;  // under a SequenceSplit: wpe's rows here, or their grads
  MoeStats moe_stats_;
};

}  // namespace tally::model
