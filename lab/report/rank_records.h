// What each rank brings to the end-of-run report, and how rank 0 collects it.
//
// Every rank encodes its record (ledgers, times, spans) and sends it to rank 0 over the
// world communicator: a gather of the sizes, then one message per rank. Thread ranks and
// MPI processes take the same path, so the report is made the same way from either.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "core/runtime/comm/communicator.h"
#include "core/runtime/comm/ledger/ledger.h"
#include "core/runtime/memory_ledger.h"
#include "core/train/trainer.h"

namespace tally::report {

struct RankRecord {
  comm::TrafficLedger traffic;
  MemoryLedger memory;
  // The rank's train::Trainer's, over the run.
  int64_t busy_nanos = 0, step_nanos = 0, train_nanos = 0, cpu_nanos = 0;
  std::vector<train::Trainer::Span> spans;
};

// Rank 0 gets every rank's record by world rank (its own included); the others an empty
// list. Collective over `world`. Its own transfers are booked after the records were
// taken, so no record counts them.
absl::StatusOr<std::vector<RankRecord>> GatherRecords(comm::Communicator& world,
                                                      const RankRecord& mine);

}  // namespace tally::report
