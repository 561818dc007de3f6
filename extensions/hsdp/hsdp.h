// HSDP (--zero_shard=node; FSDP's hybrid shard, torchtitan's dp_replicate × dp_shard) on
// ZeRO's gradient seam (core/parallel/seams.h).
//
// The trainer cuts ZeRO's units over the shard group, the dp group's s ranks on one node,
// so that each of the r = p/s nodes keeps a whole replica of the sharded state. Everything
// of ZeRO runs over the shard group; the one step across nodes is after the last
// backward, when every rank all-reduces its reduced gradient shard (Φ/s values) over its
// replicate group, the r ranks at its place on every node (group dp_repl, no label,
// phase backward):
//
//   bytes a step, ring | s every unit:  ZeRO's with p = s, inside the node
//                                     + 2(r-1)/r · Φ/s · g   across nodes
//
// so that of a rank's bytes only the all-reduce crosses nodes, where ZeRO over the whole
// dp group reduce-scatters across them every micro-batch (ZeRO-2/3) and ZeRO-3 gathers
// across them twice. The memory is ZeRO's over s ranks. The gradient norm sums the shard
// group's squares only (a replica's are the same), and the first node's shard group
// gathers a checkpoint.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "core/parallel/seams.h"
#include "core/parallel/sent_as.h"
#include "core/parallel/zero/sharding.h"
#include "core/runtime/comm/ledger/expected_calls.h"

namespace tally::extensions {

// `inner`'s reduce-scatters, and the reduced shard summed over `replicas` (as `wire`).
class ReplicaSumReducer : public parallel::GradientReducer {
 public:
  ReplicaSumReducer(std::shared_ptr<parallel::GradientReducer> inner, comm::Communicator& replicas,
                    DType wire, comm::Algorithm algorithm)
      : inner_(std::move(inner)), replicas_(&replicas), sent_as_(wire), algorithm_(algorithm) {}

  DType ReducedType(DType wire) const override { return inner_->ReducedType(wire); }
  bool Posts() const override { return inner_->Posts(); }
  absl::Status ReduceScatter(comm::Communicator& group, const Tensor& grads,
                             const Tensor& reduced) override {
    return inner_->ReduceScatter(group, grads, reduced);
  }
  absl::StatusOr<parallel::Posted> IReduceScatter(comm::Communicator& group, const Tensor& grads,
                                                  const Tensor& reduced) override {
    return inner_->IReduceScatter(group, grads, reduced);
  }
  absl::Status Complete(const Tensor& shard) override;
  parallel::ErrorSums TakeError() override { return inner_->TakeError(); }

 private:
  std::shared_ptr<parallel::GradientReducer> inner_;
  comm::Communicator* replicas_;
  parallel::SentAs sent_as_;
  comm::Algorithm algorithm_;
};

// HSDP's call of a step beside ZeRO's over the shard group (`shape`; parallel::ZeroCalls):
// the rank's gradient shard (its chunk of every unit) all-reduced over its `replicas`
// ranks (group dp_repl, phase backward, once a step), appended to `calls` when there are
// more than one; `replica` is its place among them, `nodes` theirs.
void AddReplicaSum(std::span<const comm::Chunk> units, const parallel::ZeroShape& shape,
                   int replicas, int replica, const std::vector<int>& nodes,
                   comm::ExpectedCalls& calls);

}  // namespace tally::extensions
