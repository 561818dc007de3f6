// The variants beyond the core (extensions/) plug into a run here. Each registers once,
// when its program starts (TALLY_REGISTER_EXTENSION), and for every run the trainer
// asks each, in the order of their registration keys, what it puts at the stores' seams
// (core/parallel/seams.h) for the run's options: nothing, when they ask nothing of it. The
// core names none of them.
//
//   class Mine : public Extension {
//     absl::Status Fill(const TrainOptions& o, const SeamGroups& g, Seams& s) const override;
//   };
//   TALLY_REGISTER_EXTENSION(mine, 10, Mine);
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/parallel/seams.h"
#include "core/parallel/topology.h"
#include "core/runtime/comm/communicator.h"
#include "core/train/options.h"

namespace tally::train {

// What a run puts at the seams; null fields keep the core's plain calls.
struct Seams {
  std::shared_ptr<parallel::GradientReducer> zero_reducer;  // ZeRO's reduce-scatters
  parallel::MakeParameterGatherer zero_gatherer;            // ZeRO-3's gathers
  bool zero_gathers_checkpoint = true;                      // whether this rank gathers one
  parallel::MakeGradientHook replica_hook;                  // data parallelism's sum
};

// This rank's groups, as the trainer split them (core/parallel/topology.h).
using SeamGroups = parallel::Topology::Groups;

class Extension {
 public:
  virtual ~Extension() = default;
  // Sets what `options` ask of this extension in `seams` (which may hold what an
  // extension before it set), given this rank's `groups`.
  virtual absl::Status Fill(const TrainOptions& options, const SeamGroups& groups,
                            Seams& seams) const = 0;
};

// Registers `extension` under `name`; `order` places it among the others (lower first).
// Returns true, for a static initialiser.
bool RegisterExtension(std::string name, int order, std::unique_ptr<Extension> extension);

// The names of the registered extensions, in the order they fill.
std::vector<std::string> RegisteredExtensions();

// Every registered extension's seams for `options`, in order.
absl::StatusOr<Seams> FillSeams(const TrainOptions& options, const SeamGroups& groups);

}  // namespace tally::train

#define TALLY_REGISTER_EXTENSION(name, order, type)                     \
  [[maybe_unused]] static const bool tally_extension_registered_##name = \
      ::tally::train::RegisterExtension(#name, order, std::make_unique<type>())
