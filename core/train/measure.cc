// The ledgers of a run's steps (measure.h).
#include "core/train/measure.h"

#include "core/runtime/comm/launch.h"
#include "core/runtime/status_macros.h"

namespace tally::train {

absl::StatusOr<RankLedgers> MeasureSteps(const TrainOptions& o,
                                         const std::function<void(int rank, Trainer&)>& after) {
  RankLedgers out{std::vector<comm::TrafficLedger>(size_t(o.world())),
                  std::vector<MemoryLedger>(size_t(o.world()))};
  comm::LaunchOptions launch;
  launch.world_size = o.world();
  launch.comm.nodes = o.PlacedNodes();
  RETURN_IF_ERROR(comm::RunThreadRanks(launch, [&](comm::Communicator& world) -> absl::Status {
    ASSIGN_OR_RETURN(auto trainer, Trainer::Create(o, &world));
    world.ledger().Clear();
    for (int64_t k = 0; k < o.training.steps; ++k) RETURN_IF_ERROR(trainer->TrainStep(k).status());
    out.traffic[size_t(world.rank())] = world.ledger();
    out.memory[size_t(world.rank())] = world.memory();
    if (after) after(world.rank(), *trainer);
    return absl::OkStatus();
  }));
  return out;
}

}  // namespace tally::train
