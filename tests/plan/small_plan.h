// The plan tests' small model (4 layers of 16 channels, 2 heads) and one step of the run a
// plan describes, on thread ranks.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <vector>

#include "parallel/pipeline_schedule.h"
#include "plan/plan.h"
#include "runtime/comm/ledger/ledger.h"
#include "tests/train/run_ranks.h"

namespace tally::plan {

// A 4-layer GPT of 16 channels and 2 heads, b = 2, s = 16.
inline PlanInput SmallPlan() {
  PlanModel model{"small", 0, 0, 0, true, {}};
  model.config.n_layer = 4;
  model.config.n_head = 2;
  model.config.n_embd = 16;
  model.config.seq_len = 16;
  model.params = model.config.NumParams();
  model.layers = 4;
  model.hidden = 16;
  PlanInput in{model};
  in.batch = 2;
  in.seq_len = 16;
  return in;
}

// One step of the run the plan describes.
inline train::RunResult RunPlan(const PlanInput& in, parallel::PipelineSchedule schedule = {}) {
  train::TrainOptions o = plan::PlanAsTrainOptions(in);
  o.training.steps = 1;
  o.data.eval_every = 0;
  o.sampling.sample_bytes = 0;
  o.training.threads = 1;
  o.parallel.schedule = schedule;
  return RunRanks(o);
}

// The most bytes any rank sent in `rows`.
inline int64_t BusiestSent(const std::vector<comm::TrafficLedger>& traffic,
                    const std::function<bool(const comm::LedgerKey&)>& rows) {
  int64_t most = 0;
  for (const comm::TrafficLedger& ledger : traffic) most = std::max(most, ledger.Sum(rows).bytes_sent);
  return most;
}

}  // namespace tally::plan
