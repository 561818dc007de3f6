// A training job (job.cc): the checks made before anything is allocated
// (core/train/before_training.h), then one rank, or every rank on threads or MPI processes;
// then, on rank 0, the report, the files it writes, and the check against a single rank.
// The training loop (core/train/trainer.h) knows nothing of it; the report (lab/report/report.h)
// is what the job calls after the loop.
#pragma once

#include <ostream>

#include "absl/status/status.h"
#include "core/train/options.h"

namespace tally::train {

// Runs options.parallel.dp ranks (one when dp == 1) and prints, after the run, the traffic and
// memory report of every rank; writes --traffic_json.
absl::Status Train(const TrainOptions& options, std::ostream& log);

}  // namespace tally::train
