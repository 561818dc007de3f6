// Causal multi-head self-attention on a fused QKV tensor.
//
// B = batch, T = sequence, C = channels, NH = heads, hs = C / NH.
//   qkv (B, T, 3C): [q | k | v] along the last dimension; head h uses columns h·hs..(h+1)·hs
//   of each third.
//   AttentionForward:  qkv -> y (B, T, C), att (B, NH, T, T) (the softmax, kept for backward)
//     per (b, h): S = Q·Kᵀ/√hs, masked to t' <= t, P = softmax(S), Y = P·V
//     4·B·NH·T²·hs flops (two T×T×hs GEMMs)
//   AttentionBackward: dy (B, T, C) -> dqkv (B, T, 3C) (written);
//     `scratch` holds T·T elements.
// Attention is the only layer that mixes information across positions. With
// MatmulInputs::kBF16 (float only) Q, K, V, P, dY and dS enter the four products rounded
// to bf16 (qkv may be kept in bf16 already: Q = BFloat16); the products, the softmax and
// its backward are fp32.
#pragma once

#include "core/runtime/kernels/cpu/gemm.h"

namespace tally::cpu {

// Q: T, or BFloat16 for T = float with MatmulInputs::kBF16.
template <typename T, typename Q>
void AttentionForward(T* y, T* att, const Q* qkv, int b, int t, int c, int nh,
                      MatmulInputs inputs = MatmulInputs::kF32);

template <typename T, typename Q>
void AttentionBackward(T* dqkv, T* scratch, const T* dy, const Q* qkv, const T* att, int b, int t,
                       int c, int nh, MatmulInputs inputs = MatmulInputs::kF32);

}  // namespace tally::cpu
