#include "parallel/tensor_parallel.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "runtime/kernels/cpu/fast_math.h"
#include "runtime/kernels/cpu/linear.h"
#include "runtime/status_macros.h"

namespace tally::parallel {

absl::Status TensorParallel::AllReduce(float* data, int64_t n, const std::string& scope,
                                       comm::ReduceOp op) const {
  if (size() == 1) return absl::OkStatus();
  comm::LabelScope label(group_->ledger(), scope);
  Tensor view = Tensor::Borrow(data, n);
  return group_->AllReduce(view, op);
}

void ColumnParallelLinearForward(float* y, const float* x, const float* w, const float* b,
                                 int n, int in, int out_local) {
  cpu::LinearForward(y, x, w, b, n, in, out_local);
}

absl::Status ColumnParallelLinearBackward(const TensorParallel& tp, float* dx, float* dw,
                                          float* db, const float* dy, const float* x,
                                          const float* w, int n, int in, int out_local,
                                          const std::string& scope) {
  cpu::LinearBackward(dx, dw, db, dy, x, w, n, in, out_local);
  return tp.AllReduce(dx, int64_t(n) * in, scope);  // f
}

absl::Status RowParallelLinearForward(const TensorParallel& tp, float* y, const float* x,
                                      const float* w, const float* b, int n, int in_local,
                                      int out, const std::string& scope) {
  if (tp.size() == 1) {
    cpu::LinearForward(y, x, w, b, n, in_local, out);
    return absl::OkStatus();
  }
  cpu::LinearForward(y, x, w, static_cast<const float*>(nullptr), n, in_local, out);
  RETURN_IF_ERROR(tp.AllReduce(y, int64_t(n) * out, scope));  // g
  if (b != nullptr) {
    for (int i = 0; i < n; ++i) {
      float* row = y + int64_t(i) * out;
      for (int j = 0; j < out; ++j) row[j] += b[j];
    }
  }
  return absl::OkStatus();
}

void RowParallelLinearBackward(float* dx, float* dw, float* db, const float* dy, const float* x,
                               const float* w, int n, int in_local, int out) {
  cpu::LinearBackward(dx, dw, db, dy, x, w, n, in_local, out);
}

absl::Status VocabParallelEmbeddingForward(const TensorParallel& tp, float* x,
                                           const int32_t* tokens, const float* wte_local,
                                           const float* wpe, int b, int t, int c,
                                           int vocab_local, const std::string& scope) {
  const int64_t first = int64_t(tp.rank()) * vocab_local, n = int64_t(b) * t;
  for (int64_t i = 0; i < n; ++i) {
    float* out = x + i * c;
    const int64_t row = tokens[i] - first;
    if (row >= 0 && row < vocab_local) {
      std::memcpy(out, wte_local + row * c, sizeof(float) * size_t(c));
    } else {
      std::fill(out, out + c, 0.0f);
    }
  }
  RETURN_IF_ERROR(tp.AllReduce(x, n * c, scope));  // g: each row comes from one rank
  for (int64_t i = 0; i < n; ++i) {
    const float* pos = wpe + (i % t) * c;
    float* out = x + i * c;
    for (int k = 0; k < c; ++k) out[k] += pos[k];
  }
  return absl::OkStatus();
}

void VocabParallelEmbeddingBackward(const TensorParallel& tp, float* dwte_local, float* dwpe,
                                    const float* dx, const int32_t* tokens, int b, int t, int c,
                                    int vocab_local) {
  const int64_t first = int64_t(tp.rank()) * vocab_local, n = int64_t(b) * t;
  for (int64_t i = 0; i < n; ++i) {
    const float* g = dx + i * c;
    float* pos = dwpe + (i % t) * c;
    const int64_t row = tokens[i] - first;
    float* tok = row >= 0 && row < vocab_local ? dwte_local + row * c : nullptr;
    for (int k = 0; k < c; ++k) {
      if (tok != nullptr) tok[k] += g[k];
      pos[k] += g[k];
    }
  }
}

absl::Status VocabParallelCrossEntropyForward(const TensorParallel& tp, float* losses,
                                              float* probs, float* scratch, const float* logits,
                                              const int32_t* targets, int n, int vocab_local,
                                              int vocab, const std::string& scope) {
  const int64_t first = int64_t(tp.rank()) * vocab_local;
  // The columns of this rank that are real vocabulary entries, not padding.
  const int valid = int(std::clamp<int64_t>(vocab - first, 0, vocab_local));
  float* max = scratch;
  float* sum = scratch + n;
  float* target = scratch + 2 * int64_t(n);
  for (int i = 0; i < n; ++i) {
    const float* row = logits + int64_t(i) * vocab_local;
    float m = -INFINITY;
    for (int j = 0; j < valid; ++j) m = std::max(m, row[j]);
    max[i] = m;
  }
  RETURN_IF_ERROR(tp.AllReduce(max, n, scope, comm::ReduceOp::kMax));
  for (int i = 0; i < n; ++i) {
    const float* row = logits + int64_t(i) * vocab_local;
    float* p = probs + int64_t(i) * vocab_local;
    float s = 0;
    for (int j = 0; j < valid; ++j) {
      p[j] = cpu::FastExp(row[j] - max[i]);  // the global max: exp cannot overflow
      s += p[j];
    }
    std::fill(p + valid, p + vocab_local, 0.0f);
    sum[i] = s;
    const int64_t column = targets[i] - first;
    target[i] = column >= 0 && column < valid ? row[column] : 0.0f;
  }
  RETURN_IF_ERROR(tp.AllReduce(sum, n, scope));
  RETURN_IF_ERROR(tp.AllReduce(target, n, scope));  // one rank holds each target's logit
  for (int i = 0; i < n; ++i) {
    float* p = probs + int64_t(i) * vocab_local;
    const float inv = 1.0f / sum[i];
    for (int j = 0; j < valid; ++j) p[j] *= inv;
    // log p[target] from the logits, which keeps precision where p underflows.
    losses[i] = std::log(sum[i]) - (target[i] - max[i]);
  }
  return absl::OkStatus();
}

void VocabParallelCrossEntropyBackward(const TensorParallel& tp, float* dlogits,
                                       const float* probs, const int32_t* targets, float dloss,
                                       int n, int vocab_local) {
  const int64_t first = int64_t(tp.rank()) * vocab_local;
  for (int i = 0; i < n; ++i) {
    const float* p = probs + int64_t(i) * vocab_local;
    float* d = dlogits + int64_t(i) * vocab_local;
    for (int j = 0; j < vocab_local; ++j) d[j] = p[j] * dloss;
    const int64_t column = targets[i] - first;
    if (column >= 0 && column < vocab_local) d[column] -= dloss;
  }
}

}  // namespace tally::parallel
