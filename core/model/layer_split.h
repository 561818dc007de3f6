// How the model's split operations run: the linears whose weights may be split over
// ranks (column- and row-parallel), the embedding and the cross-entropy over a
// vocabulary that may be split, and the shape facts the model needs from the split. The
// model calls only this interface; it never knows the strategy behind it.
//
//   Serial (below)                      every operation its serial module
//   parallel::TensorParallel            Megatron's tensor parallelism over a group, with
//                                       or without sequence parallelism
//                                       (core/parallel/tensor_parallel.h)
//
// The arguments of every operation are those of Megatron's split (a rank's slice of a
// weight, the activations' rows on this rank, the whole activations a split layer
// needs); with one rank each is its serial module, operation for operation. Shapes: b
// sequences of t tokens, n = b·t rows; activations row-major; every pointer on the
// kernels' device. The linears' inputs (x, x_whole) and weights (w) are fp32, or bf16 when
// the kernels' matmuls take bf16 (Kernels::activation_operand_type()). `scope` names the
// operation's collectives in the traffic ledger.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "core/runtime/kernels/kernels.h"

namespace tally::model {

class LayerSplit {
 public:
  virtual ~LayerSplit() = default;

  // Ranks that share each layer (1: serial), and this rank among them.
  virtual int size() const = 0;
  virtual int rank() const = 0;
  // Whether the activations between the split layers hold this rank's part of each
  // sequence (Megatron's sequence parallelism) rather than every row.
  virtual bool sequence_parallel() const = 0;
  // Rows of the activations between the split layers for n = b·t tokens.
  int Rows(int n) const { return sequence_parallel() ? n / size() : n; }

  // Column-parallel: W (out, in) split by output rows, this rank holding out_local of
  // them (and of b, which may be null). y (n, out_local) = x_whole · W_rᵀ + b_r, where
  // x_whole is x (rows, in) gathered along the sequence under sequence parallelism (into
  // x_whole, which backward needs) and x itself otherwise (pass null).
  virtual absl::Status ColumnLinearForward(Kernels& k, float* y, ConstTypedPtr x, TypedPtr x_whole,
                                           ConstTypedPtr w, const float* b, int batch, int t,
                                           int in, int out_local, float* scratch,
                                           const std::string& scope) const = 0;
  // dx_whole (n, in) = dy_r · W_r, summed over the ranks into dx (rows, in) (dx is
  // dx_whole without sequence parallelism); dW_r += dy_rᵀ · x_whole; db_r += Σ dy_r (db
  // may be null).
  virtual absl::Status ColumnLinearBackward(Kernels& k, float* dx, float* dx_whole, float* dw,
                                            float* db, const float* dy, ConstTypedPtr x_whole,
                                            ConstTypedPtr w, int batch, int t, int in,
                                            int out_local, float* scratch,
                                            const std::string& scope) const = 0;
  // Row-parallel: W (out, in) split by input columns, x_r (n, in_local) this rank's
  // slice of the input. y (rows, out) = Σ_ranks x_r · W_rᵀ, then b (whole, may be null)
  // added once; y_whole (n, out) is the partial product's room under sequence
  // parallelism (null otherwise).
  virtual absl::Status RowLinearForward(Kernels& k, float* y, float* y_whole, ConstTypedPtr x,
                                        ConstTypedPtr w, const float* b, int batch, int t,
                                        int in_local, int out, float* scratch,
                                        const std::string& scope) const = 0;
  // dy (rows, out) gathered into dy_whole (n, out) under sequence parallelism (null
  // otherwise); dx_r = dy_whole · W_r, dW_r += dy_wholeᵀ · x_r, db += Σ dy_whole.
  virtual absl::Status RowLinearBackward(Kernels& k, float* dx, float* dw, float* db,
                                         const float* dy, float* dy_whole, ConstTypedPtr x,
                                         ConstTypedPtr w, int batch, int t, int in_local, int out,
                                         float* scratch, const std::string& scope) const = 0;

