// A strategy's calls of one step, as data. Each strategy declares the calls a rank makes
// in a step beside the code that makes them (core/parallel/tensor_parallel.h's
// TensorParallelCalls, data_parallel.h's GradientSyncCalls, zero/sharding.h's ZeroCalls,
// pipeline_schedule.h's PipelineCalls, expert_parallel.h's RoutingCountCalls, step_end.h's
// StepEndCalls): the ledger row each is booked under (group, primitive, phase, scope), the
// group it runs over and its size. The report's exact column is the join of a rank's
// lists with its ledger rows, so that a call is written once, where it is made:
//
//   sent(row) = Σ over the rank's calls with the row's group, primitive, phase and scope
//               of  calls · ExactTraffic(primitive, row's algorithm, ranks, rank, count,
//                                        element, nodes).sent
//
// (a receive sends nothing). A row no call matches has no formula.
//
//   comm::ExpectedCalls calls = parallel::TensorParallelCalls(shape);
//   const int64_t per_step = comm::ExpectedSent(calls, key);  // -1: no formula
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/runtime/comm/ledger/ledger.h"
#include "core/runtime/comm/types.h"

namespace tally::comm {

struct ExpectedCall {
  std::string group = {};  // the ledger's group name (names.h's comm::group::k*)
  Primitive primitive = Primitive::kAllReduce;
  Phase phase = Phase::kOther;
  std::string scope = {};   // the ledger's label ("" for none)
  int64_t count = 0;        // the call's count, as exact_traffic.h reads it
  int64_t element = 4;      // bytes a value
  int64_t calls = 1;        // a step
  int ranks = 1, rank = 0;  // the group's size and this rank's place in it
  // The node of each of the group's ranks, for the hierarchical algorithm (empty: the
  // ring's bytes, as the communicator runs it without them).
  std::vector<int> nodes = {};
  bool receive = false;  // a point-to-point receive: booked, nothing sent
  // How many of the run's steps make these calls (-1: every step); PowerSGD's warm-up
  // makes the plain sum's calls on its steps only, and its own on the others.
  int64_t of_steps = -1;
};
using ExpectedCalls = std::vector<ExpectedCall>;

// Appends `more` to `calls`.
void Append(ExpectedCalls& calls, ExpectedCalls more);

// Bytes `calls` send in one step with `algorithm`.
int64_t TotalSent(std::span<const ExpectedCall> calls, Algorithm algorithm);

// Bytes the calls matching `key` send in one step with the key's algorithm; -1 when no
// call matches it.
int64_t ExpectedSent(std::span<const ExpectedCall> calls, const LedgerKey& key);
// The same over a run of `steps` steps (each call on its of_steps, or on every step).
int64_t ExpectedRunSent(std::span<const ExpectedCall> calls, const LedgerKey& key, int64_t steps);

}  // namespace tally::comm
