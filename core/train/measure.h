// The ledgers of a run's steps, for code that checks a formula against them (the
// planner's tests, tally_claims): every rank on a thread, no report, no files.
//
//   ASSIGN_OR_RETURN(RankLedgers run, MeasureSteps(options.Resolved()));
//   run.traffic[r].Sum(rows).bytes_sent   the bytes rank r sent under `rows` in the steps
#pragma once

#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "core/runtime/comm/ledger/ledger.h"
#include "core/runtime/memory_ledger.h"
#include "core/train/options.h"
#include "core/train/trainer.h"

namespace tally::train {

// Every rank's ledgers, by world rank: the traffic of the steps (the set-up's cleared),
// the memory of the whole run.
struct RankLedgers {
  std::vector<comm::TrafficLedger> traffic;
  std::vector<MemoryLedger> memory;
};

// `o`'s steps (resolved, valid options) on thread ranks placed on o.PlacedNodes(). `after`,
// if given, sees each rank's trainer once its steps are done (on that rank's thread).
absl::StatusOr<RankLedgers> MeasureSteps(
    const TrainOptions& o, const std::function<void(int rank, Trainer&)>& after = {});

}  // namespace tally::train
