// How a device's matmuls take their operands (fp32, or bf16 already under kBF16). The products are summed in fp32 and the
// results are fp32 in every case; only what enters each product differs.
#pragma once

namespace tally {

enum class MatmulInputs {
  kF32,   // as they are
  kTF32,  // rounded to TF32 by the tensor cores (CUDA only: --tf32)
  kBF16,  // each rounded to bf16, to nearest even (--precision=bf16)
};

inline const char* Name(MatmulInputs inputs) {
  switch (inputs) {
    case MatmulInputs::kF32: return "fp32";
    case MatmulInputs::kTF32: return "tf32";
    case MatmulInputs::kBF16: return "bf16";
  }
  return "?";
}

}  // namespace tally
