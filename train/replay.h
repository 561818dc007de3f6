// A run replayed on a modelled cluster (tally_train --dry_run --cluster): every rank's
// timeline (runtime/timeline.h) played forward on the cluster's clock, as the run's own
// dependencies allow.
//
//   compute     FLOPs / the GPU's achievable rate (ClusterPreset::tflops)
//   collective  starts when the last member arrives; ends, for every member, after the
//               slowest member's messages: Σ over its peers of messages·α + bytes/β on
//               the link to that peer (comm::Nodes, comm::Cluster), the model the
//               report's "modelled" table uses
//   posted      a non-blocking collective the same, from its members' posts; the rank
//               goes on and waits for its end only at its wait
//   message     a point-to-point transfer ends at max(send posted, receive posted) +
//               the sender's α-β time; a receive waited for is the pipeline's bubble
//
// A rank's time is split into compute, exposed communication (waiting in a collective or
// for a send) and idle (waiting for a pipeline neighbour's message). Nothing else is
// modelled (no kernel launch, no memory bandwidth, no contention between transfers on one
// link).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/comm/nodes.h"
#include "runtime/timeline.h"

namespace tally::train {

// A stretch of a rank's replayed time: computing, or in a call (from when the rank
// entered or waited for it to its end).
struct ReplaySpan {
  std::string name;  // "compute", or the call's ledger row
  double start = 0, end = 0;
  bool compute = false;
};
struct ReplayedRank {
  double seconds = 0, compute_s = 0, exposed_s = 0, idle_s = 0;  // over the timeline
  std::vector<ReplaySpan> spans;
};

// Fails only if the timelines cannot all run to their end (a wait nobody can satisfy).
absl::StatusOr<std::vector<ReplayedRank>> Replay(const std::vector<const Timeline*>& timelines,
                                                 const comm::Nodes& nodes,
                                                 const comm::Cluster& links, double tflops);

}  // namespace tally::train
