#include "core/train/parallelize.h"

#include <cstdint>
#include <utility>

#include "core/parallel/data_parallel.h"
#include "core/parallel/zero/zero.h"
#include "core/runtime/status_macros.h"
#include "core/train/extensions.h"
#include "core/train/trainer.h"

namespace tally::train {

absl::StatusOr<Parallelized> Parallelize(const TrainOptions& options, comm::Communicator* world,
                                         Allocator& model_alloc) {
  Parallelized p;
  int pp_rank = 0;
  if (world != nullptr) {  // the rank's groups of the grid (core/parallel/topology.h)
    const parallel::Topology grid = options.topology();
    pp_rank = grid.Of(world->rank()).pp;
    const std::shared_ptr<const comm::Nodes> shard_nodes = options.DpSplitNodes();
    ASSIGN_OR_RETURN(p.groups, grid.Split(*world, /*sharded=*/options.parallel.zero > 0,
                                          shard_nodes.get()));
  }
  if (p.groups.cp != nullptr) {
    p.sequence = std::make_unique<parallel::ContextParallel>(
        *p.groups.cp, model_alloc, options.parallel.cp_comm,
        options.parallel.cp_load_balance, options.model.seq_len, options.Precision().activations);
  }
  p.tensor_parallel =
      parallel::TensorParallel(p.groups.tp.get(), options.parallel.sequence_parallel,
                               model_alloc.device(), options.Precision().activations);
  const parallel::TensorParallel& tp = p.tensor_parallel;
  const comm::Algorithm algorithm = options.parallel.allreduce;
  p.stage = options.StageModelChunks(pp_rank);
  const model::ModelChunks& stage = p.stage;
  if (p.groups.ep != nullptr) {
    p.experts = std::make_unique<parallel::ExpertParallel>(p.groups.ep.get(), model_alloc.device());
  }
  const model::ParameterLayout layout = model::ParameterLayout::ForGPT(
      options.model, tp.size(), tp.rank(), stage, options.parallel.ep,
      p.groups.ep != nullptr ? p.groups.ep->rank() : 0);
  auto make_optimizer = [options](int64_t n, Allocator& alloc) {
    return MakeOptimizer(options, n, alloc);
  };
  ASSIGN_OR_RETURN(const Seams seams, FillSeams(options, p.groups));
  if (p.groups.dp != nullptr && options.parallel.zero >= 1) {
    // HSDP cuts the units over the node's ranks; an extension sums the replicas.
    const bool by_node = options.parallel.ShardsByNode();
    const parallel::ZeroConfig zero{
        .stage = options.parallel.zero,
        .dp = by_node ? p.groups.dp_shard.get() : p.groups.dp.get(),
        .experts = p.groups.edp.get(),
        .tp = tp,
        .stages = p.groups.pp.get(),
        .algorithm = algorithm,
        .device = model_alloc.device(),
        .precision = options.Precision(),
        .overlap = options.parallel.overlap,
        .prefetch = options.parallel.overlap && options.parallel.pp == 1,
        .reshard_after_forward = options.parallel.zero3_reshard_after_forward,
        .gathers_checkpoint = seams.zero_gathers_checkpoint,
        .reducer = seams.zero_reducer,
        .make_gatherer = seams.zero_gatherer};
    ASSIGN_OR_RETURN(p.weights, parallel::ZeroWeights::Create(zero, layout, options.training.seed,
                                                              make_optimizer));
  } else {
    const int dp_rank = p.groups.dp != nullptr ? p.groups.dp->rank() : 0;
    const parallel::ReplicaConfig replica{
        .dp = p.groups.dp.get(),
        .ep = p.groups.ep.get(),
        .edp = p.groups.edp.get(),
        .tp = tp,
        .stages = p.groups.pp.get(),
        .bucket_bytes = int64_t(options.parallel.bucket_mb * (1 << 20)),
        .algorithm = algorithm,
        .grad_comm = options.Precision().grad_comm,
        .overlap = options.parallel.overlap,
        .precision = options.Precision(),
        .checkpointed = dp_rank < options.parallel.ep,
        .hook = seams.replica_hook};
    ASSIGN_OR_RETURN(p.weights,
                     parallel::ReplicaWeights::Create(replica, layout, options.training.seed,
                                                      model_alloc, make_optimizer));
  }
  return p;
}

}  // namespace tally::train
