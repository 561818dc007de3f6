// ZeRO++'s qgZ: ZeRO-3's gradient reduce-scatter as all-to-alls of blockwise int8 or int4
// gradients (zero.h), so that what crosses the nodes is an eighth or a quarter of the fp32
// bytes and already summed inside each node.
//
// A unit's n gradients (fp32) are cut into p chunks, chunk j for dp rank j (comm::ChunkOf),
// each quantised in blocks of `block` values from its own start by qwZ's rule
// (quantize.h) with q in [-qmax, qmax]:
//   8 bits: scale = max|x|/127, q an int8 a byte;
//   4 bits: scale = max|x|/7, two values a byte: value i in the low 4 bits of byte i/2
//           when i is even, the high 4 when odd, as two's complement (-7..7).
// Each part is padded to the largest chunk's c values, b = c or ⌈c/2⌉ bytes, and
// B = ⌈c/block⌉ scales, so that every all-to-all cuts its buffers in equal parts. Every
// quantised part travels as two all-to-alls, its bytes (scope qgz) and its scales (scope
// qgz_scales).
//
// One hop (a dp group on one node, or no --gpus_per_node; HSDP's node group): over the
// group; the rank dequantises the p parts it received, its own too, and sums them in
// fp32, in rank order.
//
// Two hops (a dp group over N nodes of L ranks each, dp rank d = node·L + local, as the
// ranks are placed in blocks), as ZeRO++ does:
//   1. over the node's group (dp_shard): to local rank l' go the chunks of dp ranks
//      n'·L + l', for n' = 0..N-1 in order;
//   2. each of those N chunks is dequantised from the L parts received and summed (local
//      rank order), then quantised again;
//   3. over the ranks at the same place on every node (dp_repl): sum n' goes to node n',
//      and the N received are dequantised and summed (node order): the own chunk.
//
//   bytes a rank sends for a unit:  one hop   (p-1)·(b + 4B)
//                                   two hops  (L-1)·N·(b + 4B) inside the node
//                                           + (N-1)·(b + 4B)   across the nodes
//
// Each quantisation the rank makes adds Σ (dequantised − had)² and Σ had² to `error`
// (compression_error.h): the p chunks it quantises, and with two hops the N sums too.
//
//   RETURN_IF_ERROR(QuantizedReduceScatter(dp, {.block = 256}, grads, reduced, &error));
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "core/parallel/compression_error.h"
#include "core/runtime/comm/communicator.h"
#include "core/runtime/tensor.h"

namespace tally::extensions {

using parallel::ErrorSums;

// How qgZ quantises and which groups carry its hops.
struct QgzConfig {
  int64_t block = 256;
  int bits = 8;  // 8 or 4
  comm::Communicator* node = nullptr;    // two hops: the dp group's ranks on this node
  comm::Communicator* across = nullptr;  // and those at its place on every node (null: one hop)
  comm::Algorithm algorithm = comm::Algorithm::kRing;
};

// `grads` (fp32, a unit's n values on every rank of `group`) summed into `reduced` (fp32,
// this rank's chunk ChunkOf(n, p, rank)), through the quantised all-to-alls above; their
// buffers in `group`'s comm memory. On the meta device only the calls are made.
absl::Status QuantizedReduceScatter(comm::Communicator& group, const QgzConfig& how,
                                    const Tensor& grads, const Tensor& reduced, ErrorSums* error);

// The sizes of one quantised part of a unit of `count` values cut over `ranks` ranks:
// c (the largest chunk's values), b (their bytes at `bits`) and B (their blocks).
struct QgzPart {
  int64_t values = 0, bytes = 0, scales = 0;
};
QgzPart QgzPartOf(int64_t count, int ranks, int64_t block, int bits);

}  // namespace tally::extensions
