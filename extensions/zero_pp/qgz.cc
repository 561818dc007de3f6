#include "extensions/zero_pp/qgz.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "core/runtime/comm/algorithms/partition.h"
#include "core/runtime/comm/ledger/names.h"
#include "core/runtime/status_macros.h"
#include "extensions/zero_pp/names.h"
#include "extensions/zero_pp/quantize.h"

namespace tally::extensions {
namespace {

int QMax(int bits) { return bits == 4 ? 7 : 127; }

// Value i of a part at `bits` (the header's layout).
int QAt(const uint8_t* part, int64_t i, int bits) {
  if (bits == 8) return int8_t(part[i]);
  const int nibble = (part[i / 2] >> (i % 2 == 0 ? 0 : 4)) & 0xF;
  return (nibble ^ 8) - 8;  // sign-extended
}

// The n values at `x` quantised into `part` (zero-filled) and `scales`; what they come
// back as, against what they were, added to `error`.
void QuantizePart(const float* x, int64_t n, int64_t block, int bits, uint8_t* part,
                  float* scales, ErrorSums* error) {
  for (int64_t b = 0, begin = 0; begin < n; ++b, begin = BlockEnd(begin, n, block)) {
    const int64_t end = BlockEnd(begin, n, block);
    const float scale = BlockScale(x + begin, end - begin, QMax(bits));
    scales[b] = scale;
    for (int64_t i = begin; i < end; ++i) {
      // |x| <= qmax·scale, so the quotient rounds into [-qmax, qmax].
      const int q = scale > 0 ? int(std::nearbyint(x[i] / scale)) : 0;
      if (bits == 8) {
        part[i] = uint8_t(int8_t(q));
      } else {
        part[i / 2] |= uint8_t((q & 0xF) << (i % 2 == 0 ? 0 : 4));
      }
      const double back = float(q) * scale, had = x[i];
      error->residual += (back - had) * (back - had);
      error->value += had * had;
    }
  }
}

// The n values `part` and `scales` stand for, added to `sum`.
void AddDequantized(const uint8_t* part, const float* scales, int64_t n, int64_t block, int bits,
                    float* sum) {
  for (int64_t b = 0, begin = 0; begin < n; ++b, begin = BlockEnd(begin, n, block)) {
    const float scale = scales[b];
    for (int64_t i = begin; i < BlockEnd(begin, n, block); ++i) {
      sum[i] += float(QAt(part, i, bits)) * scale;
    }
  }
}

// `parts` quantised parts, each `part.bytes` bytes and `part.scales` scales, sent in
// slots (part j of the buffers goes to rank j / (parts / ranks)) and received likewise.
struct Exchange {
  Tensor send_q, send_s, recv_q, recv_s;
  QgzPart part;

  static absl::StatusOr<Exchange> Make(Allocator& memory, int parts, QgzPart part) {
    Exchange e;
    e.part = part;
    auto buffer = [&](int64_t n, DType type) {
      return Tensor::Empty({n}, type, memory, MemoryCategory::kComm);  // zero-filled
    };
    ASSIGN_OR_RETURN(e.send_q, buffer(parts * part.bytes, DType::kI8));
    ASSIGN_OR_RETURN(e.send_s, buffer(parts * part.scales, DType::kF32));
    ASSIGN_OR_RETURN(e.recv_q, buffer(parts * part.bytes, DType::kI8));
    ASSIGN_OR_RETURN(e.recv_s, buffer(parts * part.scales, DType::kF32));
    return e;
  }
  uint8_t* sent_q(int slot) { return static_cast<uint8_t*>(send_q.raw_data()) + slot * part.bytes; }
  float* sent_s(int slot) { return send_s.data<float>() + slot * part.scales; }
  const uint8_t* got_q(int slot) {
    return static_cast<const uint8_t*>(recv_q.raw_data()) + slot * part.bytes;
  }
  const float* got_s(int slot) { return recv_s.data<float>() + slot * part.scales; }

