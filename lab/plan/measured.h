// A plan beside the run it describes: the ledger rows each planned strategy's bytes are,
// the busiest GPU of a run under them, and the run itself on thread ranks. The planner's
// tests and tally_claims (lab/plan/claims.h) hold the plan's exact column to these.
//
//   ASSIGN_OR_RETURN(train::RankLedgers run, MeasurePlan(in, /*dry_run=*/true));
//   const comm::LinkBytes most = BusiestSent(run.traffic, nodes, PlanLedgerRows("zero-3", 3));
//   most.total() == the row "zero-3"'s exact_bytes_per_gpu, most.inter its inter_bytes_per_gpu
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lab/plan/plan.h"
#include "core/runtime/comm/ledger/ledger.h"
#include "core/runtime/comm/nodes.h"
#include "core/train/measure.h"

namespace tally::plan {

using LedgerRows = std::function<bool(const comm::LedgerKey&)>;

// The ledger rows a planned strategy's bytes are, under ZeRO stage `zero` (null: a
// strategy with no such rows, or one this stage does not run):
//   dp all-reduce             dp's all-reduces without a scope (zero 0)
//   zero-N                    dp's and edp's gathers and reduce-scatters
//   zero-3 + hpz|qwz|qgz,     the same, and ZeRO's shard and replica groups (qgZ's hops,
//   zero++ (hpz + qwz + qgz), HSDP's all-reduce)
//   zero-3, no reshard
//   edp all-reduce (experts)  edp's (zero 0)
//   tp (layers of a stage)    tp's layer rows but the experts' (routed: no closed form)
//   tp (embedding, LM head, loss), tp (pipeline gathers), pp (tied embedding),
//   pp (boundaries), cp (attention)
//   dp powersgd (r=...)       dp's rows in backward (a compressed step)
//   dp 1-bit adam             dp's onebit_ scopes
LedgerRows PlanLedgerRows(const std::string& strategy, int zero);

// The busiest GPU of `traffic` under `rows`: the most bytes sent, and of equals the one
// that sends the most across `nodes`.
comm::LinkBytes BusiestSent(const std::vector<comm::TrafficLedger>& traffic,
                            const comm::Nodes& nodes, const LedgerRows& rows);

// The most bytes any rank of `traffic` sent under `rows`, wherever the ranks are.
int64_t MostSent(const std::vector<comm::TrafficLedger>& traffic, const LedgerRows& rows);

// `steps` steps of the run `in` describes (PlanAsTrainOptions), one BLAS thread a rank, no
// evaluation or sample; a dry run (meta tensors, the same ledgers) unless `dry_run` is
// false; `adjust`, if given, sets what a plan does not describe (a warm-up's length).
// Options the run refuses are its error.
absl::StatusOr<train::RankLedgers> MeasurePlan(
    const PlanInput& in, bool dry_run = true, int64_t steps = 1,
    const std::function<void(train::TrainOptions&)>& adjust = {});

}  // namespace tally::plan
