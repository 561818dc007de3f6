// Kernels: every operation the model and its optimizer run, on one device. The model's
// code (core/model/, core/parallel/tensor_parallel.cc, core/optim/) calls these and never a device's
// kernels directly, so the same lines train on the CPU and on a GPU:
//
//   ASSIGN_OR_RETURN(std::unique_ptr<Kernels> k, Kernels::Create(alloc.device()));
//   RETURN_IF_ERROR(k->LayerNormForward(y, mean, rstd, x, w, b, n, c));
//
// Pointers are the device's: host memory for the CPU, device memory for CUDA (the
// Allocator of that device hands it out). The CPU kernels (core/runtime/kernels/cpu) are the
// reference, and their headers say what each operation computes; the CUDA ones
// (core/runtime/kernels/cuda) are tested against them. On CUDA the work is queued in order
// on the device's default stream; ToHost waits for it.
//
// A Kernels belongs to one rank and is used from that rank's thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/runtime/device.h"
#include "core/runtime/kernels/adamw.h"
#include "core/runtime/dtype.h"
#include "core/runtime/kernels/matmul_inputs.h"

namespace tally {

class Kernels {
 public:
  // The CPU's kernels (oneDNN's matmuls), those of a CUDA device (cuBLAS), whose
  // matmuls (linear layers and attention's four products) take their operands as `inputs`
  // says (matmul_inputs.h; TF32 is CUDA's only), or the meta device's, which do nothing
  // (device.h). A CUDA device in a build or on a machine without one fails, saying why.
  static absl::StatusOr<std::unique_ptr<Kernels>> Create(
      Device device, MatmulInputs inputs = MatmulInputs::kF32);
  virtual ~Kernels() = default;
  virtual Device device() const = 0;
  virtual MatmulInputs matmul_inputs() const = 0;
  // The type the model keeps its matmuls' input activations in: bf16 when the matmuls
  // take bf16 operands (rounding them as they are made is what the matmul would do on
  // entry: the same values, half the memory), else fp32.
  DType activation_operand_type() const {
    return matmul_inputs() == MatmulInputs::kBF16 ? DType::kBF16 : DType::kF32;
  }

  // ------------------------------------------------------------------ memory
  // Within the device; host to device; device to host (waits for the queued work).
  virtual absl::Status Copy(void* to, const void* from, size_t bytes) = 0;
  virtual absl::Status FromHost(void* to, const void* host, size_t bytes) = 0;
  virtual absl::Status ToHost(void* host, const void* from, size_t bytes) = 0;
  virtual absl::Status Zero(void* to, size_t bytes) = 0;

  // ------------------------------------------------------------------ layers
  // linear.h, attention.h, layernorm.h, gelu.h. The activations a matmul reads (the
  // linears' x, attention's qkv) may be bf16 when the matmul inputs are (MatmulInputs::
  // kBF16): the model keeps them so, and the LayerNorm and GELU that produce them write bf16
  // (rounded to nearest even) into a bf16 y. Everything else is fp32.
  // The linears' weights w may be bf16 too (a bf16 store's own copy: core/model/weights.h).
  virtual absl::Status LinearForward(float* y, ConstTypedPtr x, ConstTypedPtr w, const float* b,
                                     int n, int c, int oc) = 0;
  virtual absl::Status LinearBackward(float* dx, float* dw, float* db, const float* dy,
                                      ConstTypedPtr x, ConstTypedPtr w, int n, int c, int oc) = 0;
  virtual absl::Status AttentionForward(float* y, float* att, ConstTypedPtr qkv, int b, int t,
                                        int c, int nh) = 0;
  // AttentionBackward's scratch, in floats, for nh heads of t positions.
  virtual int64_t AttentionScratch(int t, int nh) const = 0;
  virtual absl::Status AttentionBackward(float* dqkv, float* scratch, const float* dy,
                                         ConstTypedPtr qkv, const float* att, int b, int t, int c,
                                         int nh) = 0;
  virtual absl::Status LayerNormForward(TypedPtr y, float* mean, float* rstd, const float* x,
                                        const float* w, const float* b, int n, int c) = 0;
  virtual absl::Status LayerNormBackward(float* dx, float* dw, float* db, const float* dy,
                                         const float* x, const float* w, const float* mean,
                                         const float* rstd, int n, int c) = 0;
  virtual absl::Status GeluForward(TypedPtr y, const float* x, int64_t n) = 0;
  virtual absl::Status GeluBackward(float* dx, const float* x, const float* dy, int64_t n) = 0;
  // y[i] += x[i] (the residual stream).
  virtual absl::Status AddInPlace(float* y, const float* x, int64_t n) = 0;
  // Every row of y (rows, c) += b (c).
  virtual absl::Status AddBias(float* y, const float* b, int64_t rows, int c) = 0;

