// Whole checkpoints from any grid, and into any (trainer.h): the parts of the model are
// gathered to rank 0 on save, and every rank keeps its part on load.
#include <memory>
#include <vector>

#include "model/checkpoint.h"
#include "runtime/status_macros.h"
#include "train/trainer.h"

namespace tally::train {

absl::StatusOr<Tensor> Trainer::Parameters() {
  ASSIGN_OR_RETURN(Whole whole, GatherWhole(/*with_optimizer=*/false));
  return std::move(whole.params);
}

// Long, and kept whole: the gather is one protocol (ZeRO's shards to dp rank 0, the
// parts to world rank 0, placed by their layouts) that every rank must follow in step.
// Whole parameters (and optimizer state) on rank 0: ZeRO gathers each dp group's shards
// to its dp rank 0; every dp rank 0 holds one part of the model (its tensor-parallel part
// of its stage) and sends it to world rank 0, which lays the parts into the whole model.
absl::StatusOr<Trainer::Whole> Trainer::GatherWhole(bool with_optimizer) {
  Allocator unaccounted(nullptr);
  // This rank's part of the model, on dp rank 0 (and under ep the other experts' ranks).
  ASSIGN_OR_RETURN(Whole local, weights_->GatherPart(with_optimizer));
  if (world_ == nullptr || (groups_.tp == nullptr && groups_.pp == nullptr && groups_.ep == nullptr)) {
    return logs() ? std::move(local) : Whole{};  // the part is the whole model
  }
  if (!local.params.defined()) return Whole{};  // dp ranks > 0
  const std::vector<std::pair<std::string, Tensor*>> no_state;
  const auto states = local.optimizer != nullptr ? local.optimizer->State() : no_state;
  if (!logs()) {
    RETURN_IF_ERROR(world_->Send(local.params, 0));
    for (auto& [name, state] : states) RETURN_IF_ERROR(world_->Send(*state, 0));
    return Whole{};
  }
  const TrainOptions& o = options_;
  const int64_t whole_total = o.model.NumParams();
  Whole whole;
  ASSIGN_OR_RETURN(whole.params, Tensor::Empty({whole_total}, DType::kF32, unaccounted));
  if (local.optimizer != nullptr) {
    ASSIGN_OR_RETURN(whole.gathered, MakeOptimizer(o, whole_total, unaccounted));
    whole.optimizer = whole.gathered.get();
    whole.optimizer->set_step(local.optimizer->step());
  }
  // Dp rank 0's parts, and under ep the other experts of dp group ranks < ep, placed first:
  // their other tensors are dp rank 0's (replicas), or (ZeRO) not gathered on them at all,
  // and dp rank 0's part then overwrites them.
  std::vector<int> parts;
  const parallel::Topology grid = o.topology();
  for (int r = 0; r < o.world(); ++r) {
    const int dp_rank = grid.DpGroupRank(grid.Of(r));
    if (dp_rank > 0 && dp_rank < o.parallel.ep) parts.push_back(r);
  }
  for (int r = 0; r < o.world(); ++r) {
    const parallel::GridCoordinates at = o.topology().Of(r);
    if (at.dp == 0 && at.cp == 0) parts.push_back(r);  // a cp group's replicas: its first
  }
  for (int r : parts) {
    const model::ParameterLayout layout = o.RankLayout(r);
    // Rank r's part (ours for r = 0) into its places in the whole model.
    auto place = [&](Tensor* mine, float* into) -> absl::Status {
      Tensor part = r == 0 ? *mine : Tensor();
      if (r > 0) {
        ASSIGN_OR_RETURN(part, Tensor::Empty({layout.total()}, DType::kF32, unaccounted));
        RETURN_IF_ERROR(world_->Recv(part, r));
      }
      layout.ToGlobal(part.data<float>(), into);
      return absl::OkStatus();
    };
    RETURN_IF_ERROR(place(&local.params, whole.params.data<float>()));
    for (size_t i = 0; i < states.size(); ++i) {
      RETURN_IF_ERROR(place(states[i].second, whole.optimizer->State()[i].second->data<float>()));
    }
  }
  return whole;
}

absl::Status Trainer::Save(const std::string& path, int64_t step) {
  comm::PhaseScope phase(traffic(), comm::Phase::kCheckpoint);
  ASSIGN_OR_RETURN(Whole whole, GatherWhole(/*with_optimizer=*/true));
  if (!logs()) return absl::OkStatus();
  const model::TrainedOn run{.precision = PrecisionName(options_.precision.dtype),
                             .data = data_.source,
                             .data_bytes = data_.bytes,
                             .data_fnv1a64 = data_.fingerprint};
  return model::SaveCheckpoint(path, options_.model, whole.params.data<float>(), whole.optimizer,
                               step, run);
}

absl::Status Trainer::Load(const std::string& path) {
  // Every rank reads the whole file and keeps its part: its tensor-parallel slice of
  // every tensor, and with ZeRO its shard of that.
  Allocator unaccounted(nullptr);
  const int64_t whole_total = options_.model.NumParams();
  ASSIGN_OR_RETURN(Tensor params, Tensor::Empty({whole_total}, DType::kF32, unaccounted));
  // Sampling needs the parameters alone (and takes a checkpoint of any optimizer).
  std::unique_ptr<optim::Optimizer> optimizer;
  if (!options_.sampling.sample_only) {
    ASSIGN_OR_RETURN(optimizer, MakeOptimizer(options_, whole_total, unaccounted));
  }
  ASSIGN_OR_RETURN(model::LoadedCheckpoint loaded,
                   model::LoadCheckpoint(path, options_.model, params.data<float>(), optimizer.get()));
  start_step_ = options_.sampling.sample_only ? loaded.saved_step : loaded.step;
  loaded_from_ = loaded.trained_on;
  const model::ParameterLayout& layout = gpt_->layout();
  ASSIGN_OR_RETURN(Tensor local_params, Tensor::Empty({layout.total()}, DType::kF32, unaccounted));
  layout.FromGlobal(params.data<float>(), local_params.data<float>());
  std::unique_ptr<optim::Optimizer> local_optimizer;
  if (loaded.has_optimizer) {
    ASSIGN_OR_RETURN(local_optimizer, MakeOptimizer(options_, layout.total(), unaccounted));
    auto whole = optimizer->State();
    auto mine = local_optimizer->State();
    for (size_t i = 0; i < mine.size(); ++i) {
      layout.FromGlobal(whole[i].second->data<float>(), mine[i].second->data<float>());
    }
    local_optimizer->set_step(loaded.step);
  }
  return weights_->Load(local_params.data<float>(), local_optimizer.get());
}

}  // namespace tally::train
