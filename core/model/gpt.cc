#include "core/model/gpt.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/runtime/comm/ledger/names.h"
#include "core/runtime/status_macros.h"

namespace tally::model {

GPT::GPT(const GPTConfig& config, Allocator& alloc, const LayerSplit& split, const ModelChunks& chunks,
         const ExpertSplit* experts)
    : config_(config),
      split_(split),
      experts_(experts != nullptr && experts->size() > 1 ? experts : nullptr),
      layout_(ParameterLayout::ForGPT(config, split.size(), split.rank(), chunks,
                                      experts_ != nullptr ? experts_->size() : 1,
                                      experts_ != nullptr ? experts_->rank() : 0)),
      alloc_(alloc) {}

namespace {

absl::Status Validate(const GPTConfig& config, const LayerSplit& split, const ModelChunks& chunks) {
  RETURN_IF_ERROR(config.Validate());
  if (config.n_head % split.size() != 0) {
    return absl::InvalidArgumentError(absl::StrCat("[GPT] n_head=", config.n_head,
                                                   " is not divisible by tp=", split.size(),
                                                   " (each rank takes whole heads)"));
  }
  int after = 0;  // chunks in order, apart, each of some layers
  for (const LayerRange& r : chunks) {
    if (r.begin < after || r.begin >= r.end || r.end > config.n_layer ||
        (after > 0 && r.begin == after)) {
      return absl::InvalidArgumentError(absl::StrCat("[GPT] no chunk of layers [", r.begin, ", ",
                                                     r.end, ") after layer ", after,
                                                     " in a model of ", config.n_layer));
    }
    after = r.end;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<GPT>> GPT::Create(const GPTConfig& config, Allocator& alloc,
                                                 uint64_t seed, const LayerSplit* split,
                                                 const ModelChunks& chunks, const Precision& precision,
                                                 const ExpertSplit* experts) {
  const LayerSplit& serial_or_split = split != nullptr ? *split : Serial::Instance();
  RETURN_IF_ERROR(Validate(config, serial_or_split, chunks));
  std::unique_ptr<GPT> gpt(new GPT(config, alloc, serial_or_split, chunks, experts));
  ASSIGN_OR_RETURN(gpt->kernels_, Kernels::Create(alloc.device()));
  ASSIGN_OR_RETURN(gpt->replica_, Replica::Create(gpt->layout_, seed, alloc, precision));
  gpt->weights_ = gpt->replica_.get();
  return gpt;
}

absl::StatusOr<std::unique_ptr<GPT>> GPT::Create(const GPTConfig& config, Allocator& alloc,
                                                 WeightStore* weights, const LayerSplit* split,
                                                 const ModelChunks& chunks, const ExpertSplit* experts) {
  const LayerSplit& serial_or_split = split != nullptr ? *split : Serial::Instance();
  RETURN_IF_ERROR(Validate(config, serial_or_split, chunks));
  std::unique_ptr<GPT> gpt(new GPT(config, alloc, serial_or_split, chunks, experts));
  ASSIGN_OR_RETURN(gpt->kernels_, Kernels::Create(alloc.device()));
  gpt->weights_ = weights;
  return gpt;
}

absl::Status GPT::UseKernels(std::unique_ptr<Kernels> kernels) {
  if (!(kernels->device() == alloc_.device())) {
    return absl::InvalidArgumentError(absl::StrCat("[GPT] kernels of ",
                                                   kernels->device().ToString(), " for a model on ",
                                                   alloc_.device().ToString()));
  }
  kernels_ = std::move(kernels);
  // The attention scratch and the activations' operand type may differ: allocate anew.
  scratch_batch_ = 0;
  own_ = Activations();
  last_forward_ = nullptr;
  return absl::OkStatus();
}

absl::Status GPT::SetSequenceSplit(const SequenceSplit* sequence) {
  if (sequence != nullptr && sequence->size() > 1) {
    auto refuse = [&](const std::string& what) {
      return absl::InvalidArgumentError(
          absl::StrCat("[GPT] context parallelism (cp=", sequence->size(), ") ", what));
    };
    if (config_.seq_len % sequence->size() != 0) {
      return refuse(absl::StrCat("needs seq_len=", config_.seq_len, " divisible by cp"));
    }
    if (alloc_.device().type == DeviceType::kCUDA) return refuse("runs on the CPU only");
    if (recompute_ == Recompute::kAttention) {
      return refuse("keeps no probabilities to make again (no selective recompute)");
    }
  }
  sequence_ = sequence != nullptr && sequence->size() > 1 ? sequence : nullptr;
  own_ = Activations();
  last_forward_ = nullptr;
  scratch_batch_ = 0;
  return absl::OkStatus();
}

GPT::MoeStats GPT::TakeMoeStats() {
  MoeStats taken = std::move(moe_stats_);
  moe_stats_ = MoeStats();
  taken.expert_tokens.resize(size_t(config_.n_layer) * config_.n_experts, 0);
  return taken;
}

absl::Status GPT::LogitsRowToHost(int64_t row, float* host) {
  if (last_forward_ == nullptr) return absl::FailedPreconditionError("[GPT] no forward yet");
  const int64_t v = vocab_local();
  return kernels_->ToHost(host, last_forward_->logits.data<float>() + row * v, sizeof(float) * v);
}

absl::StatusOr<UnitOperands> GPT::Operands(int unit, const float* values) {
  ASSIGN_OR_RETURN(const ConstTypedPtr stored, weights_->Stored(unit));
  if (stored.type != kernels_->activation_operand_type()) return UnitOperands{values, {}};
  return UnitOperands{values, stored};
}


absl::StatusOr<float> GPT::Forward(const int32_t* tokens, const int32_t* targets, int b) {
  if (b <= 0) return absl::InvalidArgumentError(absl::StrCat("[GPT::Forward] batch ", b));
  if (own_.batch != b) {
    own_ = Activations();  // the old ones go first
    ASSIGN_OR_RETURN(own_, NewActivations(b, /*whole=*/true));
  }
  RETURN_IF_ERROR(LoadIds(own_, tokens, targets));
  return ForwardStage(own_, own_, nullptr, targets != nullptr);
}

absl::Status GPT::Backward(float dloss) {
  return BackwardStage(own_, own_, dloss, nullptr, nullptr);
}

absl::Status GPT::LoadIds(Activations& ids, const int32_t* tokens, const int32_t* targets) {
  const int v = config_.vocab_size, n = ids.batch * positions();
  for (const int32_t* host : {tokens, targets}) {
    for (int i = 0; host != nullptr && i < n; ++i) {
      if (host[i] < 0 || host[i] >= v) {
        return absl::InvalidArgumentError(
            absl::StrCat("[GPT::Forward] token or target out of [0, ", v, ") at position ", i));
      }
    }
  }
  Kernels& k = *kernels_;
  if (tokens != nullptr) {
    RETURN_IF_ERROR(k.FromHost(ids.tokens.raw_data(), tokens, sizeof(int32_t) * n));
  }
  if (targets != nullptr) {
    RETURN_IF_ERROR(k.FromHost(ids.targets.raw_data(), targets, sizeof(int32_t) * n));
  }
  return absl::OkStatus();
}

absl::StatusOr<float> GPT::ForwardStage(Activations& a, const Activations& ids, const float* input,
                                        bool loss) {
  RETURN_IF_ERROR(EnsureScratch(a.batch));
  last_forward_ = &a;
  const bool first = FirstModelChunk(a.model_chunk), last = LastModelChunk(a.model_chunk);
  return RunForward(a, first ? ids.tokens.data<int32_t>() : nullptr, input,
                    last && loss ? ids.targets.data<int32_t>() : nullptr);
}

absl::Status GPT::BackwardStage(Activations& a, const Activations& ids, float dloss,
                                const float* d_output, float* d_input) {
  RETURN_IF_ERROR(EnsureScratch(a.batch));
  return RunBackward(a, ids, dloss, d_output, d_input);
}

absl::StatusOr<float> GPT::RunForward(Activations& a, const int32_t* tokens, const float* input,
                                      const int32_t* targets) {
  Kernels& k = *kernels_;
  const int b = a.batch, t = positions(), c = config_.n_embd, v = config_.vocab_size;
  const int n = b * t, vl = vocab_local();
  const BlockScratch& s = block_scratch_;
  constexpr int kEmbeddings = ParameterLayout::kEmbeddings;
  const LayerRange& range = layout_.model_chunks()[size_t(a.model_chunk)];
  const bool first = FirstModelChunk(a.model_chunk), last = LastModelChunk(a.model_chunk);
  // The embeddings stay from the lookup to the LM head, the token embedding transposed.
  float* embeddings = nullptr;
  if (first) {
    ASSIGN_OR_RETURN(embeddings, weights_->Params(kEmbeddings));
    const EmbeddingTensors e = BindEmbeddings(layout_, embeddings);
    const float* wpe = e.wpe;
    if (sequence_ != nullptr) {  // the table's rows of this rank's positions, in its order
      int row = 0;
      for (const PositionRun& run : sequence_->positions()) {
        RETURN_IF_ERROR(k.Copy(position_rows_ + int64_t(row) * c, e.wpe + int64_t(run.start) * c,
                               sizeof(float) * size_t(run.length) * c));
        row += run.length;
      }
      wpe = position_rows_;
    }
    RETURN_IF_ERROR(split_.EmbeddingForward(k, a.encoded, s.whole, tokens, e.wte, wpe, b, t, c,
                                            vl, s.comm, comm::scope::kEmbedding));
  } else {
    RETURN_IF_ERROR(k.Copy(a.encoded, input, sizeof(float) * size_t(split_.Rows(n)) * c));
  }
  const float* x = a.encoded;
  for (int l = range.begin; l < range.end; ++l) {
    const int unit = layout_.layer_unit(l);
    const BlockActivations acts = LayerActivations(a, l - range.begin);
    ASSIGN_OR_RETURN(float* w, weights_->Params(unit));
    BlockTensors bound = BindBlock(layout_, l, w);
    ASSIGN_OR_RETURN(bound.operands, Operands(unit, w));
    RETURN_IF_ERROR(
        BlockForward(k, config_, split_, l, b, bound, x, acts, s, experts_, sequence_));
    RETURN_IF_ERROR(weights_->ReleaseParams(unit));
    x = acts.out;
  }
  if (!last) {
    if (first) RETURN_IF_ERROR(weights_->ReleaseParams(kEmbeddings));
    return 0.0f;
  }
  // f gathers it into a.lnf.
  const TypedPtr lnf_rows = split_.sequence_parallel() ? TypedPtr(s.rows, a.lnf.type) : a.lnf;
  {
    const int unit = layout_.final_norm_unit();
    ASSIGN_OR_RETURN(float* w, weights_->Params(unit));
    const NormTensors lnf = BindFinalNorm(layout_, w);
    RETURN_IF_ERROR(
        k.LayerNormForward(lnf_rows, a.lnf_mean, a.lnf_rstd, x, lnf.w, lnf.b, split_.Rows(n), c));
    RETURN_IF_ERROR(weights_->ReleaseParams(unit));
  }
  if (!first) {
    ASSIGN_OR_RETURN(embeddings, weights_->Params(kEmbeddings));
  }
  // logits = lnf · wteᵀ, each rank its vocabulary slice: the LM head is column-parallel.
  EmbeddingTensors e = BindEmbeddings(layout_, embeddings);
  ASSIGN_OR_RETURN(e.operands, Operands(kEmbeddings, embeddings));
  RETURN_IF_ERROR(split_.ColumnLinearForward(k, a.logits.data<float>(), lnf_rows, a.lnf,
                                             e.operands(e.wte), nullptr, b, t, c, vl, s.comm,
                                             comm::scope::kLmHead));
  RETURN_IF_ERROR(weights_->ReleaseParams(kEmbeddings));
  if (targets == nullptr) return 0.0f;

  RETURN_IF_ERROR(split_.CrossEntropyForward(k, a.losses.data<float>(), a.probs.data<float>(),
                                             loss_scratch_.data<float>(), a.logits.data<float>(),
                                             targets, n, vl, v, comm::scope::kCrossEntropy));
  std::vector<float> losses(n);
  RETURN_IF_ERROR(k.ToHost(losses.data(), a.losses.raw_data(), sizeof(float) * size_t(n)));
  double sum = 0;
  for (float loss : losses) sum += loss;
  return float(sum / n);
}

// Long, and kept whole: backward in the reverse order of the forward (LM head, ln_f,
// the layers, the embedding), each unit opened and closed where it is used.
absl::Status GPT::RunBackward(Activations& a, const Activations& ids, float dloss,
                              const float* d_output, float* d_input) {
  Kernels& k = *kernels_;
  const int b = a.batch, t = positions(), c = config_.n_embd, vl = vocab_local();
  const int n = b * t, rows = split_.Rows(n);
  const BlockScratch& s = block_scratch_;
  const LayerRange& range = layout_.model_chunks()[size_t(a.model_chunk)];
  const bool first = FirstModelChunk(a.model_chunk), last = LastModelChunk(a.model_chunk);
  // Closes the gradients of `unit` and releases its parameters: the unit is done.
  auto finish = [&](int unit) -> absl::Status {
    RETURN_IF_ERROR(weights_->CloseGrads(unit));
    return weights_->ReleaseParams(unit);
  };
  // The embeddings are open from the LM head (first) to the embedding lookup (last).
  constexpr int kEmbeddings = ParameterLayout::kEmbeddings;
  float *embeddings = nullptr, *embedding_grads = nullptr;
  auto open_embeddings = [&]() -> absl::Status {
    ASSIGN_OR_RETURN(embeddings, weights_->Params(kEmbeddings));
    ASSIGN_OR_RETURN(embedding_grads, weights_->OpenGrads(kEmbeddings));
    return absl::OkStatus();
  };
  if (last) {
    RETURN_IF_ERROR(open_embeddings());
    EmbeddingTensors e = BindEmbeddings(layout_, embeddings);
    ASSIGN_OR_RETURN(e.operands, Operands(kEmbeddings, embeddings));
    const EmbeddingTensors ge = BindEmbeddings(layout_, embedding_grads);
    // dlogits overwrites probs, which nothing needs afterwards.
    float* dlogits = a.probs.data<float>();
    RETURN_IF_ERROR(split_.CrossEntropyBackward(
        k, dlogits, dlogits, ids.targets.data<int32_t>(), dloss, n, vl));
    float* dlnf = s.dc;
    RETURN_IF_ERROR(split_.ColumnLinearBackward(k, dlnf, s.whole, ge.wte, nullptr, dlogits, a.lnf,
                                                e.operands(e.wte), b, t, c, vl, s.comm,
                                                comm::scope::kLmHead));
    if (!first) RETURN_IF_ERROR(finish(kEmbeddings));  // the head's copy of wte is done
    RETURN_IF_ERROR(k.Zero(dresidual_, sizeof(float) * size_t(rows) * c));
    const int unit = layout_.final_norm_unit();
    ASSIGN_OR_RETURN(float* w, weights_->Params(unit));
    ASSIGN_OR_RETURN(float* g, weights_->OpenGrads(unit));
    const NormTensors lnf = BindFinalNorm(layout_, w), glnf = BindFinalNorm(layout_, g);
    RETURN_IF_ERROR(k.LayerNormBackward(dresidual_, glnf.w, glnf.b, dlnf, a.blocks.back().out,
                                        lnf.w, a.lnf_mean, a.lnf_rstd, rows, c));
    RETURN_IF_ERROR(finish(unit));
  } else {
    RETURN_IF_ERROR(k.Copy(dresidual_, d_output, sizeof(float) * size_t(rows) * c));
  }
  for (int l = range.end - 1; l >= range.begin; --l) {
    const int unit = layout_.layer_unit(l), i = l - range.begin;
    ASSIGN_OR_RETURN(float* w, weights_->Params(unit));
    ASSIGN_OR_RETURN(float* g, weights_->OpenGrads(unit));
    const float* x = i == 0 ? a.encoded : a.blocks[i - 1].out;
    BlockTensors bound = BindBlock(layout_, l, w);
    ASSIGN_OR_RETURN(bound.operands, Operands(unit, w));
    const BlockActivations acts = LayerActivations(a, i);
    if (recompute_ == Recompute::kLayers) {  // the layer's forward again, into the room
      RETURN_IF_ERROR(
          BlockForward(k, config_, split_, l, b, bound, x, acts, s, experts_, sequence_));
    }
    RETURN_IF_ERROR(BlockBackward(k, config_, split_, l, b, bound, BindBlock(layout_, l, g), x,
                                  acts, s, dloss, dresidual_, experts_, sequence_));
    if (config_.moe()) {  // each micro-batch's routing once: at its backward
      const MoeRouting& r = a.routing[size_t(i)];
      moe_stats_.aux_loss += r.aux_loss;
      moe_stats_.dropped += r.assignments() - r.kept_count();
      moe_stats_.assignments += r.assignments();
      const int experts = config_.n_experts;
      moe_stats_.expert_tokens.resize(size_t(config_.n_layer) * experts, 0);
      for (int e = 0; e < experts; ++e) {
        moe_stats_.expert_tokens[size_t(l * experts + e)] += r.tokens(e);
      }
    }
    RETURN_IF_ERROR(finish(unit));
  }
  if (!first) {
    return k.Copy(d_input, dresidual_, sizeof(float) * size_t(rows) * c);
  }
  if (!last) RETURN_IF_ERROR(open_embeddings());
  const EmbeddingTensors ge = BindEmbeddings(layout_, embedding_grads);
  float* dwpe = sequence_ != nullptr ? position_rows_ : ge.wpe;
  if (sequence_ != nullptr) RETURN_IF_ERROR(k.Zero(dwpe, sizeof(float) * size_t(t) * c));
  RETURN_IF_ERROR(split_.EmbeddingBackward(k, ge.wte, dwpe, dresidual_, s.whole,
                                           ids.tokens.data<int32_t>(), b, t, c, vl, s.comm,
                                           comm::scope::kEmbedding));
  if (sequence_ != nullptr) {  // added into the table's rows of this rank's positions
    int row = 0;
    for (const PositionRun& run : sequence_->positions()) {
      RETURN_IF_ERROR(k.AddInPlace(ge.wpe + int64_t(run.start) * c, dwpe + int64_t(row) * c,
                                   int64_t(run.length) * c));
      row += run.length;
    }
  }
  return finish(kEmbeddings);
}

}  // namespace tally::model
