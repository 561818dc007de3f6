// Where a micro-batch's activations live (gpt.h): the sets carved from two buffers, fp32
// and the matmuls' operands, as core/model/activations.h counts them; the scratch the layers
// share; and under layer recompute the room every layer's activations pass through.
#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "core/model/gpt.h"
#include "core/runtime/status_macros.h"

namespace tally::model {

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
  const int64_t t = positions(), c = config_.n_embd;
  const int64_t n = b * t, v = vocab_local(), r = split_.Rows(int(n));
  const LayerRange& range = layout_.model_chunks()[size_t(chunk)];
  const int64_t layers = range.end - range.begin;
  const bool last = LastModelChunk(chunk);
  const MicroBatchActivations sizes = CountActivations(ActivationsShape(), b, layers, last, whole);
  auto empty = [&](int64_t count, DType dtype) {
    return Tensor::Empty({count}, dtype, alloc_, MemoryCategory::kActivations);
  };
  Activations a;
  a.batch = b;
  a.model_chunk = chunk;
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
  const int64_t t = positions(), c = config_.n_embd, nh = config_.n_head / split_.size();
  const int64_t cl = c / split_.size(), hidden = 4 * c / split_.size();
  const int64_t n = b * t, r = split_.Rows(int(n));
  const int64_t moe_rows = config_.moe() ? n * config_.moe_top_k : 0;
  const int64_t expert_rows = moe_rows * expert_ranks();
  x.ln1 = at.TakeOperand(n * c);
  x.ln1_mean = at.Take(r);
  x.ln1_rstd = at.Take(r);
  x.qkv = at.TakeOperand(n * 3 * cl);
  // Selective recompute: in the scratch (block.h). Context parallelism: what its attention
  // keeps for backward.
  x.att = sequence_ != nullptr                 ? at.Take(sequence_->Kept(int(b), int(cl), int(nh)))
          : recompute_ == Recompute::kAttention ? nullptr
                                                : at.Take(b * nh * t * t);
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

// Long, and kept whole: the scratch is carved in one pass, in the order CountScratch
// sizes it, so that the check at its end can hold the two to each other.
absl::Status GPT::EnsureScratch(int b) {
  if (b == scratch_batch_) return absl::OkStatus();
  if (positions() % split_.size() != 0 && split_.sequence_parallel()) {
    return absl::InvalidArgumentError(absl::StrCat("[GPT] seq_len=", config_.seq_len,
                                                   " is not divisible by tp=", split_.size(),
                                                   " (sequence parallelism splits it)"));
  }
  if (sequence_ != nullptr && recompute_ == Recompute::kAttention) {
    return absl::InvalidArgumentError(absl::StrCat(
        "[GPT] context parallelism (cp=", sequence_->size(),
        ") keeps no probabilities to make again (no selective recompute)"));
  }
  const int64_t t = positions(), c = config_.n_embd, n = b * t, r = split_.Rows(int(n));
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
  position_rows_ = sequence_ != nullptr ? take(t * c) : nullptr;
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


ActivationShape GPT::ActivationsShape() const {
  const int nh = config_.n_head / split_.size(), cl = config_.n_embd / split_.size();
  ActivationShape shape{config_,
                        split_.size(),
                        split_.sequence_parallel(),
                        expert_ranks(),
                        experts_ != nullptr,
                        vocab_local(),
                        kernels_->AttentionScratch(config_.seq_len, nh),
                        recompute_};
  if (sequence_ != nullptr) {  // no serial attention backward: its kept values instead
    shape.cp = sequence_->size();
    shape.attention_scratch = 0;
    shape.attention_kept = sequence_->Kept(1, cl, nh);
  }
  return shape;
}

}  // namespace tally::model
