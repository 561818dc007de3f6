// CUDA kernels for what Kernels (core/runtime/kernels/kernels.h) runs, with the arguments and
// meaning of the CPU kernels (core/runtime/kernels/cpu) or of Kernels, on device pointers
// (fp32): matmul.cu (linear, attention), block_attention.cu (context parallelism's blocks)
// and kernels.cu (the rest). Each is tested against
// the CPU (tests/runtime/kernels/cuda_kernels_test.cc, device_kernels_test.cc). They queue work on
// the current device's default stream; a copy back to the host waits for it. Launch errors come
// back as a Status naming the kernel; an error inside a kernel shows at the next synchronisation.
//
// Matmuls go through cuBLAS (Blas: fp32 operands, TF32 tensor cores, or bf16 operands on
// the tensor cores, with fp32 sums and outputs in every case): the linear layers, and
// attention's Q·Kᵀ and P·V as strided-batched products over the heads.
#pragma once

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/runtime/dtype.h"
#include "core/runtime/kernels/cpu/block_attention.h"
#include "core/runtime/kernels/matmul_inputs.h"

namespace tally::cuda {

class Blas {
 public:
  // A cuBLAS handle on the current device whose products take their fp32 operands as
  // `inputs` says (kBF16: each operand rounded into a bf16 copy first).
  static absl::StatusOr<std::unique_ptr<Blas>> Create(MatmulInputs inputs);
  ~Blas();
  Blas(const Blas&) = delete;
  Blas& operator=(const Blas&) = delete;

  void* handle() const { return handle_; }  // a cublasHandle_t
  MatmulInputs inputs() const { return inputs_; }
  // n ones in device memory (a bias gradient is dyᵀ times them), grown on demand.
  absl::StatusOr<const float*> Ones(int n);
  // Device buffer `slot` (0 or 1) of at least n bf16 values: the rounded operands.
  absl::StatusOr<uint16_t*> BF16Scratch(int slot, int64_t n);

