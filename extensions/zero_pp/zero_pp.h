// ZeRO++ (Wang et al., 2023) on ZeRO-3's seams (core/parallel/seams.h): what its three
// variants send in place of ZeRO-3's gathers and reduce-scatters. The store
// (core/parallel/zero/) knows none of them.
//
// hpZ (--zero_hpz; DeepSpeed's zero_hpz_partition_size = the ranks of a node): each
// forward gather over the dp group also keeps the rank's chunk of the unit cut over the
// dp group's s ranks on its node, a secondary copy (Φ/s a rank, params memory, held for
// the run); the backward gathers the unit from those over the node's group (dp_shard)
// instead of across the nodes:
//
//   bytes a micro-batch, ring:  (p-1)/p·Φ·w forward (dp) + (s-1)/s·Φ·w backward (dp_shard)
//                             + (p-1)/p·Φ·g reduce-scatter (dp)
//
// the reduce-scatter still crossing the nodes, as in ZeRO++ without qgZ.
//
// qwZ (--zero_quantized_weights): every gather over the dp group (forward, and backward
// unless hpZ gathers inside the node) carries the chunks as int8 with an fp32 scale every
// `block` values (extensions/zero_pp/quantize.h), and every rank computes on the dequantised
// unit; the shard, gradients and update are unchanged:
//
//   bytes a gather, ring:  (p-1)/p·n + (p-1)·B·4   instead of (p-1)/p·n·w
//                          (B = ⌈⌈n/p⌉/block⌉: the largest chunk's scales)
//
// qgZ (--zero_quantized_gradients): each unit's reduce-scatter is all-to-alls of int8 (or
// int4, --zero_quant_grad_bits=4) gradients with an fp32 scale a block
// (extensions/zero_pp/qgz.h): over the dp group when it is on one node, or in two hops when it
// spans N nodes of L ranks, inside the node first (dp_shard) and then across (dp_repl),
// where each rank sends the node's sums of the chunks it gathered, so that a rank's bytes
// across nodes fall from (p-1)/p·Φ·g to (N-1)/p·Φ·(bits/8 + 4/block) a micro-batch:
//
//   bytes a reduce-scatter, one hop:   (p-1)·(b + 4B)    c = ⌈n/p⌉, b = c·bits/8 rounded
//                           two hops:  (L-1)·N·(b + 4B)  up, B = ⌈c/block⌉
//                                    + (N-1)·(b + 4B)
//
// Its calls are blocking (--overlap still prefetches the gathers); the shard, the norm
// and the update are ZeRO-3's, on the gradients as the all-to-alls summed them.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "core/model/parameters.h"
#include "core/parallel/seams.h"
#include "extensions/zero_pp/qgz.h"
#include "core/parallel/zero/sharding.h"
#include "core/parallel/zero/zero.h"
#include "core/runtime/comm/ledger/expected_calls.h"

namespace tally::extensions {

using parallel::ErrorSums;
using parallel::PieceToGather;
using parallel::Posted;

// qwZ: the gathers as int8 in blocks of `block` values, each with an fp32 scale.
class QwzGatherer : public parallel::ParameterGatherer {
 public:
  QwzGatherer(int64_t block, comm::Algorithm algorithm) : block_(block), algorithm_(algorithm) {}
  absl::Status Gather(const PieceToGather& piece, std::vector<Posted>* posted) override;
  // What quantising `own` moves it (on the CPU; zeros elsewhere).
  ErrorSums ErrorOf(const Tensor& own) const override;

 private:
  int64_t block_;
  comm::Algorithm algorithm_;
};

// hpZ: the forward's gathers are `across`'s, and keep the rank's secondary chunks; the
// backward's gather those over `node` as they are.
class HpzGatherer : public parallel::ParameterGatherer {
 public:
  HpzGatherer(std::unique_ptr<parallel::ParameterGatherer> across, comm::Communicator& node,
              const model::ParameterLayout& layout, Allocator& alloc, DType params,
              comm::Algorithm algorithm);
  absl::Status Gather(const PieceToGather& piece, std::vector<Posted>* posted) override;
  absl::Status Gathered(int unit, const Tensor& whole, size_t first, size_t second) override;
  ErrorSums ErrorOf(const Tensor& own) const override { return across_->ErrorOf(own); }

 private:
  // Piece `i`'s chunk of the secondary copy.
  Tensor SecondaryOwn(size_t i) const;

  std::unique_ptr<parallel::ParameterGatherer> across_;
  comm::Communicator* node_;
  const model::ParameterLayout layout_;
  const parallel::Sharding secondary_;  // the units cut over `node`
  Allocator alloc_;
  DType params_;
  parallel::PlainGatherer in_node_;
  Tensor secondary_params_;  // the rank's chunks of them, once a forward ran
};

// qgZ: the reduce-scatters as quantised all-to-alls, in fp32; in two hops for the pieces
// cut over `dp` when `how` has groups across the nodes, one hop otherwise.
class QgzReducer : public parallel::GradientReducer {
 public:
  QgzReducer(comm::Communicator& dp, const QgzConfig& how) : dp_(&dp), how_(how) {}
  DType ReducedType(DType) const override { return DType::kF32; }  // sums of the dequantised
  bool Posts() const override { return false; }
  absl::Status ReduceScatter(comm::Communicator& group, const Tensor& grads,
                             const Tensor& reduced) override;
  absl::StatusOr<Posted> IReduceScatter(comm::Communicator& group, const Tensor& grads,
                                        const Tensor& reduced) override;
  ErrorSums TakeError() override { return std::exchange(error_, ErrorSums()); }

 private:
  comm::Communicator* dp_;
  QgzConfig how_;
  ErrorSums error_;  // of the step's reduce-scatters so far
};

// ZeRO++'s calls of a step, as data (the report's exact column and the planner's rows
// join them): ZeRO-3's (parallel::ZeroCalls over `shape`) each replaced where a variant
// takes it, in order.
struct ZeroPlusPlusShape {
  struct Group {
    int ranks = 1, rank = 0;
    std::vector<int> nodes = {};  // the node of each rank
  };
  // hpZ: the backward's all-gathers over the node's share of the dp group (dp_shard).
  std::optional<Group> hpz;
  // qwZ (> 0): each other all-gather as two, the values (scope qwz, a byte each) and the
  // scales (scope qwz_scales, the ranks times the largest chunk's blocks, 4 bytes each).
  int64_t quant_block = 0;
  // qgZ (> 0): each reduce-scatter as all-to-alls of the quantised parts (qgz) and their
  // scales (qgz_scales), over the shape's group, or in two hops when qgz_across.ranks > 1:
  // over qgz_node (dp_shard), then over qgz_across (dp_repl).
  int64_t grad_quant_block = 0;
  int grad_quant_bits = 8;  // 8 or 4 (two values a byte)
  Group qgz_node = {}, qgz_across = {};
};
comm::ExpectedCalls ZeroPlusPlusCalls(std::span<const comm::Chunk> units,
                                      const parallel::ZeroShape& shape,
                                      const ZeroPlusPlusShape& variants);

}  // namespace tally::extensions
