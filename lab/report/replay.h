// A run replayed on a modelled cluster (tally_train --dry_run --cluster): every rank's
// timeline (core/runtime/timeline.h) played forward on the cluster's clock, as the run's own
// dependencies allow.
//
//   compute     the kernels' work timed on the cluster's GPU (cluster.h's train::GpuModel: each
//               matmul call by its size, the memory-bound passes by their bytes)
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
// modelled (no kernel launch, no contention between transfers on one link).
//
// Who waited for whom (the seed's diagnosis of a communication bottleneck): a wait that
// began at t0 and ended at t1 on a call whose last peer arrived at A is
//   waiting for that peer   min(max(A - t0, 0), t1 - t0)   (booked to the peer)
//   moving bytes            the rest
// where a collective's members arrive when they enter it (blocking) or post it, and a
// send's peer when it posts the matching receive. The replay reads A on the modelled
// clock; MeasuredWaits reads the same on this host's, from the timeline's stamps.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/runtime/comm/nodes.h"
#include "core/runtime/timeline.h"
#include "core/train/cluster.h"

namespace tally::report {

// A stretch of a rank's replayed time: computing, or in a call (from when the rank
// entered or waited for it to its end).
struct ReplaySpan {
  std::string name;  // "compute", or the call's ledger row
  double start = 0, end = 0;
  bool compute = false;
  bool idle = false;  // waiting for a pipeline neighbour's message (the bubble)
};
// The part of a rank's exposed time it spent waiting for a late peer, by that peer's
// world rank.
struct WaitedFor {
  double seconds = 0;
  std::map<int, double> by_peer;
  void Add(int peer, double s);
  // The peer waited for longest (-1: none).
  int Most() const;
};
struct ReplayedRank {
  double seconds = 0, compute_s = 0, exposed_s = 0, idle_s = 0;  // over the timeline
  WaitedFor waited;  // of exposed_s
  std::vector<ReplaySpan> spans;
  // Point-to-point messages by group name ("cp", "pp"): the α-β time of the rank's sends,
  // and of exposed_s the part spent waiting on that group's sends and receives. What the
  // rank computed meanwhile hid the rest (the cp ring's K, V behind its blocks).
  std::map<std::string, double> p2p_sent_s, p2p_exposed_s;
};

// Fails only if the timelines cannot all run to their end (a wait nobody can satisfy).
absl::StatusOr<std::vector<ReplayedRank>> Replay(const std::vector<const Timeline*>& timelines,
                                                 const comm::Nodes& nodes,
                                                 const comm::Cluster& links,
                                                 const train::GpuModel& gpu);

// The same split on this host's clock: each rank's exposed time in its timeline's
// collectives and sends (from the stamps; their sum, not the ledger's over the run), and
// the part of it spent waiting for the last peer. Stamps of ranks on different machines
// are not comparable: the caller passes only timelines of one machine.
struct MeasuredWaits {
  double exposed_s = 0;
  WaitedFor waited;
};
std::vector<MeasuredWaits> MeasureWaits(const std::vector<const Timeline*>& timelines);

}  // namespace tally::report
