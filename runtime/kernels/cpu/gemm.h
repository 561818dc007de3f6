// General matrix multiply on the CPU, through OpenBLAS, for float and double.
//
// Row-major throughout, as every tensor in tally is:
//   C (m, n) = alpha · op(A) (m, k) · op(B) (k, n) + beta · C
// with op(X) = X or Xᵀ, and leading dimensions lda, ldb, ldc (elements between rows).
#pragma once

#include <cblas.h>

namespace tally::cpu {

enum class Trans { kNo, kYes };

inline void Gemm(Trans ta, Trans tb, int m, int n, int k, float alpha, const float* a, int lda,
                 const float* b, int ldb, float beta, float* c, int ldc) {
  cblas_sgemm(CblasRowMajor, ta == Trans::kYes ? CblasTrans : CblasNoTrans,
              tb == Trans::kYes ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta,
              c, ldc);
}

inline void Gemm(Trans ta, Trans tb, int m, int n, int k, double alpha, const double* a, int lda,
                 const double* b, int ldb, double beta, double* c, int ldc) {
  cblas_dgemm(CblasRowMajor, ta == Trans::kYes ? CblasTrans : CblasNoTrans,
              tb == Trans::kYes ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta,
              c, ldc);
}

// The threads OpenBLAS may use inside one call. Ranks that share the cores set it so that
// ranks x BLAS threads does not exceed the cores.
void SetBlasThreads(int threads);

}  // namespace tally::cpu
