#include "model/gpt.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "runtime/kernels/cpu/cross_entropy.h"
#include "runtime/kernels/cpu/embedding.h"
#include "runtime/kernels/cpu/layernorm.h"
#include "runtime/kernels/cpu/linear.h"
#include "runtime/status_macros.h"

namespace tally::model {

using namespace tally::cpu;  // the kernels

GPT::GPT(const GPTConfig& config, Allocator& alloc)
    : config_(config), layout_(ParameterLayout::ForGPT(config)), alloc_(alloc) {}

absl::StatusOr<std::unique_ptr<GPT>> GPT::Create(const GPTConfig& config, Allocator& alloc,
                                                 uint64_t seed) {
  RETURN_IF_ERROR(config.Validate());
  std::unique_ptr<GPT> gpt(new GPT(config, alloc));
  ASSIGN_OR_RETURN(gpt->replica_, Replica::Create(gpt->layout_, seed, alloc));
  gpt->weights_ = gpt->replica_.get();
  return gpt;
}

absl::StatusOr<std::unique_ptr<GPT>> GPT::Create(const GPTConfig& config, Allocator& alloc,
                                                 WeightStore* weights) {
  RETURN_IF_ERROR(config.Validate());
  std::unique_ptr<GPT> gpt(new GPT(config, alloc));
  gpt->weights_ = weights;
  return gpt;
}

// Carves one buffer into the activations of every block for micro-batch size b.
absl::Status GPT::EnsureActivations(int b) {
  if (b == batch_) return absl::OkStatus();
  const int64_t t = config_.seq_len, c = config_.n_embd, nh = config_.n_head;
  const int64_t n = b * t, v = config_.vocab_size, layers = config_.n_layer;
  const int64_t per_block = n * c * 5 + n * 4 + n * 3 * c + b * nh * t * t + n * 4 * c * 2;
  const int64_t total = n * c * 2 + n * 2 + layers * per_block;
  ASSIGN_OR_RETURN(activations_, Tensor::Empty({total}, DType::kF32, alloc_,
                                               MemoryCategory::kActivations));
  float* p = activations_.data<float>();
  auto take = [&p](int64_t count) {
    float* q = p;
    p += count;
    return q;
  };
  encoded_ = take(n * c);
  blocks_.clear();
  for (int64_t l = 0; l < layers; ++l) {
    BlockActivations a;
    a.ln1 = take(n * c);
    a.ln1_mean = take(n);
    a.ln1_rstd = take(n);
    a.qkv = take(n * 3 * c);
    a.att = take(b * nh * t * t);
    a.atty = take(n * c);
    a.residual2 = take(n * c);
    a.ln2 = take(n * c);
    a.ln2_mean = take(n);
    a.ln2_rstd = take(n);
    a.fch = take(n * 4 * c);
    a.fch_gelu = take(n * 4 * c);
    a.out = take(n * c);
    blocks_.push_back(a);
  }
  lnf_ = take(n * c);
  lnf_mean_ = take(n);
  lnf_rstd_ = take(n);
  CHECK(p == activations_.data<float>() + total) << "activation layout";

  ASSIGN_OR_RETURN(logits_, Tensor::Empty({n, v}, DType::kF32, alloc_, MemoryCategory::kActivations));
  ASSIGN_OR_RETURN(probs_, Tensor::Empty({n, v}, DType::kF32, alloc_, MemoryCategory::kActivations));
  ASSIGN_OR_RETURN(losses_, Tensor::Empty({n}, DType::kF32, alloc_, MemoryCategory::kActivations));
  ASSIGN_OR_RETURN(tokens_, Tensor::Empty({n}, DType::kI32, alloc_, MemoryCategory::kActivations));
  ASSIGN_OR_RETURN(targets_, Tensor::Empty({n}, DType::kI32, alloc_, MemoryCategory::kActivations));
  // Backward scratch: d4c (N, 4C), dqkv (N, 3C), dc (N, C), dtt (T, T), dresidual (N, C).
  ASSIGN_OR_RETURN(scratch_, Tensor::Empty({n * 4 * c + n * 3 * c + n * c + t * t + n * c},
                                           DType::kF32, alloc_, MemoryCategory::kActivations));
  p = scratch_.data<float>();
  block_scratch_ = {take(n * 4 * c), take(n * 3 * c), take(n * c), take(t * t)};
  dresidual_ = take(n * c);
  batch_ = b;
  return absl::OkStatus();
}

absl::StatusOr<float> GPT::Forward(const int32_t* tokens, const int32_t* targets, int b) {
  if (b <= 0) return absl::InvalidArgumentError(absl::StrCat("[GPT::Forward] batch ", b));
  RETURN_IF_ERROR(EnsureActivations(b));
  const int t = config_.seq_len, c = config_.n_embd, v = config_.vocab_size, n = b * t;
  for (int i = 0; i < n; ++i) {
    if (tokens[i] < 0 || tokens[i] >= v || (targets != nullptr && (targets[i] < 0 || targets[i] >= v))) {
      return absl::InvalidArgumentError(
          absl::StrCat("[GPT::Forward] token or target out of [0, ", v, ") at position ", i));
    }
  }
  std::memcpy(tokens_.raw_data(), tokens, sizeof(int32_t) * n);
  // The embeddings stay until the LM head, which is the token embedding transposed.
  constexpr int kEmbeddings = ParameterLayout::kEmbeddings;
  ASSIGN_OR_RETURN(float* embeddings, weights_->Params(kEmbeddings));
  const EmbeddingTensors e = BindEmbeddings(layout_, embeddings);
  EmbeddingForward(encoded_, tokens, e.wte, e.wpe, b, t, c);
  const float* x = encoded_;
  for (int l = 0; l < config_.n_layer; ++l) {
    const int unit = ParameterLayout::LayerUnit(l);
    ASSIGN_OR_RETURN(float* w, weights_->Params(unit));
    BlockForward(config_, b, BindBlock(layout_, l, w), x, blocks_[l]);
    RETURN_IF_ERROR(weights_->ReleaseParams(unit));
    x = blocks_[l].out;
  }
  {
    const int unit = layout_.final_norm_unit();
    ASSIGN_OR_RETURN(float* w, weights_->Params(unit));
    const NormTensors lnf = BindFinalNorm(layout_, w);
    LayerNormForward(lnf_, lnf_mean_, lnf_rstd_, x, lnf.w, lnf.b, n, c);
    RETURN_IF_ERROR(weights_->ReleaseParams(unit));
  }
  // logits = lnf · wteᵀ
  LinearForward(logits_.data<float>(), lnf_, e.wte, static_cast<const float*>(nullptr), n, c, v);
  RETURN_IF_ERROR(weights_->ReleaseParams(kEmbeddings));
  if (targets == nullptr) return 0.0f;

  std::memcpy(targets_.raw_data(), targets, sizeof(int32_t) * n);
  CrossEntropyForward(losses_.data<float>(), probs_.data<float>(), logits_.data<float>(), targets,
                      n, v);
  double sum = 0;
  for (int i = 0; i < n; ++i) sum += losses_.data<float>()[i];
  return float(sum / n);
}

absl::Status GPT::Backward(float dloss, const GradientsReady& ready) {
  const int b = batch_, t = config_.seq_len, c = config_.n_embd, v = config_.vocab_size;
  const int n = b * t;
  const int32_t* targets = targets_.data<int32_t>();
  // Closes the gradients of `unit`, releases its parameters, and tells `ready`.
  auto finish = [&](int unit) -> absl::Status {
    RETURN_IF_ERROR(weights_->CloseGrads(unit));
    RETURN_IF_ERROR(weights_->ReleaseParams(unit));
    const ParamUnit& u = layout_.units()[unit];
    return ready ? ready(u.begin, u.end) : absl::OkStatus();
  };
  // The embeddings are open from the LM head (first) to the embedding lookup (last).
  constexpr int kEmbeddings = ParameterLayout::kEmbeddings;
  ASSIGN_OR_RETURN(float* embeddings, weights_->Params(kEmbeddings));
  ASSIGN_OR_RETURN(float* embedding_grads, weights_->OpenGrads(kEmbeddings));
  const EmbeddingTensors e = BindEmbeddings(layout_, embeddings);
  const EmbeddingTensors ge = BindEmbeddings(layout_, embedding_grads);

  // dlogits overwrites probs, which nothing needs afterwards.
  float* dlogits = probs_.data<float>();
  CrossEntropyBackward(dlogits, dlogits, targets, dloss, n, v);
  float* dlnf = block_scratch_.dc;
  LinearBackward(dlnf, ge.wte, static_cast<float*>(nullptr), dlogits, lnf_, e.wte, n, c, v);
  const float* last = config_.n_layer > 0 ? blocks_.back().out : encoded_;
  std::memset(dresidual_, 0, sizeof(float) * size_t(n) * c);
  {
    const int unit = layout_.final_norm_unit();
    ASSIGN_OR_RETURN(float* w, weights_->Params(unit));
    ASSIGN_OR_RETURN(float* g, weights_->OpenGrads(unit));
    const NormTensors lnf = BindFinalNorm(layout_, w), glnf = BindFinalNorm(layout_, g);
    LayerNormBackward(dresidual_, glnf.w, glnf.b, dlnf, last, lnf.w, lnf_mean_, lnf_rstd_, n, c);
    RETURN_IF_ERROR(finish(unit));
  }
  for (int l = config_.n_layer - 1; l >= 0; --l) {
    const int unit = ParameterLayout::LayerUnit(l);
    ASSIGN_OR_RETURN(float* w, weights_->Params(unit));
    ASSIGN_OR_RETURN(float* g, weights_->OpenGrads(unit));
    const float* x = l == 0 ? encoded_ : blocks_[l - 1].out;
    BlockBackward(config_, b, BindBlock(layout_, l, w), BindBlock(layout_, l, g), x, blocks_[l],
                  block_scratch_, dresidual_);
    RETURN_IF_ERROR(finish(unit));
  }
  EmbeddingBackward(ge.wte, ge.wpe, dresidual_, tokens_.data<int32_t>(), b, t, c);
  return finish(kEmbeddings);
}

}  // namespace tally::model
