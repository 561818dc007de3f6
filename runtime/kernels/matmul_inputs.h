// How a device's matmuls take their fp32 operands. The products are summed in fp32 and the
// results are fp32 in every case; only what enters each product differs.
#pragma once

namespace tally {

enum class MatmulInputs {
  kF32,   // as they are
  kTF32,  // rounded to TF32 by the tensor cores (CUDA only: --tf32)
  kBF16,  // each rounded to bf16, to nearest even (--precision=bf16)
};

}  // namespace tally
