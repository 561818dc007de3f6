#include "extensions/hsdp/hsdp.h"

#include "core/parallel/zero/zero.h"
#include "core/runtime/comm/ledger/names.h"
#include "core/runtime/status_macros.h"
#include "core/train/extensions.h"

namespace tally::extensions {

absl::Status ReplicaSumReducer::Complete(const Tensor& shard) {
  RETURN_IF_ERROR(inner_->Complete(shard));
  comm::PhaseScope phase(replicas_->ledger(), comm::Phase::kBackward);
  return sent_as_.AllReduce(*replicas_, shard, comm::ReduceOp::kSum, algorithm_);
}

void AddReplicaSum(std::span<const comm::Chunk> units, const parallel::ZeroShape& s,
                   int replicas, int replica, const std::vector<int>& nodes,
                   comm::ExpectedCalls& calls) {
  if (replicas <= 1) return;
  int64_t shard = 0;
  for (const comm::Chunk& unit : units) shard += comm::ChunkOf(unit.count, s.ranks, s.rank).count;
  calls.push_back({.group = comm::group::kDpReplicate,
                   .primitive = comm::Primitive::kAllReduce,
                   .phase = comm::Phase::kBackward,
                   .count = shard,
                   .element = s.grad_element,
                   .calls = 1,
                   .ranks = replicas,
                   .rank = replica,
                   .nodes = nodes});
}

namespace {

// --zero_shard=node (core/train/options.h). After ZeRO++, whose reducer it wraps.
class Hsdp : public train::Extension {
 public:
  absl::Status Fill(const train::TrainOptions& options, const train::SeamGroups& groups,
                    train::Seams& seams) const override {
    const train::ParallelOptions& p = options.parallel;
    if (!p.ShardsByNode() || groups.dp_replicate == nullptr) return absl::OkStatus();
    const DType wire = options.Precision().grad_comm;
    std::shared_ptr<parallel::GradientReducer> inner = seams.zero_reducer;
    if (inner == nullptr) inner = std::make_shared<parallel::PlainReducer>(wire, p.allreduce);
    seams.zero_reducer = std::make_shared<ReplicaSumReducer>(std::move(inner),
                                                             *groups.dp_replicate, wire, p.allreduce);
    seams.zero_gathers_checkpoint = groups.dp_replicate->rank() == 0;
    return absl::OkStatus();
  }
};

}  // namespace

TALLY_REGISTER_EXTENSION(hsdp, 20, Hsdp);

}  // namespace tally::extensions
