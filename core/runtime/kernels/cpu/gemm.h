// General matrix multiply on the CPU.
//
// Row-major throughout, as every tensor in tally is:
//   C (m, n) = alpha · op(A) (m, k) · op(B) (k, n) + beta · C
// with op(X) = X or Xᵀ, and leading dimensions lda, ldb, ldc (elements between rows).
//
// float runs through oneDNN (its sgemm; bf16 operands through its matmul primitive), which
// picks the kernels of the processor it runs on (AVX2, AVX-512, AVX512-BF16, AMX) at run
// time; double through OpenBLAS (oneDNN has no double GEMM; only tests use it). Measured
// on the default model's shapes, one core, AVX512-BF16 (README "Speed"): OpenBLAS sgemm
// (pinned to its Haswell kernels) ~115 GFLOP/s, oneDNN sgemm ~220, oneDNN bf16 ~400.
#pragma once

#include <cstdint>
#include <type_traits>

#include "core/runtime/dtype.h"
#include "core/runtime/kernels/matmul_inputs.h"

namespace tally::cpu {

enum class Trans { kNo, kYes };

void Gemm(Trans ta, Trans tb, int m, int n, int k, float alpha, const float* a, int lda,
          const float* b, int ldb, float beta, float* c, int ldc);
void Gemm(Trans ta, Trans tb, int m, int n, int k, double alpha, const double* a, int lda,
          const double* b, int ldb, double beta, double* c, int ldc);
// bf16 operands, fp32 products summed in fp32, fp32 C: oneDNN's bf16 matmul, or, on a
// CPU without one (AVX2 only), the operands widened to fp32 (exactly) through sgemm.
// With a `bias` (n fp32 values; beta must then be 0) C = alpha·op(A)·op(B) + bias, the
// bias added to each row's sums as the matmul writes them (the same value as starting C
// from the bias with beta = 1, without that pass over C).
void Gemm(Trans ta, Trans tb, int m, int n, int k, float alpha, const BFloat16* a, int lda,
          const BFloat16* b, int ldb, float beta, float* c, int ldc,
          const float* bias = nullptr);

// to (rows, cols; contiguous) = from (rows, cols; `ld` between rows) rounded to bf16.
void RoundToBF16(BFloat16* to, const float* from, int64_t rows, int64_t cols, int64_t ld);
// The calling thread's bf16 buffer number `slot` (0..3), at least n elements: where the
// matmuls keep the rounded copies of their operands (kernel scratch, as a BLAS's packing
// buffers are, outside the memory ledger).
BFloat16* BF16Scratch(int slot, int64_t n);

// x (rows, cols; contiguous) as a matmul operand of type O: x itself when O is its type,
// else its bf16 rounding in scratch `slot`. The layers write their products once over O.
template <typename O, typename T>
const O* AsOperand(int slot, const T* x, int64_t rows, int64_t cols) {
  if constexpr (std::is_same_v<O, T>) {
    return x;
  } else {
    static_assert(std::is_same_v<O, BFloat16> && std::is_same_v<T, float>);
    BFloat16* to = BF16Scratch(slot, rows * cols);
    RoundToBF16(to, x, rows, cols, cols);
    return to;
  }
}

// Wall time in the float and bf16 Gemm calls, for the benchmarks (tally_model_bench's
// matmul share of a step; one total for the process, so for one rank). Off until
// TimeMatmuls(true); then each call adds its time, and a call made inside the intra-op
// threads' loop (attention's per-head products on more than one thread) adds its team's
// share, its time over the team's size: ParallelFor's blocks are equal, so the shares add
// up to the loop's matmul wall time. Off, a call pays one relaxed load.
void TimeMatmuls(bool on);
double MatmulSeconds();

// The instruction set oneDNN's kernels use on this CPU ("avx2", "avx512_core_bf16",
// "avx512_core_amx", ...), for the benchmarks' headers.
const char* MatmulIsa();

// The threads one matmul may use. Ranks that share the cores set it so that ranks x
// matmul threads does not exceed the cores. (ThreadSanitizer builds use one: the OpenMP
// runtime oneDNN runs on is not instrumented.)
void SetBlasThreads(int threads);

}  // namespace tally::cpu
