#include "core/model/layer_split.h"

#include <algorithm>

#include "core/runtime/status_macros.h"

namespace tally::model {

const Serial& Serial::Instance() {
  static const Serial serial;
  return serial;
}

absl::Status Serial::ColumnLinearForward(Kernels& k, float* y, ConstTypedPtr x, TypedPtr,
                                         ConstTypedPtr w, const float* b, int batch, int t, int in,
                                         int out_local, float*, const std::string&) const {
  return k.LinearForward(y, x, w, b, batch * t, in, out_local);
}

absl::Status Serial::ColumnLinearBackward(Kernels& k, float* dx, float*, float* dw, float* db,
                                          const float* dy, ConstTypedPtr x_whole, ConstTypedPtr w,
                                          int batch, int t, int in, int out_local, float*,
                                          const std::string&) const {
  return k.LinearBackward(dx, dw, db, dy, x_whole, w, batch * t, in, out_local);
}

absl::Status Serial::RowLinearForward(Kernels& k, float* y, float*, ConstTypedPtr x,
                                      ConstTypedPtr w, const float* b, int batch, int t,
                                      int in_local, int out, float*, const std::string&) const {
  return k.LinearForward(y, x, w, b, batch * t, in_local, out);
}

absl::Status Serial::RowLinearBackward(Kernels& k, float* dx, float* dw, float* db, const float* dy,
                                       float*, ConstTypedPtr x, ConstTypedPtr w, int batch, int t,
                                       int in_local, int out, float*, const std::string&) const {
  return k.LinearBackward(dx, dw, db, dy, x, w, batch * t, in_local, out);
}

absl::Status Serial::EmbeddingForward(Kernels& k, float* x, float*, const int32_t* tokens,
                                      const float* wte_local, const float* wpe, int batch, int t,
                                      int c, int vocab_local, float*, const std::string&) const {
  const int64_t n = int64_t(batch) * t;
  RETURN_IF_ERROR(k.EmbeddingLookup(x, tokens, wte_local, 0, vocab_local, n, c));
  return k.AddPositions(x, wpe, int(n), t, 0, c);
}

absl::Status Serial::EmbeddingBackward(Kernels& k, float* dwte_local, float* dwpe, const float* dx,
                                       float*, const int32_t* tokens, int batch, int t, int c,
                                       int vocab_local, float*, const std::string&) const {
  const int64_t n = int64_t(batch) * t;
  RETURN_IF_ERROR(k.EmbeddingLookupBackward(dwte_local, dx, tokens, 0, vocab_local, n, c));
  return k.AddPositionsBackward(dwpe, dx, int(n), t, 0, c);
}

absl::Status Serial::CrossEntropyForward(Kernels& k, float* losses, float* probs, float* scratch,
                                         const float* logits, const int32_t* targets, int n,
                                         int vocab_local, int vocab, const std::string&) const {
  // The columns that are real vocabulary entries, not padding.
  const int valid = std::min(vocab, vocab_local);
  float* max = scratch;
  float* sum = scratch + n;
  float* target = scratch + 2 * int64_t(n);
  RETURN_IF_ERROR(k.LogitMax(max, logits, n, vocab_local, valid));
  RETURN_IF_ERROR(k.SoftmaxExp(probs, sum, target, logits, max, targets, 0, n, vocab_local, valid));
  return k.SoftmaxLoss(probs, losses, sum, target, max, n, vocab_local, valid);
}

absl::Status Serial::CrossEntropyBackward(Kernels& k, float* dlogits, const float* probs,
                                          const int32_t* targets, float dloss, int n,
                                          int vocab_local) const {
  return k.CrossEntropyBackward(dlogits, probs, targets, 0, dloss, n, vocab_local);
}

}  // namespace tally::model
