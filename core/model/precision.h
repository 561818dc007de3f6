// Mixed precision: the element type each of the model's buffers is kept and sent in.
//
//   fp32                everything fp32 (4 + 4 bytes of parameters and gradients, and the
//                       optimizer's state: 8 with AdamW)
//   bf16                parameters, gradients and everything sent bf16; the optimizer
//                       keeps fp32 master weights beside its state (2 + 2 + 12 with
//                       AdamW: the seed's and the ZeRO paper's K = 12)
//   bf16, fp32 accum    gradients accumulated in fp32 (Megatron's main_grad: 2 + 4 + 12)
//
// A store of bf16 parameters hands the model an fp32 copy of each unit in use (exact: bf16
// widens without rounding), and takes its gradients back in fp32, adding them into its
// buffer with one rounding (core/runtime/kernels/kernels.h, Convert and Accumulate). The
// matmuls take bf16 operands (MatmulInputs::kBF16: the weights straight from the store's
// bf16 buffer (WeightStore::Stored), the activation gradients rounded as they enter) and
// sum in fp32. The activations they read (LayerNorm outputs, qkv, the attention output,
// the GELU output) are kept in bf16, rounded once as they are made (core/model/block.h);
// LayerNorm, softmax, GELU, the residual adds and the loss compute in fp32; the residual
// stream and the softmax probabilities stay fp32, as under torch.autocast, and so does
// GELU's input (c_fc's output, which autocast would keep in bf16).
#pragma once

#include "core/runtime/dtype.h"

namespace tally::model {

struct Precision {
  DType params = DType::kF32;       // the copy forward and backward read (and ZeRO gathers)
  DType grads = DType::kF32;        // gradients, accumulated over micro-batches
  DType grad_comm = DType::kF32;    // the data-parallel and ZeRO gradient reduction
  DType activations = DType::kF32;  // what tensor, sequence and pipeline parallelism send

  // Whether the parameters are a rounded copy of fp32 master weights.
  bool master_weights() const { return params != DType::kF32; }
};

}  // namespace tally::model
