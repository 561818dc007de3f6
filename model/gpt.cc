#include "model/gpt.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "runtime/status_macros.h"

namespace tally::model {

GPT::GPT(const GPTConfig& config, Allocator& alloc, const LayerSplit& split, const Chunks& chunks,
         const ExpertSplit* experts)
    : config_(config),
      split_(split),
      experts_(experts != nullptr && experts->size() > 1 ? experts : nullptr),
      layout_(ParameterLayout::ForGPT(config, split.size(), split.rank(), chunks,
                                      experts_ != nullptr ? experts_->size() : 1,
                                      experts_ != nullptr ? experts_->rank() : 0)),
      alloc_(alloc) {}

namespace {

absl::Status Validate(const GPTConfig& config, const LayerSplit& split, const Chunks& chunks) {
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
                                                 const Chunks& chunks, const Precision& precision,
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
                                                 const Chunks& chunks, const ExpertSplit* experts) {
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

// Cursors, fp32 and operands, each taken from in turn.
struct GPT::Carver {
  float* p;
  TypedPtr o;
  float* Take(int64_t count) {
    float* q = p;
    p += count;
    return q;
  }
  TypedPtr TakeOperand(int64_t count) {
    TypedPtr q = o;
    o = o + count;
    return q;
  }
};

// Carves two buffers, fp32 and the matmuls' operands (block.h), into the activations of
// the stage's blocks for micro-batch size b.
// Tensor parallelism cuts the attention and MLP widths and the vocabulary; sequence
// parallelism the residual stream's rows to r (block.h). `whole`: everything backward
// needs; otherwise (recompute) the ids and the stage's input.
absl::StatusOr<GPT::Activations> GPT::NewActivations(int b, bool whole, int chunk) {
  const int64_t t = config_.seq_len, c = config_.n_embd;
  const int64_t n = b * t, v = vocab_local(), r = split_.Rows(int(n));
  const LayerRange& range = layout_.chunks()[size_t(chunk)];
  const int64_t layers = range.end - range.begin;
  const bool last = LastChunk(chunk);
  const MicroBatchActivations sizes = CountActivations(ActivationsShape(), b, layers, last, whole);
  auto empty = [&](int64_t count, DType dtype) {
    return Tensor::Empty({count}, dtype, alloc_, MemoryCategory::kActivations);
  };
  Activations a;
  a.batch = b;
  a.chunk = chunk;
  ASSIGN_OR_RETURN(a.tokens, empty(n, DType::kI32));
  ASSIGN_OR_RETURN(a.targets, empty(n, DType::kI32));
  if (!whole) {
    ASSIGN_OR_RETURN(a.input, empty(r * c, DType::kF32));
    return a;
  }
  // The fp32 activations, and those the matmuls read (of the operand type), carved as
  // activations.h counts them.
  ASSIGN_OR_RETURN(a.buffer, empty(sizes.fp32, DType::kF32));
  ASSIGN_OR_RETURN(a.operands, empty(sizes.operands, kernels_->activation_operand_type()));
  Carver at{a.buffer.data<float>(), TypedPtr(a.operands.raw_data(), a.operands.dtype())};
  a.encoded = at.Take(r * c);  // the stage's input: the embeddings, or the previous stage's output
  a.routing.resize(config_.moe() ? size_t(layers) : 0);
  for (int64_t l = 0; l < layers; ++l) {
    BlockActivations x;
    if (recompute_ != Recompute::kLayers) CarveLayer(at, b, x);  // else the room's
    if (config_.moe()) x.moe.routing = &a.routing[size_t(l)];
    x.out = at.Take(r * c);
    a.blocks.push_back(x);
  }
  if (last) {
    a.lnf = at.TakeOperand(n * c);  // whole: the LM head reads every row
    a.lnf_mean = at.Take(r);
    a.lnf_rstd = at.Take(r);
    ASSIGN_OR_RETURN(a.logits, empty(n * v, DType::kF32));
    ASSIGN_OR_RETURN(a.probs, empty(n * v, DType::kF32));
    ASSIGN_OR_RETURN(a.losses, empty(n, DType::kF32));
  }
  CHECK(at.p == a.buffer.data<float>() + sizes.fp32) << "activation layout";
  CHECK(at.o.data == (TypedPtr(a.operands.raw_data(), a.operands.dtype()) + sizes.operands).data)
      << "activation layout";
  return a;
}

// With experts the MLP's are the n·k rows the experts take (moe.h): hidden before GELU
// and outputs, and their inputs and hidden after GELU. Under expert parallelism over N
// ranks the experts here run at most N·n·k rows, and the rows arrive (and their outputs
// leave) through buffers of their own.
void GPT::CarveLayer(Carver& at, int64_t b, BlockActivations& x) const {
  const int64_t t = config_.seq_len, c = config_.n_embd, nh = config_.n_head / split_.size();
  const int64_t cl = c / split_.size(), hidden = 4 * c / split_.size();
  const int64_t n = b * t, r = split_.Rows(int(n));
  const int64_t moe_rows = config_.moe() ? n * config_.moe_top_k : 0;
  const int64_t expert_rows = moe_rows * expert_ranks();
  x.ln1 = at.TakeOperand(n * c);
  x.ln1_mean = at.Take(r);
  x.ln1_rstd = at.Take(r);
  x.qkv = at.TakeOperand(n * 3 * cl);
  // Selective recompute: in the scratch (block.h).
  x.att = recompute_ == Recompute::kAttention ? nullptr : at.Take(b * nh * t * t);
  x.atty = at.TakeOperand(n * cl);
  x.residual2 = at.Take(r * c);
  x.ln2 = at.TakeOperand(n * c);
  x.ln2_mean = at.Take(r);
  x.ln2_rstd = at.Take(r);
  if (config_.moe()) {
    x.moe.x = at.TakeOperand(moe_rows * c);
    x.moe.y = at.Take(moe_rows * c);
    x.moe.hidden = at.Take(expert_rows * hidden);
    x.moe.hidden_gelu = at.TakeOperand(expert_rows * hidden);
    x.moe.expert_x = x.moe.x;  // serial: the experts run the rows in place
    x.moe.expert_y = x.moe.y;
    if (experts_ != nullptr) {
      x.moe.expert_x = at.TakeOperand(expert_rows * c);
      x.moe.expert_y = at.Take(expert_rows * c);
      x.moe.wire_x = at.TakeOperand(expert_rows * c);
      x.moe.wire_y = at.Take(expert_rows * c);
    }
  } else {
    x.fch = at.Take(n * hidden);
    x.fch_gelu = at.TakeOperand(n * hidden);
  }
}

BlockActivations GPT::LayerActivations(const Activations& a, int i) const {
  if (recompute_ != Recompute::kLayers) return a.blocks[size_t(i)];
  BlockActivations x = room_layer_;
  x.out = a.blocks[size_t(i)].out;
  x.moe.routing = a.blocks[size_t(i)].moe.routing;
  return x;
}

absl::Status GPT::EnsureScratch(int b) {
  if (b == scratch_batch_) return absl::OkStatus();
  if (config_.seq_len % split_.size() != 0 && split_.sequence_parallel()) {
    return absl::InvalidArgumentError(absl::StrCat("[GPT] seq_len=", config_.seq_len,
                                                   " is not divisible by tp=", split_.size(),
                                                   " (sequence parallelism splits it)"));
  }
  const int64_t t = config_.seq_len, c = config_.n_embd, n = b * t, r = split_.Rows(int(n));
  const int64_t cl = c / split_.size(), hidden = 4 * c / split_.size();
  ASSIGN_OR_RETURN(loss_scratch_,
                   Tensor::Empty({3 * n}, DType::kF32, alloc_, MemoryCategory::kActivations));
  // Scratch: d4c (N, 4C/tp), dqkv (N, 3C/tp), dc (N, C), dtt (attention backward's: T·T
  // on the CPU), dresidual (R, C); with sequence parallelism also rows (R, C) and whole
  // (N, C), and the collectives' (N, C).
  // With experts: d4c holds the n·k rows the experts take, and the router's logits (n, E)
  // and the experts' rows (n·k, C) have room of their own (moe.h).
  const bool sp = split_.sequence_parallel();
  const ActivationShape shape = ActivationsShape();
  const int64_t tt = shape.attention_scratch;
  const int64_t moe_rows = config_.moe() ? n * config_.moe_top_k : 0;
  const int64_t expert_rows = moe_rows * expert_ranks();
  const int64_t d4c = config_.moe() ? expert_rows * hidden : n * hidden;
  ASSIGN_OR_RETURN(scratch_, Tensor::Empty({CountScratch(shape, b)}, DType::kF32, alloc_,
                                           MemoryCategory::kActivations));
  float* p = scratch_.data<float>();
  auto take = [&p](int64_t count) {
    float* q = p;
    p += count;
    return q;
  };
  block_scratch_ = BlockScratch();
  block_scratch_.d4c = take(d4c);
  block_scratch_.dqkv = take(n * 3 * cl);
  block_scratch_.dc = take(n * c);
  block_scratch_.dtt = take(tt);
  dresidual_ = take(r * c);
  if (recompute_ == Recompute::kAttention) {
    block_scratch_.att = take(b * (config_.n_head / split_.size()) * t * t);
  }
  if (config_.moe()) {
    block_scratch_.moe = {take(n * config_.n_experts), take(moe_rows * c), block_scratch_.d4c};
    if (experts_ != nullptr) {
      block_scratch_.moe.expert_rows = take(expert_rows * c);
      block_scratch_.moe.wire_rows = take(expert_rows * c);
    }
  }
  if (sp) {
    block_scratch_.rows = take(r * c);
    block_scratch_.whole = take(n * c);
    ASSIGN_OR_RETURN(comm_scratch_,
                     Tensor::Empty({n * c}, DType::kF32, alloc_, MemoryCategory::kComm));
    block_scratch_.comm = comm_scratch_.data<float>();
  }
  CHECK(p == scratch_.data<float>() + scratch_.numel()) << "scratch layout";
  room_layer_ = BlockActivations();
  if (recompute_ == Recompute::kLayers) {  // one layer's activations but its output
    const MicroBatchActivations room = CountLayerRoom(shape, b);
    ASSIGN_OR_RETURN(room_, Tensor::Empty({room.fp32}, DType::kF32, alloc_,
                                          MemoryCategory::kActivations));
    ASSIGN_OR_RETURN(room_operands_, Tensor::Empty({room.operands},
                                                   kernels_->activation_operand_type(), alloc_,
                                                   MemoryCategory::kActivations));
    Carver at{room_.data<float>(), TypedPtr(room_operands_.raw_data(), room_operands_.dtype())};
    CarveLayer(at, b, room_layer_);
    CHECK(at.p == room_.data<float>() + room.fp32) << "room layout";
  }
  scratch_batch_ = b;
  return absl::OkStatus();
}

absl::StatusOr<UnitOperands> GPT::Operands(int unit, const float* values) {
  ASSIGN_OR_RETURN(const ConstTypedPtr stored, weights_->Stored(unit));
  if (stored.type != kernels_->activation_operand_type()) return UnitOperands{values, {}};
  return UnitOperands{values, stored};
}

ActivationShape GPT::ActivationsShape() const {
  return {config_,         split_.size(), split_.sequence_parallel(), expert_ranks(),
          experts_ != nullptr, vocab_local(),
          kernels_->AttentionScratch(config_.seq_len, config_.n_head / split_.size()),
          recompute_};
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

absl::Status GPT::Backward(float dloss, const GradientsReady& ready) {
  return BackwardStage(own_, own_, dloss, nullptr, nullptr, ready);
}

absl::Status GPT::LoadIds(Activations& ids, const int32_t* tokens, const int32_t* targets) {
  const int v = config_.vocab_size, n = ids.batch * config_.seq_len;
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
  const bool first = FirstChunk(a.chunk), last = LastChunk(a.chunk);
  return RunForward(a, first ? ids.tokens.data<int32_t>() : nullptr, input,
                    last && loss ? ids.targets.data<int32_t>() : nullptr);
}

absl::Status GPT::BackwardStage(Activations& a, const Activations& ids, float dloss,
                                const float* d_output, float* d_input, const GradientsReady& ready) {
  RETURN_IF_ERROR(EnsureScratch(a.batch));
  return RunBackward(a, ids, dloss, d_output, d_input, ready);
}

absl::StatusOr<float> GPT::RunForward(Activations& a, const int32_t* tokens, const float* input,
                                      const int32_t* targets) {
  Kernels& k = *kernels_;
  const int b = a.batch, t = config_.seq_len, c = config_.n_embd, v = config_.vocab_size;
  const int n = b * t, vl = vocab_local();
  const BlockScratch& s = block_scratch_;
  constexpr int kEmbeddings = ParameterLayout::kEmbeddings;
  const LayerRange& range = layout_.chunks()[size_t(a.chunk)];
  const bool first = FirstChunk(a.chunk), last = LastChunk(a.chunk);
  // The embeddings stay from the lookup to the LM head, the token embedding transposed.
  float* embeddings = nullptr;
  if (first) {
    ASSIGN_OR_RETURN(embeddings, weights_->Params(kEmbeddings));
    const EmbeddingTensors e = BindEmbeddings(layout_, embeddings);
    RETURN_IF_ERROR(split_.EmbeddingForward(
        k, a.encoded, s.whole, tokens, e.wte, e.wpe, b, t, c, vl, s.comm, "embedding"));
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
    RETURN_IF_ERROR(BlockForward(k, config_, split_, l, b, bound, x, acts, s, experts_));
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
                                             "lm_head"));
  RETURN_IF_ERROR(weights_->ReleaseParams(kEmbeddings));
  if (targets == nullptr) return 0.0f;

  RETURN_IF_ERROR(split_.CrossEntropyForward(
      k, a.losses.data<float>(), a.probs.data<float>(), loss_scratch_.data<float>(),
      a.logits.data<float>(), targets, n, vl, v, "cross_entropy"));
  std::vector<float> losses(n);
  RETURN_IF_ERROR(k.ToHost(losses.data(), a.losses.raw_data(), sizeof(float) * size_t(n)));
  double sum = 0;
  for (float loss : losses) sum += loss;
  return float(sum / n);
}

// Long, and kept whole: backward in the reverse order of the forward (LM head, ln_f,
// the layers, the embedding), each unit opened and closed where it is used.
absl::Status GPT::RunBackward(Activations& a, const Activations& ids, float dloss,
                              const float* d_output, float* d_input, const GradientsReady& ready) {
  Kernels& k = *kernels_;
  const int b = a.batch, t = config_.seq_len, c = config_.n_embd, vl = vocab_local();
  const int n = b * t, rows = split_.Rows(n);
  const BlockScratch& s = block_scratch_;
  const LayerRange& range = layout_.chunks()[size_t(a.chunk)];
  const bool first = FirstChunk(a.chunk), last = LastChunk(a.chunk);
  // Closes the gradients of `unit`, releases its parameters, and tells `ready`.
  auto finish = [&](int unit) -> absl::Status {
    RETURN_IF_ERROR(weights_->CloseGrads(unit));
    RETURN_IF_ERROR(weights_->ReleaseParams(unit));
    const ParamUnit& u = layout_.units()[unit];
    return ready ? ready(u.begin, u.end) : absl::OkStatus();
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
    RETURN_IF_ERROR(split_.ColumnLinearBackward(k, dlnf, s.whole, ge.wte, nullptr, dlogits,
                                                a.lnf, e.operands(e.wte), b, t, c, vl, s.comm,
                                                "lm_head"));
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
      RETURN_IF_ERROR(BlockForward(k, config_, split_, l, b, bound, x, acts, s, experts_));
    }
    RETURN_IF_ERROR(BlockBackward(k, config_, split_, l, b, bound, BindBlock(layout_, l, g), x,
                                  acts, s, dloss, dresidual_, experts_));
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
      if (experts_ != nullptr) {  // rows to and from the other ranks, C values each
        const int me = experts_->rank(), ranks = experts_->size();
        int64_t out = 0, back = 0;
        for (int j = 0; j < ranks; ++j) {
          if (j == me) continue;
          out += r.send_rows[size_t(j)] * config_.n_embd;
          back += r.recv_rows[size_t(j)] * config_.n_embd;
        }
        const int64_t operand = int64_t(SizeOf(kernels_->activation_operand_type()));
        expert_bytes_.counts += int64_t(ranks - 1) * (config_.n_experts / ranks) * 8;
        expert_bytes_.forward += out * operand + back * 4;
        expert_bytes_.backward += out * 4 + back * 4;
      }
    }
    RETURN_IF_ERROR(finish(unit));
  }
  if (!first) {
    return k.Copy(d_input, dresidual_, sizeof(float) * size_t(rows) * c);
  }
  if (!last) RETURN_IF_ERROR(open_embeddings());
  const EmbeddingTensors ge = BindEmbeddings(layout_, embedding_grads);
  RETURN_IF_ERROR(split_.EmbeddingBackward(k, ge.wte, ge.wpe, dresidual_,
                                                           s.whole, ids.tokens.data<int32_t>(), b,
                                                           t, c, vl, s.comm, "embedding"));
  return finish(kEmbeddings);
}

}  // namespace tally::model