  // x (rows, c) = wte[token] + wpe[position], this rank holding vocabulary rows
  // [rank·vocab_local, ...) of wte; x_whole (n, c) is the lookup's room under sequence
  // parallelism (null otherwise).
  virtual absl::Status EmbeddingForward(Kernels& k, float* x, float* x_whole,
                                        const int32_t* tokens, const float* wte_local,
                                        const float* wpe, int batch, int t, int c,
                                        int vocab_local, float* scratch,
                                        const std::string& scope) const = 0;
  // dwte_r += dx of the tokens in this rank's rows of the vocabulary; dwpe += dx.
  virtual absl::Status EmbeddingBackward(Kernels& k, float* dwte_local, float* dwpe,
                                         const float* dx, float* dx_whole, const int32_t* tokens,
                                         int batch, int t, int c, int vocab_local, float* scratch,
                                         const std::string& scope) const = 0;

  // The softmax cross-entropy over the whole vocabulary (its first `vocab` entries; the
  // padding after them takes no part) from this rank's logits (n, vocab_local): losses
  // (n), and this rank's slice of the softmax in probs (n, vocab_local). `scratch` holds
  // 3·n floats.
  virtual absl::Status CrossEntropyForward(Kernels& k, float* losses, float* probs,
                                           float* scratch, const float* logits,
                                           const int32_t* targets, int n, int vocab_local,
                                           int vocab, const std::string& scope) const = 0;
  // dlogits_r = (probs_r - onehot_r(targets)) · dloss (dlogits may be probs itself).
  virtual absl::Status CrossEntropyBackward(Kernels& k, float* dlogits, const float* probs,
                                            const int32_t* targets, float dloss, int n,
                                            int vocab_local) const = 0;
};

// One rank holds everything: every operation is its serial module.
class Serial final : public LayerSplit {
 public:
  int size() const override { return 1; }
  int rank() const override { return 0; }
  bool sequence_parallel() const override { return false; }
  absl::Status ColumnLinearForward(Kernels& k, float* y, ConstTypedPtr x, TypedPtr x_whole,
                                   ConstTypedPtr w, const float* b, int batch, int t, int in,
                                   int out_local, float* scratch,
                                   const std::string& scope) const override;
  absl::Status ColumnLinearBackward(Kernels& k, float* dx, float* dx_whole, float* dw, float* db,
                                    const float* dy, ConstTypedPtr x_whole, ConstTypedPtr w,
                                    int batch, int t, int in, int out_local, float* scratch,
                                    const std::string& scope) const override;
  absl::Status RowLinearForward(Kernels& k, float* y, float* y_whole, ConstTypedPtr x,
                                ConstTypedPtr w, const float* b, int batch, int t, int in_local,
                                int out, float* scratch, const std::string& scope) const override;
  absl::Status RowLinearBackward(Kernels& k, float* dx, float* dw, float* db, const float* dy,
                                 float* dy_whole, ConstTypedPtr x, ConstTypedPtr w, int batch,
                                 int t, int in_local, int out, float* scratch,
                                 const std::string& scope) const override;
  absl::Status EmbeddingForward(Kernels& k, float* x, float* x_whole, const int32_t* tokens,
                                const float* wte_local, const float* wpe, int batch, int t, int c,
                                int vocab_local, float* scratch,
                                const std::string& scope) const override;
  absl::Status EmbeddingBackward(Kernels& k, float* dwte_local, float* dwpe, const float* dx,
                                 float* dx_whole, const int32_t* tokens, int batch, int t, int c,
                                 int vocab_local, float* scratch,
                                 const std::string& scope) const override;
  absl::Status CrossEntropyForward(Kernels& k, float* losses, float* probs, float* scratch,
                                   const float* logits, const int32_t* targets, int n,
                                   int vocab_local, int vocab,
                                   const std::string& scope) const override;
  absl::Status CrossEntropyBackward(Kernels& k, float* dlogits, const float* probs,
                                    const int32_t* targets, float dloss, int n,
                                    int vocab_local) const override;

  // The one Serial a model without a LayerSplit of its own uses.
  static const Serial& Instance();
};

}  // namespace tally::model
