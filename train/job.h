// A training job (job.cc): the checks made before anything is allocated, then one rank,
// or every rank on threads or MPI processes; then, on rank 0, the report, the files it
// writes, and the check against a single rank. The training loop (trainer.h) knows
// nothing of it; the report (report/report.h) is what the job calls after the loop.
#pragma once

#include <ostream>

#include "absl/status/status.h"
#include "train/options.h"

namespace tally::train {

// What can be known wrong about resolved, valid options before anything is allocated:
// the input files are regular files, every output path can be written (where
// `writes_outputs`: the process of rank 0), and `ranks_here` ranks of the run fit in this
// machine's memory (on the CPU).
absl::Status CheckBeforeTraining(const TrainOptions& options, int ranks_here, bool writes_outputs);

// Runs options.parallel.dp ranks (one when dp == 1) and prints, after the run, the traffic and
// memory report of every rank; writes --traffic_json.
absl::Status Train(const TrainOptions& options, std::ostream& log);

}  // namespace tally::train
