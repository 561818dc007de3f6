// Blockwise int8 quantisation: ZeRO++'s qwZ (zero.h), which all-gathers ZeRO-3's
// parameters as one byte a value and one fp32 scale a block instead of the parameters'
// own type.
//
// A run of n values is cut into blocks of `block` values from its start (the last one
// shorter when block does not divide n). Each block b keeps
//   scale_b = max |x| over the block / 127            (fp32; 0 for a block of zeros)
//   q_i     = round(x_i / scale_b), ties to even       (int8 in [-127, 127]; 0 where scale_b = 0)
// and a value comes back as q_i · scale_b, computed in fp32 and stored in the buffer's
// type (bf16 rounds it to nearest even). A value's error is at most scale_b / 2.
//
// On the wire (QuantizedGather) each rank's chunk of a unit travels as its n_r bytes and
// as B = ⌈⌈n/p⌉ / block⌉ scales, the blocks of the largest chunk (a shorter chunk pads its
// scales with zeros), so that both all-gathers cut their buffers in equal parts:
//
//   bytes a rank sends, ring:  (p-1)/p · n · 1   +   (p-1) · B · 4
//
//   int8_t q[1000]; float scales[BlocksOf(1000, 256)];
//   Quantize(params, 1000, 256, q, scales);
//   Dequantize(q, scales, 1000, 256, params);  // params now hold what the wire carried
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "core/parallel/compression_error.h"
#include "core/runtime/comm/communicator.h"
#include "core/runtime/dtype.h"
#include "core/runtime/tensor.h"

namespace tally::extensions {

using parallel::ErrorSums;

// Blocks of `block` values in a run of n.
// (Written without n + block - 1, which overflows for a block near 2^63.)
inline int64_t BlocksOf(int64_t n, int64_t block) { return n / block + (n % block != 0 ? 1 : 0); }
// Where the block that starts at `begin` of a run of n ends.
inline int64_t BlockEnd(int64_t begin, int64_t n, int64_t block) {
  return begin + std::min(block, n - begin);
}

// A block of n fp32 values' scale for q in [-qmax, qmax]: max |x| / qmax (0 for zeros).
// qwZ's int8 is qmax 127; qgZ's int4 (qgz.h) qmax 7.
float BlockScale(const float* x, int64_t n, int qmax);

// The n values at `x` (fp32 or bf16) as BlocksOf(n, block) scales and n int8 values.
void Quantize(ConstTypedPtr x, int64_t n, int64_t block, int8_t* q, float* scales);
// The values `q` and `scales` stand for, into the n values at `x` (fp32 or bf16).
void Dequantize(const int8_t* q, const float* scales, int64_t n, int64_t block, TypedPtr x);

// How far quantisation moves the n values at `x` (fp32 or bf16) in blocks of `block`:
// Σ (q·scale − x)² (q·scale as stored in x's type) and Σ x².
ErrorSums QuantizationError(ConstTypedPtr x, int64_t n, int64_t block);

// Scales a rank sends for a unit of `count` values cut over `ranks` ranks: the blocks of
// the largest chunk (comm::ChunkOf's first).
int64_t ScalesPerRank(int64_t count, int ranks, int64_t block);

// The all-gather of a unit whose rank's chunk is `mine` (fp32 or bf16, the group's rank's
// comm::ChunkOf part of `all`) in blocks of `block`: the bytes and the scales
// all-gathered over `group` (labels qwz and qwz_scales; buffers in the group's comm
// memory), then every chunk dequantised into its place in `all`, the own chunk too.
// Post() starts it (and, blocking, finishes it too); Finish() waits and dequantises.
class QuantizedGather {
 public:
  QuantizedGather(comm::Communicator& group, int64_t block, comm::Algorithm algorithm)
      : group_(&group), block_(block), algorithm_(algorithm) {}
  absl::Status Post(const Tensor& mine, const Tensor& all, bool blocking);
  absl::Status Finish();

 private:
  comm::Communicator* group_;
  int64_t block_;
  comm::Algorithm algorithm_;
  Tensor all_, q_mine_, scales_mine_, q_all_, scales_all_;  // held until Finish
  std::unique_ptr<comm::CollectiveWork> q_work_, scales_work_;
};

}  // namespace tally::extensions
