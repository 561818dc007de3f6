// What can be known wrong about a run before anything is allocated (before_training.cc):
// its files, and whether it fits in this machine's memory. The job (examples/job.h) checks
// this before it launches the ranks; tally_model_bench before it builds its model.
#pragma once

#include "absl/status/status.h"
#include "core/train/options.h"

namespace tally::train {

// What can be known wrong about resolved, valid options before anything is allocated:
// the input files are regular files, every output path can be written (where
// `writes_outputs`: the process of rank 0), and `ranks_here` ranks of the run fit in this
// machine's memory (on the CPU).
absl::Status CheckBeforeTraining(const TrainOptions& options, int ranks_here, bool writes_outputs);

}  // namespace tally::train
