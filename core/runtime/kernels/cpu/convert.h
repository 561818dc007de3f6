// Element-wise passes between fp32 and bf16: widening bf16 to fp32 (exact), rounding fp32
// to bf16, and adding one buffer into another, either type into either, in fp32 and
// rounded once to nearest even where the destination is bf16. Each is compiled for
// AVX-512, AVX2 and the baseline (cpu_clones.h; the same values in each; the rounding
// also has an instruction of its own, below) and runs on the calling thread: the kernels
// cut the range over the intra-op threads (parallel.h); the collectives' local sums
// (comm/algorithms/reduce.cc) are Accumulate too.
#pragma once

#include <cstdint>

#include "core/runtime/dtype.h"

namespace tally::cpu {

void Widen(float* to, const BFloat16* from, int64_t n);

// to[i] = from[i] rounded to nearest even (BFloat16::FromFloat) for i < n. Where the CPU
// has AVX512-BF16, its conversion instruction rounds 16 values at a time (ten times the
// loop's speed here), except a group holding a subnormal, which the instruction would read
// as zero where FromFloat keeps it: that group goes through FromFloat. The same bits on
// every CPU.
void Round(BFloat16* to, const float* from, int64_t n);
// Whether Round uses the instruction on this CPU (for the benchmarks' headers).
bool RoundsWithInstruction();

// y[i] += x[i] for i < n.
void Accumulate(float* y, const float* x, int64_t n);
void Accumulate(float* y, const BFloat16* x, int64_t n);
void Accumulate(BFloat16* y, const float* x, int64_t n);
void Accumulate(BFloat16* y, const BFloat16* x, int64_t n);

}  // namespace tally::cpu
