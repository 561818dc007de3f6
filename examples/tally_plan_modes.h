// tally_plan's modes beside the one grid's table (tally_plan.cc parses the flags):
// --sweep, --search and --explain, each printing to stdout.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "lab/plan/plan.h"

namespace tally {

// --sweep=dim:v1,v2,...: one CSV row per strategy and value.
absl::Status Sweep(plan::PlanInput in, const std::string& spec);
// --search: the grids that fit, fastest first (the first 20).
absl::Status Search(const plan::PlanInput& base);
// --explain: the seed's flow on the GPUs, beside the search (a100's cluster unless given).
absl::Status Explain(plan::PlanInput base);

}  // namespace tally
