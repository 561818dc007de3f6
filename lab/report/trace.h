// --trace: the run as a Chrome Trace Event file (open it in Perfetto or chrome://tracing).
//
// One process per rank, named with its grid coordinates; a "compute" track with a span
// per forward and backward of a micro-batch, a "communication" track with a span per
// collective or transfer (its group, primitive, algorithm, phase, scope and bytes in
// args), a counter of the bytes the rank has sent, and a flow arrow from each pipeline
// send to its receive. Times are microseconds from the first event of the run.
#pragma once

#include <string>
#include <vector>

#include "lab/report/replay.h"
#include "core/runtime/comm/ledger/ledger.h"
#include "core/train/options.h"
#include "core/train/trainer.h"

namespace tally::report {

// `ledgers` traced (TrafficLedger::set_tracing) and `spans` recorded, by world rank.
std::string TraceJson(const train::TrainOptions& options,
                      const std::vector<comm::TrafficLedger>& ledgers,
                      const std::vector<std::vector<train::Trainer::Span>>& spans);

// A dry run replayed on --cluster (lab/report/replay.h): the predicted timeline, each rank's
// compute spans on its "compute" track and the time it spent in each call (from entering
// or waiting to the call's end) on its "communication" track, in predicted microseconds.
std::string PredictedTraceJson(const train::TrainOptions& options,
                               const std::vector<ReplayedRank>& ranks);

}  // namespace tally::report
