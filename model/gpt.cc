#include "model/gpt.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "runtime/kernels/cpu/layernorm.h"
#include "runtime/status_macros.h"

namespace tally::model {

using namespace tally::cpu;  // the kernels

GPT::GPT(const GPTConfig& config, Allocator& alloc, parallel::TensorParallel tp)
    : config_(config),
      tp_(tp),
      layout_(ParameterLayout::ForGPT(config, tp.size(), tp.rank())),
      alloc_(alloc) {}

namespace {

absl::Status Validate(const GPTConfig& config, const parallel::TensorParallel& tp) {
  RETURN_IF_ERROR(config.Validate());
  if (config.n_head % tp.size() != 0) {
    return absl::InvalidArgumentError(absl::StrCat("[GPT] n_head=", config.n_head,
                                                   " is not divisible by tp=", tp.size(),
                                                   " (each rank takes whole heads)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<GPT>> GPT::Create(const GPTConfig& config, Allocator& alloc,
                                                 uint64_t seed, parallel::TensorParallel tp) {
  RETURN_IF_ERROR(Validate(config, tp));
  std::unique_ptr<GPT> gpt(new GPT(config, alloc, tp));
  ASSIGN_OR_RETURN(gpt->replica_, Replica::Create(gpt->layout_, seed, alloc));
  gpt->weights_ = gpt->replica_.get();
  return gpt;
}

absl::StatusOr<std::unique_ptr<GPT>> GPT::Create(const GPTConfig& config, Allocator& alloc,
                                                 WeightStore* weights, parallel::TensorParallel tp) {
  RETURN_IF_ERROR(Validate(config, tp));
  std::unique_ptr<GPT> gpt(new GPT(config, alloc, tp));
  gpt->weights_ = weights;
  return gpt;
}

// Carves one buffer into the activations of every block for micro-batch size b.
absl::Status GPT::EnsureActivations(int b) {
  if (b == batch_) return absl::OkStatus();
  if (config_.seq_len % tp_.size() != 0 && tp_.sequence_parallel()) {
    return absl::InvalidArgumentError(absl::StrCat("[GPT] seq_len=", config_.seq_len,
                                                   " is not divisible by tp=", tp_.size(),
                                                   " (sequence parallelism splits it)"));
  }
  // Tensor parallelism cuts the attention and MLP widths and the vocabulary; sequence
  // parallelism the residual stream's rows to r (block.h).
  const int64_t t = config_.seq_len, c = config_.n_embd, nh = config_.n_head / tp_.size();
  const int64_t cl = c / tp_.size(), hidden = 4 * c / tp_.size();
  const int64_t n = b * t, v = vocab_local(), layers = config_.n_layer, r = tp_.Rows(int(n));
  const int64_t per_block =
      n * c * 2 + r * c * 2 + r * 4 + n * cl + n * 3 * cl + b * nh * t * t + n * hidden * 2;
  const int64_t total = r * c + n * c + r * 2 + layers * per_block;
  ASSIGN_OR_RETURN(activations_, Tensor::Empty({total}, DType::kF32, alloc_,
                                               MemoryCategory::kActivations));
  float* p = activations_.data<float>();
  auto take = [&p](int64_t count) {
    float* q = p;
    p += count;
    return q;
  };
  encoded_ = take(r * c);
  blocks_.clear();
  for (int64_t l = 0; l < layers; ++l) {
    BlockActivations a;
    a.ln1 = take(n * c);
    a.ln1_mean = take(r);
    a.ln1_rstd = take(r);
    a.qkv = take(n * 3 * cl);
    a.att = take(b * nh * t * t);
    a.atty = take(n * cl);
    a.residual2 = take(r * c);
    a.ln2 = take(n * c);
    a.ln2_mean = take(r);
    a.ln2_rstd = take(r);
    a.fch = take(n * hidden);
    a.fch_gelu = take(n * hidden);
    a.out = take(r * c);
    blocks_.push_back(a);
  }
  lnf_ = take(n * c);  // whole: the LM head reads every row
  lnf_mean_ = take(r);
  lnf_rstd_ = take(r);
  CHECK(p == activations_.data<float>() + total) << "activation layout";

  ASSIGN_OR_RETURN(logits_, Tensor::Empty({n, v}, DType::kF32, alloc_, MemoryCategory::kActivations));
  ASSIGN_OR_RETURN(probs_, Tensor::Empty({n, v}, DType::kF32, alloc_, MemoryCategory::kActivations));
  ASSIGN_OR_RETURN(losses_, Tensor::Empty({n}, DType::kF32, alloc_, MemoryCategory::kActivations));
  ASSIGN_OR_RETURN(tokens_, Tensor::Empty({n}, DType::kI32, alloc_, MemoryCategory::kActivations));
  ASSIGN_OR_RETURN(targets_, Tensor::Empty({n}, DType::kI32, alloc_, MemoryCategory::kActivations));
  ASSIGN_OR_RETURN(loss_scratch_,
                   Tensor::Empty({3 * n}, DType::kF32, alloc_, MemoryCategory::kActivations));
  // Scratch: d4c (N, 4C/tp), dqkv (N, 3C/tp), dc (N, C), dtt (T, T), dresidual (R, C); with
  // sequence parallelism also rows (R, C) and whole (N, C), and the collectives' (N, C).
  const bool sp = tp_.sequence_parallel();
  const int64_t sequence = sp ? r * c + n * c : 0;
  ASSIGN_OR_RETURN(scratch_,
                   Tensor::Empty({n * hidden + n * 3 * cl + n * c + t * t + r * c + sequence},
                                 DType::kF32, alloc_, MemoryCategory::kActivations));
  p = scratch_.data<float>();
  block_scratch_ = {take(n * hidden), take(n * 3 * cl), take(n * c), take(t * t)};
  dresidual_ = take(r * c);
  if (sp) {
    block_scratch_.rows = take(r * c);
    block_scratch_.whole = take(n * c);
    ASSIGN_OR_RETURN(comm_scratch_,
                     Tensor::Empty({n * c}, DType::kF32, alloc_, MemoryCategory::kComm));
    block_scratch_.comm = comm_scratch_.data<float>();
  }
  batch_ = b;
  return absl::OkStatus();
}

absl::StatusOr<float> GPT::Forward(const int32_t* tokens, const int32_t* targets, int b) {
  if (b <= 0) return absl::InvalidArgumentError(absl::StrCat("[GPT::Forward] batch ", b));
  RETURN_IF_ERROR(EnsureActivations(b));
  const int t = config_.seq_len, c = config_.n_embd, v = config_.vocab_size, n = b * t;
  const int vl = vocab_local();
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
  const BlockScratch& s = block_scratch_;
  RETURN_IF_ERROR(parallel::VocabParallelEmbeddingForward(tp_, encoded_, s.whole, tokens, e.wte,
                                                          e.wpe, b, t, c, vl, s.comm, "embedding"));
  const float* x = encoded_;
  for (int l = 0; l < config_.n_layer; ++l) {
    const int unit = ParameterLayout::LayerUnit(l);
    ASSIGN_OR_RETURN(float* w, weights_->Params(unit));
    RETURN_IF_ERROR(BlockForward(config_, tp_, l, b, BindBlock(layout_, l, w), x, blocks_[l], s));
    RETURN_IF_ERROR(weights_->ReleaseParams(unit));
    x = blocks_[l].out;
  }
  float* lnf_rows = tp_.sequence_parallel() ? s.rows : lnf_;  // f gathers it into lnf_
  {
    const int unit = layout_.final_norm_unit();
    ASSIGN_OR_RETURN(float* w, weights_->Params(unit));
    const NormTensors lnf = BindFinalNorm(layout_, w);
    LayerNormForward(lnf_rows, lnf_mean_, lnf_rstd_, x, lnf.w, lnf.b, tp_.Rows(n), c);
    RETURN_IF_ERROR(weights_->ReleaseParams(unit));
  }
  // logits = lnf · wteᵀ, each rank its vocabulary slice: the LM head is column-parallel.
  RETURN_IF_ERROR(parallel::ColumnParallelLinearForward(tp_, logits_.data<float>(), lnf_rows, lnf_,
                                                        e.wte, nullptr, b, t, c, vl, s.comm,
                                                        "lm_head"));
  RETURN_IF_ERROR(weights_->ReleaseParams(kEmbeddings));
  if (targets == nullptr) return 0.0f;

  std::memcpy(targets_.raw_data(), targets, sizeof(int32_t) * n);
  RETURN_IF_ERROR(parallel::VocabParallelCrossEntropyForward(
      tp_, losses_.data<float>(), probs_.data<float>(), loss_scratch_.data<float>(),
      logits_.data<float>(), targets, n, vl, v, "cross_entropy"));
  double sum = 0;
  for (int i = 0; i < n; ++i) sum += losses_.data<float>()[i];
  return float(sum / n);
}

absl::Status GPT::Backward(float dloss, const GradientsReady& ready) {
  const int b = batch_, t = config_.seq_len, c = config_.n_embd, vl = vocab_local();
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
  parallel::VocabParallelCrossEntropyBackward(tp_, dlogits, dlogits, targets, dloss, n, vl);
  const BlockScratch& s = block_scratch_;
  const int rows = tp_.Rows(n);
  float* dlnf = s.dc;
  RETURN_IF_ERROR(parallel::ColumnParallelLinearBackward(tp_, dlnf, s.whole, ge.wte, nullptr,
                                                         dlogits, lnf_, e.wte, b, t, c, vl, s.comm,
                                                         "lm_head"));
  const float* last = config_.n_layer > 0 ? blocks_.back().out : encoded_;
  std::memset(dresidual_, 0, sizeof(float) * size_t(rows) * c);
  {
    const int unit = layout_.final_norm_unit();
    ASSIGN_OR_RETURN(float* w, weights_->Params(unit));
    ASSIGN_OR_RETURN(float* g, weights_->OpenGrads(unit));
    const NormTensors lnf = BindFinalNorm(layout_, w), glnf = BindFinalNorm(layout_, g);
    LayerNormBackward(dresidual_, glnf.w, glnf.b, dlnf, last, lnf.w, lnf_mean_, lnf_rstd_, rows, c);
    RETURN_IF_ERROR(finish(unit));
  }
  for (int l = config_.n_layer - 1; l >= 0; --l) {
    const int unit = ParameterLayout::LayerUnit(l);
    ASSIGN_OR_RETURN(float* w, weights_->Params(unit));
    ASSIGN_OR_RETURN(float* g, weights_->OpenGrads(unit));
    const float* x = l == 0 ? encoded_ : blocks_[l - 1].out;
    RETURN_IF_ERROR(BlockBackward(config_, tp_, l, b, BindBlock(layout_, l, w),
                                  BindBlock(layout_, l, g), x, blocks_[l], s, dresidual_));
    RETURN_IF_ERROR(finish(unit));
  }
  RETURN_IF_ERROR(parallel::VocabParallelEmbeddingBackward(tp_, ge.wte, ge.wpe, dresidual_, s.whole,
                                                           tokens_.data<int32_t>(), b, t, c, vl,
                                                           s.comm, "embedding"));
  return finish(kEmbeddings);
}

}  // namespace tally::model
