// A rank's timeline: what it computed and communicated, in the order it did, so that a
// run can be replayed on a modelled cluster (lab/report/replay.h) — compute at the cluster's
// FLOP rate, each message at its link's α-β cost, every wait where the run waited.
//
//   compute     the work the rank's kernels did (consecutive kernels' added up): their
//               matmuls by size and their memory-bound passes' bytes (ComputeWork), and
//               seconds of work that is no kernel's (--slow_rank's added compute)
//   collective  a blocking collective: its group, its sequence number on the group, and
//               what this rank sent in it (peer, bytes, messages)
//   post        a non-blocking collective or a point-to-point send or receive, posted;
//               its work number on this rank
//   wait        the rank waits for a posted work; what it sent in it, now known
//
// Every call also carries when it happened on this host (MonotonicNanos, core/runtime/clock.h;
// one clock for every thread and process of a machine): a collective from its start to
// its end, a post when it was posted, a wait from when the rank began waiting to when it
// went on. Those stamps are the measured clock's; the replay uses only FLOPs and bytes.
//
// Recorded only while on (TrafficLedger::timeline().set_recording), by the rank's own
// thread: the communicator's calls (core/runtime/comm) and, through ScopedTimeline, the rank's
// kernels.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/runtime/byte_stream.h"

namespace tally {

// What a rank sent a peer in one call: the bytes, and the transfers they went in (each
// one α on the modelled clock: a transfer's segments of at most max_chunk_bytes are
// posted together and follow each other on the link, as the seed's T = 2(N−1)·(α +
// M/(N·β)) counts a ring step).
struct PeerBytes {
  int peer = -1;  // world rank
  int64_t bytes = 0, messages = 0;
};

// Matmul calls of one size: each call's FLOPs and the bytes its operands and result take
// in and out of memory, and how many calls. The roofline prices a call by both
// (core/train/cluster.h): its efficiency depends on its size.
struct MatmulCalls {
  double flops = 0, bytes = 0;  // each call's
  int64_t calls = 0;
};

// What kernels computed: their matmuls (calls of equal size and bytes kept together), the
// matmuls' FLOPs in all, and the bytes the memory-bound passes (LayerNorm, GELU, the
// residual additions, softmax, cross-entropy, the optimizer) read and wrote.
struct ComputeWork {
  std::vector<MatmulCalls> matmuls;
  double flops = 0;
  double memory_bytes = 0;
  void AddMatmuls(double flops_each, double bytes_each, int64_t calls);
  ComputeWork& operator+=(const ComputeWork& o);
  // This work `times` over (every count and byte scaled).
  ComputeWork Times(double times) const;
  bool empty() const { return flops <= 0 && memory_bytes <= 0; }
};

struct TimelineEntry {
  enum class Kind : uint8_t { kCompute, kCollective, kPost, kWait };
  Kind kind = Kind::kCompute;
  ComputeWork compute;     // kCompute
  double seconds = 0;      // kCompute: time that is no kernel's FLOPs, the same on any cluster
  int64_t begin_nanos = 0, end_nanos = 0;  // when it happened on this host (see above)
  int64_t work = -1;       // kPost, kWait
  std::string group;       // kCollective, kPost: "name:world ranks" (one string per group)
  int group_size = 0;      // kCollective, kPost
  int64_t seq = -1;        // the collective's sequence on its group; -1: point-to-point
  int peer = -1;           // point-to-point: the peer's world rank
  bool send = false;       // point-to-point: a send, else a receive
  int64_t bytes = 0;       // point-to-point: the message's bytes
  std::vector<PeerBytes> sent;  // kCollective, kWait: what this rank sent
  std::string what;        // kCollective, kPost: the call's ledger row ("dp all_reduce ...")
};

class Timeline {
 public:
  bool recording() const { return recording_; }
  void set_recording(bool on) { recording_ = on; }

  // Work of the rank's kernels (core/runtime/kernels/work.h), added to the compute before.
  void Compute(const ComputeWork& work);
  // `seconds` of compute that no kernel counts (the same on every cluster).
  void ComputeSeconds(double seconds);
  // A blocking collective from `begin_nanos` to `end_nanos` (MonotonicNanos).
  void Collective(const std::string& group, int group_size, int64_t seq, std::string what,
                  std::vector<PeerBytes> sent, int64_t begin_nanos, int64_t end_nanos);
  // A posted work's number (kPost), to wait for with Wait; posted at `nanos`.
  int64_t PostCollective(const std::string& group, int group_size, int64_t seq, std::string what,
                         int64_t nanos);
  int64_t PostMessage(const std::string& group, int peer, bool send, int64_t bytes,
                      std::string what, int64_t nanos);
  // The rank waited for `work` from `begin_nanos` to `end_nanos`.
  void Wait(int64_t work, std::vector<PeerBytes> sent, int64_t begin_nanos, int64_t end_nanos);

  const std::vector<TimelineEntry>& entries() const { return entries_; }
  void Clear() { entries_.clear(); }

  void Encode(ByteWriter& w) const;
  bool Decode(ByteReader& r);

 private:
  bool recording_ = false;
  int64_t works_ = 0;
  std::vector<TimelineEntry> entries_;
};

// The timeline the kernels of this thread's rank add their FLOPs to, for the scope's
// lifetime (null: none).
Timeline* CurrentTimeline();
inline void CountWork(const ComputeWork& work) {
  if (Timeline* timeline = CurrentTimeline()) timeline->Compute(work);
}
class ScopedTimeline {
 public:
  explicit ScopedTimeline(Timeline* timeline);
  ~ScopedTimeline();
  ScopedTimeline(const ScopedTimeline&) = delete;
  ScopedTimeline& operator=(const ScopedTimeline&) = delete;

 private:
  Timeline* saved_;
};

}  // namespace tally
