// One pre-LayerNorm transformer block, with explicit forward and backward.
//
// B = batch, T = sequence, C = channels, NH = heads, N = B·T rows.
//
//   x ─┬─ LN1 ─ c_attn ─ attention ─ c_proj ─(+)─┬─ LN2 ─ c_fc ─ GELU ─ c_proj ─(+)─ out
//      └──────────────────────────────────────────┘└─────────────────────────────────┘
//
// Forward reads x (N, C) and writes every activation the backward needs into `acts`.
// Backward takes d(out) in `dresidual` and leaves d(x) there (the residual stream's
// gradient flows straight through both additions), adding to the block's weight
// gradients in `grads`.
#pragma once

#include "model/config.h"
#include "model/parameters.h"

namespace tally::model {

// The block's saved activations, each (N, ·) for one micro-batch.
struct BlockActivations {
  float* ln1;        // (N, C)
  float* ln1_mean;   // (N)
  float* ln1_rstd;   // (N)
  float* qkv;        // (N, 3C)
  float* att;        // (B, NH, T, T) softmax probabilities
  float* atty;       // (N, C) attention output, before c_proj
  float* residual2;  // (N, C) x + attention branch
  float* ln2;        // (N, C)
  float* ln2_mean;   // (N)
  float* ln2_rstd;   // (N)
  float* fch;        // (N, 4C) c_fc output
  float* fch_gelu;   // (N, 4C)
  float* out;        // (N, C) residual2 + MLP branch: the next block's input
};

// Scratch the backward reuses from layer to layer.
struct BlockScratch {
  float* d4c;   // (N, 4C)
  float* dqkv;  // (N, 3C)
  float* dc;    // (N, C)
  float* dtt;   // (T, T)
};

void BlockForward(const GPTConfig& config, int b, const BlockTensors& w, const float* x,
                  const BlockActivations& acts);

void BlockBackward(const GPTConfig& config, int b, const BlockTensors& w, const BlockTensors& g,
                   const float* x, const BlockActivations& acts, const BlockScratch& scratch,
                   float* dresidual);

}  // namespace tally::model
