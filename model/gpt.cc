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
  ASSIGN_OR_RETURN(gpt->params_, Tensor::Empty({gpt->layout_.total()}, DType::kF32, alloc,
                                               MemoryCategory::kParams));
  ASSIGN_OR_RETURN(gpt->grads_, Tensor::Empty({gpt->layout_.total()}, DType::kF32, alloc,
                                              MemoryCategory::kGrads));
  InitializeParameters(gpt->layout_, seed, gpt->params_.data<float>());
  gpt->w_ = BindTensors(gpt->layout_, config, gpt->params_.data<float>());
  gpt->g_ = BindTensors(gpt->layout_, config, gpt->grads_.data<float>());
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
  EmbeddingForward(encoded_, tokens, w_.wte, w_.wpe, b, t, c);
  const float* x = encoded_;
  for (int l = 0; l < config_.n_layer; ++l) {
    BlockForward(config_, b, w_.blocks[l], x, blocks_[l]);
    x = blocks_[l].out;
  }
  LayerNormForward(lnf_, lnf_mean_, lnf_rstd_, x, w_.lnf_w, w_.lnf_b, n, c);
  // The LM head is the token embedding, transposed: logits = lnf · wteᵀ.
  LinearForward(logits_.data<float>(), lnf_, w_.wte, static_cast<const float*>(nullptr), n, c, v);
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
  auto report = [&](int64_t begin, int64_t end) {
    return ready ? ready(begin, end) : absl::OkStatus();
  };
  // dlogits overwrites probs, which nothing needs afterwards.
  float* dlogits = probs_.data<float>();
  CrossEntropyBackward(dlogits, dlogits, targets, dloss, n, v);
  float* dlnf = block_scratch_.dc;
  LinearBackward(dlnf, g_.wte, static_cast<float*>(nullptr), dlogits, lnf_, w_.wte, n, c, v);
  const float* last = config_.n_layer > 0 ? blocks_.back().out : encoded_;
  std::memset(dresidual_, 0, sizeof(float) * size_t(n) * c);
  LayerNormBackward(dresidual_, g_.lnf_w, g_.lnf_b, dlnf, last, w_.lnf_w, lnf_mean_, lnf_rstd_, n,
                    c);
  const ParamSpec* lnf = layout_.Find("ln_f.weight");
  RETURN_IF_ERROR(report(lnf->offset, layout_.total()));
  for (int l = config_.n_layer - 1; l >= 0; --l) {
    const float* x = l == 0 ? encoded_ : blocks_[l - 1].out;
    BlockBackward(config_, b, w_.blocks[l], g_.blocks[l], x, blocks_[l], block_scratch_,
                  dresidual_);
    auto [begin, end] = layout_.LayerRange(l);
    RETURN_IF_ERROR(report(begin, end));
  }
  EmbeddingBackward(g_.wte, g_.wpe, dresidual_, tokens_.data<int32_t>(), b, t, c);
  const ParamSpec* wpe = layout_.Find("wpe.weight");
  return report(0, wpe->offset + wpe->numel);
}

void GPT::ZeroGrad() { std::memset(grads_.raw_data(), 0, grads_.nbytes()); }

}  // namespace tally::model