 private:
  Blas(void* handle, MatmulInputs inputs) : handle_(handle), inputs_(inputs) {}
  void* handle_;
  MatmulInputs inputs_;
  float* ones_ = nullptr;
  int ones_count_ = 0;
  uint16_t* bf16_[2] = {nullptr, nullptr};
  int64_t bf16_count_[2] = {0, 0};
};

// y (n, oc) = x (n, c) · wᵀ + b, w stored (oc, c); b may be null. The activations x (and
// attention's qkv) and the weights w may be bf16 under bf16 inputs: the products read them
// as they are.
absl::Status LinearForward(Blas& blas, float* y, ConstTypedPtr x, ConstTypedPtr w, const float* b,
                           int n, int c, int oc);
// dx = dy · w (added to dx when accumulate_dx), dw += dyᵀ · x, db += column sums of dy;
// a null output is skipped.
absl::Status LinearBackward(Blas& blas, float* dx, float* dw, float* db, const float* dy,
                            ConstTypedPtr x, ConstTypedPtr w, int n, int c, int oc,
                            bool accumulate_dx = false);

// Causal self-attention over qkv (b, t, 3c) -> y (b, t, c), keeping the softmax
// att (b, nh, t, t) for backward. Backward writes dqkv (not added) and needs scratch of
// nh·t·t floats.
absl::Status AttentionForward(Blas& blas, float* y, float* att, ConstTypedPtr qkv, int b, int t,
                              int c, int nh);
absl::Status AttentionBackward(Blas& blas, float* dqkv, float* scratch, const float* dy,
                               ConstTypedPtr qkv, const float* att, int b, int t, int c, int nh);

// Block attention (block_attention.cu): the CPU block kernels' arguments and math
// (core/runtime/kernels/cpu/block_attention.h) on device pointers, fp32: O = 0 and lse = −∞;
// a block merged into (O, lse); D = the rows of dO ⊙ O by head; a block's dQ, dK, dV
// added. Each row's sums run in one thread in a fixed order: the same bits on every run.
absl::Status BlockAttentionStart(cpu::Rows<float> o, float* lse, int b, int tq, int c, int nh);
absl::Status BlockAttentionForward(cpu::Rows<float> o, float* lse, cpu::Rows<const float> q,
                                   cpu::Rows<const float> k, cpu::Rows<const float> v, int b,
                                   int c, int nh, cpu::BlockPositions at);
absl::Status AttentionDelta(float* delta, cpu::Rows<const float> dout, cpu::Rows<const float> o,
                            int b, int tq, int c, int nh);
absl::Status BlockAttentionBackward(cpu::Rows<float> dq, cpu::Rows<float> dk, cpu::Rows<float> dv,
                                    cpu::Rows<const float> q, cpu::Rows<const float> k,
                                    cpu::Rows<const float> v, cpu::Rows<const float> dout,
                                    const float* lse, const float* delta, int b, int c, int nh,
                                    cpu::BlockPositions at);

// y fp32 or bf16 (rounded to nearest even), as GeluForward's.
absl::Status LayerNormForward(TypedPtr y, float* mean, float* rstd, const float* x, const float* w,
                              const float* b, int n, int c);
// dx, dw, db +=.
absl::Status LayerNormBackward(float* dx, float* dw, float* db, const float* dy, const float* x,
                               const float* w, const float* mean, const float* rstd, int n, int c);

absl::Status GeluForward(TypedPtr y, const float* x, int64_t n);
absl::Status GeluBackward(float* dx, const float* x, const float* dy, int64_t n);

// The pieces of Kernels that have no CPU kernel of their own, with Kernels' arguments:
// the softmax cross-entropy's passes over a vocabulary slice (the whole vocabulary is
// the slice with first 0), the embedding of a vocabulary slice, positions, bias, and the
// optimizers' elementwise updates.
absl::Status LogitMax(float* max, const float* logits, int n, int v, int valid);
absl::Status SoftmaxExp(float* probs, float* sum, float* target, const float* logits,
                        const float* max, const int32_t* targets, int64_t first, int n, int v,
                        int valid);
absl::Status SoftmaxLoss(float* probs, float* losses, const float* sum, const float* target,
                         const float* max, int n, int v, int valid);
// The targets are columns first + j of the whole vocabulary.
absl::Status CrossEntropyBackward(float* dlogits, const float* probs, const int32_t* targets,
                                  int64_t first, float dloss, int n, int v);
absl::Status EmbeddingLookup(float* x, const int32_t* tokens, const float* wte, int64_t first,
                             int vocab, int64_t n, int c);
// Atomic adds: the order of additions varies from run to run.
absl::Status EmbeddingLookupBackward(float* dwte, const float* dx, const int32_t* tokens,
                                     int64_t first, int vocab, int64_t n, int c);
absl::Status AddPositions(float* x, const float* wpe, int64_t rows, int period, int offset, int c);
absl::Status AddPositionsBackward(float* dwpe, const float* dx, int64_t rows, int period,
                                  int offset, int c);
absl::Status AddBias(float* y, const float* b, int64_t rows, int c);
absl::Status Scale(float* x, int64_t n, float factor);
absl::Status ScaleBF16(uint16_t* x, int64_t n, float factor);  // rounded back to bf16
// Gradients G: float, or uint16_t holding bf16 bits (instantiated for both), read clipped
// by grad_scale as Kernels::Sgd and Kernels::AdamW say.
template <typename G>
absl::Status SgdStep(float* params, const G* grads, float* momentum, int64_t n, float lr,
                     float mu, float wd, bool first, float grad_scale);
// sum + Σ x²: each of up to kSquaresBlocks blocks sums its part in double into
// `partials` (that many doubles of device memory), and the host adds them.
inline constexpr int kSquaresBlocks = 1024;
template <typename G>
absl::StatusOr<double> AddSquares(const G* x, int64_t n, double sum, double* partials);

// bf16 <-> fp32 (the bits of core/runtime/dtype.h's BFloat16: round to nearest even, NaN kept
// quiet), and y += x added in fp32, y and x each fp32 or bf16 (the flags), rounded once.
absl::Status FloatToBF16(uint16_t* y, const float* x, int64_t n);
absl::Status BF16ToFloat(float* y, const uint16_t* x, int64_t n);
absl::Status Accumulate(void* y, bool y_bf16, const void* x, bool x_bf16, int64_t n);

// y = a + b (the residual stream); y may be a or b.
absl::Status Add(float* y, const float* a, const float* b, int64_t n);

// One AdamW update of n elements (core/optim/optimizer.h, torch's order of operations):
// p = p·keep; m += (1-β1)(g - m); v = β2·v + (1-β2)·g²; p -= step_size·m/(√v/bias2_sqrt + eps).
template <typename G>
absl::Status AdamWStep(float* params, const G* grads, float* m, float* v, int64_t n,
                       float keep, float step_size, float beta1, float beta2, float eps,
                       float bias2_sqrt, float grad_scale);

}  // namespace tally::cuda