  absl::Status Run(comm::Communicator& group, comm::Algorithm algorithm) {
    {
      comm::LabelScope label(group.ledger(), extensions::scope::kQgz);
      RETURN_IF_ERROR(group.AllToAll(send_q, recv_q, algorithm));
    }
    comm::LabelScope label(group.ledger(), extensions::scope::kQgzScales);
    return group.AllToAll(send_s, recv_s, algorithm);
  }
};

}  // namespace

QgzPart QgzPartOf(int64_t count, int ranks, int64_t block, int bits) {
  const int64_t largest = comm::ChunkOf(count, ranks, 0).count;
  return {.values = largest,
          .bytes = bits == 4 ? largest / 2 + largest % 2 : largest,
          .scales = BlocksOf(largest, block)};
}

absl::Status QuantizedReduceScatter(comm::Communicator& group, const QgzConfig& how,
                                    const Tensor& grads, const Tensor& reduced, ErrorSums* error) {
  const int p = group.size();
  const int64_t n = grads.numel(), block = how.block;
  const int bits = how.bits;
  const bool two_hops = how.across != nullptr;
  const int nodes = two_hops ? how.across->size() : 1;
  const int local = p / nodes;
  const int me = group.rank(), my_local = two_hops ? how.node->rank() : me;
  const comm::Chunk own = comm::ChunkOf(n, p, me);
  if (two_hops && (how.node->size() != local || local * nodes != p ||
                   how.across->rank() * local + my_local != me)) {
    return absl::InternalError(absl::StrCat(
        "[qgz] dp rank ", me, " of ", p, " is not node ", how.across->rank(), " x ", local,
        " + local rank ", my_local, ": the dp group is not placed in blocks of its nodes"));
  }
  if (grads.dtype() != DType::kF32 || reduced.dtype() != DType::kF32 ||
      reduced.numel() != own.count) {
    return absl::InternalError("[qgz] wants fp32 gradients and the rank's fp32 chunk");
  }
  const bool real = grads.device().type != DeviceType::kMeta;
  Allocator memory(group.allocator().ledger(), grads.device());
  if (bits != 8 && bits != 4) return absl::InternalError(absl::StrCat("[qgz] ", bits, " bits"));
  const QgzPart part = QgzPartOf(n, p, block, bits);

  // Hop 1 (or the one hop): every dp rank's chunk, in the slot of the rank that sums it
  // first (two hops: local rank j mod L, then node j / L).
  ASSIGN_OR_RETURN(Exchange first, Exchange::Make(memory, p, part));
  if (real) {
    for (int j = 0; j < p; ++j) {
      const comm::Chunk chunk = comm::ChunkOf(n, p, j);
      const int slot = two_hops ? (j % local) * nodes + j / local : j;
      QuantizePart(grads.data<float>() + chunk.offset, chunk.count, block, bits,
                   first.sent_q(slot), first.sent_s(slot), error);
    }
  }
  RETURN_IF_ERROR(first.Run(two_hops ? *how.node : group, how.algorithm));
  if (!two_hops) {
    if (!real) return absl::OkStatus();
    RETURN_IF_ERROR(reduced.SetZero());
    for (int j = 0; j < p; ++j) {
      AddDequantized(first.got_q(j), first.got_s(j), own.count, block, bits,
                     reduced.data<float>());
    }
    return absl::OkStatus();
  }

  // The node's sum of each chunk this local rank gathers (dp rank node·L + my_local),
  // quantised again for its node.
  ASSIGN_OR_RETURN(Exchange second, Exchange::Make(memory, nodes, part));
  if (real) {
    ASSIGN_OR_RETURN(Tensor sum, Tensor::Empty({part.values}, DType::kF32, memory,
                                               MemoryCategory::kComm));
    for (int node = 0; node < nodes; ++node) {
      const int64_t count = comm::ChunkOf(n, p, node * local + my_local).count;
      RETURN_IF_ERROR(sum.SetZero());
      for (int j = 0; j < local; ++j) {
        AddDequantized(first.got_q(j * nodes + node), first.got_s(j * nodes + node), count, block,
                       bits, sum.data<float>());
      }
      QuantizePart(sum.data<float>(), count, block, bits, second.sent_q(node),
                   second.sent_s(node), error);
    }
  }
  first = Exchange();  // the first hop's buffers freed before the second hop runs
  RETURN_IF_ERROR(second.Run(*how.across, how.algorithm));
  if (!real) return absl::OkStatus();
  RETURN_IF_ERROR(reduced.SetZero());
  for (int node = 0; node < nodes; ++node) {
    AddDequantized(second.got_q(node), second.got_s(node), own.count, block, bits,
                   reduced.data<float>());
  }
  return absl::OkStatus();
}

}  // namespace tally::extensions