  // ------------------------------------------------------------------ embeddings
  // A vocabulary slice: wte holds rows [first, first + vocab) of the token embedding.
  // x (n, c) = wte[tokens[i] - first] where the token is in the slice, zeros elsewhere.
  virtual absl::Status EmbeddingLookup(float* x, const int32_t* tokens, const float* wte,
                                       int64_t first, int vocab, int64_t n, int c) = 0;
  // dwte[tokens[i] - first] += dx[i] for the slice's tokens.
  virtual absl::Status EmbeddingLookupBackward(float* dwte, const float* dx, const int32_t* tokens,
                                               int64_t first, int vocab, int64_t n, int c) = 0;
  // x (rows, c): row i += wpe[offset + i % period] (its position in the sequence).
  virtual absl::Status AddPositions(float* x, const float* wpe, int64_t rows, int period,
                                    int offset, int c) = 0;
  // dwpe[offset + i % period] += dx[i], each position's rows summed in order.
  virtual absl::Status AddPositionsBackward(float* dwpe, const float* dx, int64_t rows, int period,
                                            int offset, int c) = 0;

  // ------------------------------------------------------------------ cross-entropy
  // The softmax cross-entropy of logits (n, vocab) whose first `valid` columns count
  // (a vocabulary slice holds columns [first, first + vocab) of the whole), in the three
  // passes a vocabulary split over ranks needs, the group's sums between them:
  //   LogitMax:    max[i] = max over valid j of logits[i, j]
  //   SoftmaxExp:  probs[i, j] = exp(logits[i, j] - max[i]) (0 past valid),
  //                sum[i] = Σ_j probs[i, j], target[i] = logits[i, targets[i] - first]
  //                (0 when that column is not in the slice)
  //   SoftmaxLoss: probs[i, ·] /= sum[i], losses[i] = log sum[i] - (target[i] - max[i])
  virtual absl::Status LogitMax(float* max, const float* logits, int n, int vocab, int valid) = 0;
  virtual absl::Status SoftmaxExp(float* probs, float* sum, float* target, const float* logits,
                                  const float* max, const int32_t* targets, int64_t first, int n,
                                  int vocab, int valid) = 0;
  virtual absl::Status SoftmaxLoss(float* probs, float* losses, const float* sum,
                                   const float* target, const float* max, int n, int vocab,
                                   int valid) = 0;
  // dlogits (n, vocab) = (probs - onehot(targets - first)) · dloss; dlogits may be probs.
  virtual absl::Status CrossEntropyBackward(float* dlogits, const float* probs,
                                            const int32_t* targets, int64_t first, float dloss,
                                            int n, int vocab) = 0;

  // ------------------------------------------------------------------ precision
  // to[i] = from[i] for n elements of fp32 or bf16 each: rounded to nearest even when
  // narrowing to bf16 (BFloat16::FromFloat), exact when widening, a copy when the types
  // match.
  virtual absl::Status Convert(void* to, DType to_type, const void* from, DType from_type,
                               int64_t n) = 0;
  // to[i] = to[i] + from[i] (each fp32 or bf16), added in fp32 and rounded once to
  // to_type: how a bf16 gradient buffer takes one backward's fp32 gradients.
  virtual absl::Status Accumulate(void* to, DType to_type, const void* from, DType from_type,
                                  int64_t n) = 0;

  // ------------------------------------------------------------------ optimizer
  // Gradients come as fp32 or bf16 (`grad_type`); the optimizer's own buffers (the
  // parameters it updates: fp32 master weights under mixed precision, and its state) are
  // fp32, and every sum is formed in fp32 (the squares in double).
  //
  // sum + Σ x[i]² in double.
  virtual absl::StatusOr<double> AddSquares(const void* x, DType type, int64_t n, double sum) = 0;
  absl::StatusOr<double> AddSquares(const float* x, int64_t n, double sum) {
    return AddSquares(x, DType::kF32, n, sum);
  }
  // x[i] *= factor (in fp32, rounded back to bf16 for a bf16 x).
  virtual absl::Status Scale(void* x, DType type, int64_t n, float factor) = 0;
  absl::Status Scale(float* x, int64_t n, float factor) { return Scale(x, DType::kF32, n, factor); }
  // The optimizers read each gradient clipped: g = grad·grad_scale, rounded to the
  // gradients' type (bf16: to nearest even), as Scale over the gradients would leave it,
  // without that pass (the gradients' buffer is left as it is).
  // One AdamW update of n elements (core/optim/optimizer.h, torch's order of operations):
  // p = p·keep; m += (1-β1)(g - m); v = β2·v + (1-β2)·g²; p -= step_size·m/(√v/bias2_sqrt + eps).
  using AdamWArgs = tally::AdamWArgs;
  virtual absl::Status AdamW(float* params, const void* grads, DType grad_type, float* m, float* v,
                             int64_t n, const AdamWArgs& args) = 0;
  // SGD with momentum: g += wd·p; b = first ? g : μ·b + g; p -= lr·b.
  virtual absl::Status Sgd(float* params, const void* grads, DType grad_type, float* momentum,
                           int64_t n, float lr, float mu, float wd, bool first,
                           float grad_scale) = 0;
};

// The CUDA half of Kernels::Create (core/runtime/kernels/cuda; an error in a build without it).
absl::StatusOr<std::unique_ptr<Kernels>> CreateCudaKernels(int device_index,
                                                           MatmulInputs inputs);
// The meta device's (meta_kernels.cc): every operation does nothing.
std::unique_ptr<Kernels> CreateMetaKernels(MatmulInputs inputs);

}  // namespace tally
