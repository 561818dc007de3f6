// Whole checkpoints from any grid, and into any (trainer.h): the parts of the model are
// gathered to rank 0 on save, and every rank keeps its part on load. A compressed run's
// per-rank state goes with them, and comes back into a run of the same grid.
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/model/checkpoint.h"
#include "core/runtime/status_macros.h"
#include "core/train/trainer.h"

namespace tally::train {
namespace {

// What a run's compression state is (model::CompressionState's key): the method with the
// flag that shapes its buffers, and the grid that cut the model into the ranks' parts;
// empty without compression. For example
//   "powersgd rank 4 on dp 2, cp 1, tp 2, pp 2 (layers balanced, 1 chunk a stage), order tp-dp-pp"
std::string CompressionKey(const TrainOptions& o) {
  const ParallelOptions& p = o.parallel;
  if (!p.PowerSgd() && !p.OneBitAdam()) return "";
  return absl::StrCat(
      p.PowerSgd() ? absl::StrCat("powersgd rank ", p.powersgd_rank) : "onebit_adam", " on dp ",
      p.dp, ", cp ", p.cp, ", tp ", p.tp, ", pp ", p.pp, " (layers ",
      p.pp_layers.empty() ? "balanced" : absl::StrJoin(p.pp_layers, ","), ", ",
      p.virtual_stages, p.virtual_stages == 1 ? " chunk" : " chunks", " a stage), order ",
      parallel::Name(o.placement.order));
}

}  // namespace

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
  ASSIGN_OR_RETURN(model::CompressionState compression, GatherCompressionState());
  if (!logs()) return absl::OkStatus();
  const model::TrainedOn run{.precision = PrecisionName(options_.precision.dtype),
                             .data = data_.source,
                             .data_bytes = data_.bytes,
                             .data_fnv1a64 = data_.fingerprint};
  return model::SaveCheckpoint(path, options_.model, whole.params.data<float>(), whole.optimizer,
                               step, run, compression);
}

// Each rank sends rank 0 its buffers' sizes, then the buffers, in their order.
absl::StatusOr<model::CompressionState> Trainer::GatherCompressionState() {
  const auto mine = weights_->CompressionState();
  model::CompressionState state;
  if (mine.empty()) return state;
  Allocator unaccounted(nullptr);
  ASSIGN_OR_RETURN(Tensor sizes, Tensor::Empty({int64_t(mine.size())}, DType::kI64, unaccounted));
  for (size_t i = 0; i < mine.size(); ++i) sizes.data<int64_t>()[i] = mine[i].second->numel();
  if (!logs()) {
    RETURN_IF_ERROR(world_->Send(sizes, 0));
    for (const auto& [name, buffer] : mine) RETURN_IF_ERROR(world_->Send(*buffer, 0));
    return state;
  }
  state.key = CompressionKey(options_);
  const int ranks = world_ == nullptr ? 1 : world_->size();
  for (int r = 0; r < ranks; ++r) {
    if (r > 0) RETURN_IF_ERROR(world_->Recv(sizes, r));
    for (size_t i = 0; i < mine.size(); ++i) {
      Tensor buffer = *mine[i].second;
      if (r > 0) {
        ASSIGN_OR_RETURN(buffer, Tensor::Empty({sizes.data<int64_t>()[i]}, DType::kF32, unaccounted));
        RETURN_IF_ERROR(world_->Recv(buffer, r));
      }
      const float* values = buffer.data<float>();
      state.tensors[model::CompressionTensorName(r, mine[i].first)].assign(
          values, values + buffer.numel());
    }
  }
  return state;
}

absl::Status Trainer::RestoreCompressionState(const model::LoadedCheckpoint& loaded) {
  const auto mine = weights_->CompressionState();
  if (mine.empty() || !loaded.has_optimizer) return absl::OkStatus();  // a start from weights
  const std::string& path = options_.checkpoint.load;
  const std::string key = CompressionKey(options_);
  if (loaded.compression.key != key) {
    // Until the first compressed step the state is where it starts: only later is it lost.
    if (logs() && loaded.step > options_.parallel.CompressionWarmup()) {
      std::cerr << "[train] warning: '" << path << "' holds "
                << (loaded.compression.key.empty() ? std::string("no compression state")
                                                   : "the compression state of " + loaded.compression.key)
                << ", not of " << key << ": from step " << loaded.step
                << " the error feedback starts at zero"
                << (options_.parallel.PowerSgd() ? " and Q from the seed" : "") << "\n";
    }
    return absl::OkStatus();
  }
  const int rank = world_ == nullptr ? 0 : world_->rank();
  for (const auto& [buffer, tensor] : mine) {
    const std::string name = model::CompressionTensorName(rank, buffer);
    auto it = loaded.compression.tensors.find(name);
    if (it == loaded.compression.tensors.end()) {
      return absl::DataLossError(absl::StrCat("[checkpoint] '", path, "' has no tensor '", name,
                                              "' (its compression is ", key, ")"));
    }
    if (int64_t(it->second.size()) != tensor->numel()) {
      return absl::DataLossError(absl::StrCat("[checkpoint] '", path, "': ", name, " holds ",
                                              it->second.size(), " values; this run's has ",
                                              tensor->numel()));
    }
    RETURN_IF_ERROR(tensor->CopyFromHost(it->second.data()));
  }
  return absl::OkStatus();
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
  RETURN_IF_ERROR(RestoreCompressionState(loaded));
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
