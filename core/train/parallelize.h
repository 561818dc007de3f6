// A rank's parallelism, made from the options before its model, as torchtitan's
// parallelize function does: its groups of the grid (core/parallel/topology.h), its tensor-,
// expert- and context-parallel parts, and the store that holds its weights: a replica
// with data parallelism's sync, or ZeRO's stage, with whatever the extensions put at
// their seams (core/train/extensions.h). The trainer builds the model on them, and the
// pipeline around it.
//
//   ASSIGN_OR_RETURN(Parallelized p, Parallelize(options, world, model_alloc));
//   ASSIGN_OR_RETURN(auto gpt, model::GPT::Create(options.model, model_alloc,
//                                                 p.weights.get(), &p.tensor_parallel, ...));
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "core/model/parameters.h"
#include "core/parallel/context_parallel.h"
#include "core/parallel/expert_parallel.h"
#include "core/parallel/step_end.h"
#include "core/parallel/tensor_parallel.h"
#include "core/parallel/topology.h"
#include "core/runtime/allocator.h"
#include "core/runtime/comm/communicator.h"
#include "core/train/options.h"

namespace tally::train {

struct Parallelized {
  // dp when dp > 1 or ZeRO, tp when tp > 1, pp (the stages, in order) and embedding (the
  // first and the last stage, which both hold the tied embedding) when pp > 1, ep and edp
  // with experts, cp, and the dp group's node groups when a seam needs them; null
  // otherwise (all null on one rank).
  parallel::Topology::Groups groups;
  // The model's layers over the tp group (one rank when there is none): its LayerSplit.
  parallel::TensorParallel tensor_parallel;
  // Expert parallelism: the experts' place (over the ep group); null without it.
  std::unique_ptr<parallel::ExpertParallel> experts;
  // Context parallelism: each sequence's pieces over the cp group (the model's
  // SequenceSplit); null without it.
  std::unique_ptr<parallel::ContextParallel> sequence;
  // The layers this rank's pipeline stage holds.
  model::ModelChunks stage;
  // The model's weights, gradients and optimizer, and the end of its step, initialised
  // from the options' seed.
  std::unique_ptr<parallel::TrainableWeights> weights;
};

// This rank's parallelism under `options` (valid ones), `world` its ranks (null: one
// rank), the model's memory from `model_alloc`. Collective over the world.
absl::StatusOr<Parallelized> Parallelize(const TrainOptions& options, comm::Communicator* world,
                                         Allocator& model_alloc);

}  // namespace tally::train
