#include "core/parallel/tensor_parallel.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string_view>

#include "core/runtime/comm/ledger/names.h"
#include "core/runtime/status_macros.h"

namespace tally::parallel {

absl::Status TensorParallel::Copy(TypedPtr to, ConstTypedPtr from, int64_t count) const {
  CHECK(to.type == from.type) << "Copy between types";
  return Tensor::Borrow(to, count, device_)
      .CopyFrom(Tensor::Borrow({const_cast<void*>(from.data), from.type}, count, device_));
}

absl::Status TensorParallel::AllReduce(float* data, int64_t n, const std::string& scope,
                                       comm::ReduceOp op, const SentAs& sent_as) const {
  if (size() == 1) return absl::OkStatus();
  comm::LabelScope label(group_->ledger(), scope);
  return sent_as.AllReduce(*group_, Tensor::Borrow(data, n, device_), op);
}

absl::Status TensorParallel::SequenceAllGather(ConstTypedPtr part, TypedPtr whole, float* scratch,
                                               int b, int t, int c,
                                               const std::string& scope) const {
  CHECK(part.type == whole.type) << "a gather between types";
  const int n = size(), tl = t / n;
  const int64_t run = int64_t(tl) * c, chunk = b * run;
  const TypedPtr gathered(scratch, whole.type);
  {
    comm::LabelScope label(group_->ledger(), scope);
    Tensor mine = Tensor::Borrow({const_cast<void*>(part.data), part.type}, chunk, device_);
    Tensor all = Tensor::Borrow(gathered, n * chunk, device_);
    RETURN_IF_ERROR(activations_.AllGather(*group_, mine, all));
  }
  // Rank-major (rank, b, t/N, c) to (b, t, c).
  for (int r = 0; r < n; ++r) {
    for (int i = 0; i < b; ++i) {
      RETURN_IF_ERROR(Copy(whole + (int64_t(i) * t + int64_t(r) * tl) * c,
                           gathered + (int64_t(r) * b + i) * run, run));
    }
  }
  return absl::OkStatus();
}

absl::Status TensorParallel::SequenceReduceScatter(const float* whole, float* part, float* scratch,
                                                   int b, int t, int c,
                                                   const std::string& scope) const {
  const int n = size(), tl = t / n;
  const int64_t run = int64_t(tl) * c, chunk = b * run;
  // (b, t, c) to rank-major (rank, b, t/N, c): chunk r is what rank r keeps.
  for (int r = 0; r < n; ++r) {
    for (int i = 0; i < b; ++i) {
      RETURN_IF_ERROR(Copy(scratch + (int64_t(r) * b + i) * run,
                           whole + (int64_t(i) * t + int64_t(r) * tl) * c, run));
    }
  }
  comm::LabelScope label(group_->ledger(), scope);
  Tensor all = Tensor::Borrow(scratch, n * chunk, device_);
  Tensor mine = Tensor::Borrow(part, chunk, device_);
  return activations_.ReduceScatter(*group_, all, mine, comm::ReduceOp::kSum);
}

absl::Status TensorParallel::ColumnLinearForward(Kernels& k, float* y, ConstTypedPtr x,
                                                 TypedPtr x_whole, ConstTypedPtr w, const float* b,
                                                 int batch, int t, int in, int out_local,
                                                 float* scratch, const std::string& scope) const {
  ConstTypedPtr input = x;
  if (sequence_parallel()) {  // f: gather the sequence
    RETURN_IF_ERROR(SequenceAllGather(x, x_whole, scratch, batch, t, in, scope));
    input = x_whole;
  }
  return k.LinearForward(y, input, w, b, batch * t, in, out_local);
}

absl::Status TensorParallel::ColumnLinearBackward(Kernels& k, float* dx,
                                          float* dx_whole, float* dw, float* db, const float* dy,
                                          ConstTypedPtr x_whole, ConstTypedPtr w, int batch, int t,
                                          int in, int out_local, float* scratch,
                                          const std::string& scope) const {
  const int n = batch * t;
  float* whole = sequence_parallel() ? dx_whole : dx;
  RETURN_IF_ERROR(k.LinearBackward(whole, dw, db, dy, x_whole, w, n, in, out_local));
  // f's backward: the input's gradient summed over the group.
  if (sequence_parallel()) {
    return SequenceReduceScatter(whole, dx, scratch, batch, t, in, scope);
  }
  return AllReduce(dx, int64_t(n) * in, scope, comm::ReduceOp::kSum, activations_);
}

absl::Status TensorParallel::RowLinearForward(Kernels& k, float* y,
                                      float* y_whole, ConstTypedPtr x, ConstTypedPtr w,
                                      const float* b, int batch, int t, int in_local, int out,
                                      float* scratch, const std::string& scope) const {
  const int n = batch * t;
  if (size() == 1) return k.LinearForward(y, x, w, b, n, in_local, out);
  float* whole = sequence_parallel() ? y_whole : y;
  RETURN_IF_ERROR(k.LinearForward(whole, x, w, nullptr, n, in_local, out));
  if (sequence_parallel()) {  // g
    RETURN_IF_ERROR(SequenceReduceScatter(whole, y, scratch, batch, t, out, scope));
  } else {
    RETURN_IF_ERROR(AllReduce(y, int64_t(n) * out, scope, comm::ReduceOp::kSum, activations_));
  }
  return b != nullptr ? k.AddBias(y, b, Rows(n), out) : absl::OkStatus();
}

absl::Status TensorParallel::RowLinearBackward(Kernels& k, float* dx, float* dw,
                                       float* db, const float* dy, float* dy_whole, ConstTypedPtr x,
                                       ConstTypedPtr w, int batch, int t, int in_local, int out,
                                       float* scratch, const std::string& scope) const {
  const float* grad = dy;
  if (sequence_parallel()) {  // g's backward: gather the sequence
    RETURN_IF_ERROR(SequenceAllGather(dy, dy_whole, scratch, batch, t, out, scope));
    grad = dy_whole;
  }
  return k.LinearBackward(dx, dw, db, grad, x, w, batch * t, in_local, out);
}

namespace {

// Row i of this rank's activations is position offset + i % period of its sequence (under
// sequence parallelism a rank holds its part of each sequence).
struct Positions {
  int period, offset;
};

Positions PositionsOf(const TensorParallel& tp, int t) {
  if (!tp.sequence_parallel()) return {t, 0};
  const int tl = t / tp.size();
  return {tl, tp.rank() * tl};
}

}  // namespace

absl::Status TensorParallel::EmbeddingForward(Kernels& k, float* x,
                                           float* x_whole, const int32_t* tokens,
                                           const float* wte_local, const float* wpe, int batch,
                                           int t, int c, int vocab_local, float* scratch,
                                           const std::string& scope) const {
  const int64_t first = int64_t(rank()) * vocab_local, n = int64_t(batch) * t;
  float* whole = sequence_parallel() ? x_whole : x;
  RETURN_IF_ERROR(k.EmbeddingLookup(whole, tokens, wte_local, first, vocab_local, n, c));
  // g: each row comes from one rank.
  if (sequence_parallel()) {
    RETURN_IF_ERROR(SequenceReduceScatter(whole, x, scratch, batch, t, c, scope));
  } else {
    RETURN_IF_ERROR(AllReduce(x, n * c, scope, comm::ReduceOp::kSum, activations_));
  }
  const Positions positions = PositionsOf(*this, t);
  return k.AddPositions(x, wpe, Rows(int(n)), positions.period, positions.offset, c);
}

absl::Status TensorParallel::EmbeddingBackward(Kernels& k, float* dwte_local,
                                            float* dwpe, const float* dx, float* dx_whole,
                                            const int32_t* tokens, int batch, int t, int c,
                                            int vocab_local, float* scratch,
                                            const std::string& scope) const {
  const int64_t first = int64_t(rank()) * vocab_local, n = int64_t(batch) * t;
  const float* all = dx;
  if (sequence_parallel()) {
    RETURN_IF_ERROR(SequenceAllGather(dx, dx_whole, scratch, batch, t, c, scope));
    all = dx_whole;
  }
  RETURN_IF_ERROR(k.EmbeddingLookupBackward(dwte_local, all, tokens, first, vocab_local, n, c));
  const Positions positions = PositionsOf(*this, t);
  return k.AddPositionsBackward(dwpe, dx, Rows(int(n)), positions.period, positions.offset, c);
}

absl::Status TensorParallel::CrossEntropyForward(Kernels& k, float* losses,
                                              float* probs, float* scratch, const float* logits,
                                              const int32_t* targets, int n, int vocab_local,
                                              int vocab, const std::string& scope) const {
  const int64_t first = int64_t(rank()) * vocab_local;
  // The columns of this rank that are real vocabulary entries, not padding.
  const int valid = int(std::clamp<int64_t>(vocab - first, 0, vocab_local));
  float* max = scratch;
  float* sum = scratch + n;
  float* target = scratch + 2 * int64_t(n);
  RETURN_IF_ERROR(k.LogitMax(max, logits, n, vocab_local, valid));
  RETURN_IF_ERROR(AllReduce(max, n, scope, comm::ReduceOp::kMax));
  // The global max: exp cannot overflow.
  RETURN_IF_ERROR(
      k.SoftmaxExp(probs, sum, target, logits, max, targets, first, n, vocab_local, valid));
  RETURN_IF_ERROR(AllReduce(sum, n, scope));
  RETURN_IF_ERROR(AllReduce(target, n, scope));  // one rank holds each target's logit
  return k.SoftmaxLoss(probs, losses, sum, target, max, n, vocab_local, valid);
}

absl::Status TensorParallel::CrossEntropyBackward(Kernels& k, float* dlogits,
                                               const float* probs, const int32_t* targets,
                                               float dloss, int n, int vocab_local) const {
  const int64_t first = int64_t(rank()) * vocab_local;
  return k.CrossEntropyBackward(dlogits, probs, targets, first, dloss, n, vocab_local);
}

namespace {

// One micro-batch's collectives under one scope (kLayers: every layer's attn and mlp).
constexpr char kLayers[] = "layer";
struct ScopeCollective {
  const char* scope;
  comm::Primitive primitive;
  bool per_row;  // one float per row (cross-entropy), else the (rows, n_embd) activations
};

std::vector<ScopeCollective> MicroBatchCollectives(bool sequence_parallel, bool forward) {
  using comm::Primitive;
  const Primitive ar = Primitive::kAllReduce, ag = Primitive::kAllGather;
  const Primitive rs = Primitive::kReduceScatter;
  if (!sequence_parallel) {
    if (forward) {
      return {{kLayers, ar, false},
              {comm::scope::kEmbedding, ar, false},
              {comm::scope::kCrossEntropy, ar, true},
              {comm::scope::kCrossEntropy, ar, true},
              {comm::scope::kCrossEntropy, ar, true}};
    }
    return {{kLayers, ar, false}, {comm::scope::kLmHead, ar, false}};
  }
  if (forward) {
    return {{kLayers, ag, false},
            {kLayers, rs, false},
            {comm::scope::kEmbedding, rs, false},
            {comm::scope::kLmHead, ag, false},
            {comm::scope::kCrossEntropy, ar, true},
            {comm::scope::kCrossEntropy, ar, true},
            {comm::scope::kCrossEntropy, ar, true}};
  }
  return {{kLayers, ag, false},
          {kLayers, rs, false},
          {comm::scope::kEmbedding, ag, false},
          {comm::scope::kLmHead, rs, false}};
}

// The ledger scopes a collective of MicroBatchCollectives runs under on this rank.
std::vector<std::string> ScopesOf(const TensorParallelShape& s, std::string_view scope) {
  std::vector<std::string> scopes;
  if (scope == kLayers) {
    for (int l : s.layers) {
      scopes.push_back(comm::scope::Layer(l, comm::scope::kAttn));
      if (!s.experts) scopes.push_back(comm::scope::Layer(l, comm::scope::kMlp));
    }
  } else if (scope == comm::scope::kEmbedding ? s.embedding : s.lm_head) {
    scopes.emplace_back(scope);
  }
  return scopes;
}

}  // namespace

comm::ExpectedCalls TensorParallelCalls(const TensorParallelShape& s) {
  comm::ExpectedCalls calls;
  // Each micro-batch's calls of the forward's list or the backward's, booked in `phase`
  // (the layers' alone: `layers_only`).
  auto add = [&](bool forward_list, comm::Phase phase, bool layers_only) {
    for (const ScopeCollective& c : MicroBatchCollectives(s.sequence_parallel, forward_list)) {
      if (layers_only && std::string_view(c.scope) != kLayers) continue;
      for (std::string& scope : ScopesOf(s, c.scope)) {
        calls.push_back({.group = comm::group::kTp,
                         .primitive = c.primitive,
                         .phase = phase,
                         .scope = std::move(scope),
                         .count = c.per_row ? s.rows : s.rows * s.n_embd,
                         .element = c.per_row ? 4 : s.activation_bytes,  // fp32 statistics
                         .calls = s.micro_batches,
                         .ranks = s.ranks,
                         .rank = s.rank});
      }
    }
  };
  add(/*forward_list=*/true, comm::Phase::kForward, false);
  // A recomputed forward calls again in backward: a stage's all of them, a layer's its own.
  if (s.recompute || s.recompute_layers) {
    add(/*forward_list=*/true, comm::Phase::kBackward, /*layers_only=*/!s.recompute);
  }
  add(/*forward_list=*/false, comm::Phase::kBackward, false);
  return calls;
}

}  // namespace tally::parallel
