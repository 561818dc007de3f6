// The traffic ledger: every byte a rank moves, recorded where it moves.
//
// The counting layer (wire.h) records each message as it is posted: rank, peer, group,
// primitive, algorithm, phase, scope label, bytes, messages; and the time until it
// completed. Nothing is computed from a formula, so a table made from ledgers is what
// actually crossed the wire. RAII scopes set the phase and the label:
//
//   {
//     PhaseScope phase(ledger, Phase::kBackward);
//     LabelScope label(ledger, "layer3");     // nested scopes join: "layer3.mlp"
//     RETURN_IF_ERROR(dp.AllReduce(grads, ReduceOp::kAvg));
//   }
//
// One ledger per rank, shared by that rank's communicators, used from the rank's thread.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "core/runtime/byte_stream.h"
#include "core/runtime/copyable_mutex.h"
#include "core/runtime/timeline.h"
#include "core/runtime/comm/nodes.h"
#include "core/runtime/comm/types.h"

namespace tally::comm {

// Where a transfer or call is booked.
struct LedgerKey {
  std::string group;
  Primitive primitive = Primitive::kSendRecv;
  Algorithm algorithm = Algorithm::kRing;
  Phase phase = Phase::kOther;
  std::string label;

  // The call as the timeline names it: "group primitive phase label".
  std::string RowName() const;

  auto Tie() const { return std::tie(group, primitive, algorithm, phase, label); }
  bool operator<(const LedgerKey& o) const { return Tie() < o.Tie(); }
  bool operator==(const LedgerKey& o) const { return Tie() == o.Tie(); }
};

// Bytes between this rank and one peer (a world rank) under one key.
struct TransferTotals {
  int64_t bytes_sent = 0;
  int64_t bytes_recv = 0;
  int64_t messages_sent = 0;
  int64_t messages_recv = 0;
  // The sends those messages went in: a send's messages are its segments of at most
  // max_chunk_bytes, posted together and following each other on the link, so that on a
  // modelled cluster a send costs one α (ModelledSeconds, and the replay's timeline).
  int64_t transfers_sent = 0;
  double seconds = 0;  // from post to completion, summed over messages (as the Wire
                       // stamps them: a run of posts shares one reading, and a message is
                       // done at the first reading after its wait; wire.h)
};

// One call, kept when the ledger traces (--trace): when it ran, and how many bytes the
// rank had sent in all when it ended.
struct CallEvent {
  LedgerKey key;
  int64_t start_nanos = 0, end_nanos = 0;  // MonotonicNanos
  int64_t payload_bytes = 0;
  int64_t sent_so_far = 0;
};

// Calls of one collective under one key.
struct CallTotals {
  int64_t calls = 0;
  int64_t payload_bytes = 0;  // the buffer size the caller passed (nccl-tests' "size")
  double seconds = 0;         // wall time inside the calls
  // The part of it the caller was held up: all of it for a blocking call, only the time in
  // Wait() for Isend/Irecv (whose transfer overlaps what the caller does meanwhile).
  double blocked_seconds = 0;
};

class TrafficLedger {
 public:
  explicit TrafficLedger(int world_rank = 0) : world_rank_(world_rank) {}

  int world_rank() const { return world_rank_; }
  Phase phase() const { return phase_; }
  const std::string& label() const { return label_; }

  // The totals of (key, peer), created empty on first use. The reference stays valid
  // until Clear(), so a call can look its rows up once and book every message into them.
  // Transfers and RecordCall may come from the rank's communication thread
  // (non-blocking collectives) as well as from the rank's own; a row is only ever
  // written by the thread that runs its call.
  TransferTotals& Transfers(const LedgerKey& key, int peer_world_rank) {
    std::lock_guard<std::mutex> lock(mu_.get());
    return transfers_[{key, peer_world_rank}];
  }
  // A call that ended at `ended_nanos` (MonotonicNanos; -1: now), having sent
  // `sent_bytes` (added to the running total of CallEvent::sent_so_far as it ends).
  void RecordCall(const LedgerKey& key, int64_t payload_bytes, double seconds,
                  double blocked_seconds, int64_t ended_nanos = -1, int64_t sent_bytes = 0);

  // What calls under `key` must send by a formula only their caller can evaluate (an
  // all-to-all-v's, from the counts it was given), added up per key; the report's exact
  // column for such rows.
  void AddExpected(const LedgerKey& key, int64_t bytes) {
    std::lock_guard<std::mutex> lock(mu_.get());
    expected_[key] += bytes;
  }
  const std::map<LedgerKey, int64_t>& expected() const { return expected_; }

  // Keep every call from now on (CallEvent).
  void set_tracing(bool on) { tracing_ = on; }
  const std::vector<CallEvent>& events() const { return events_; }

  const std::map<std::pair<LedgerKey, int>, TransferTotals>& transfers() const {
    return transfers_;
  }
  const std::map<LedgerKey, CallTotals>& calls() const { return calls_; }

  // Totals over every key that `match` accepts.
  template <typename Match>
  TransferTotals Sum(Match match) const {
    TransferTotals t;
    for (const auto& [key, v] : transfers_) {
      if (!match(key.first)) continue;
      t.bytes_sent += v.bytes_sent;
      t.bytes_recv += v.bytes_recv;
      t.messages_sent += v.messages_sent;
      t.messages_recv += v.messages_recv;
      t.transfers_sent += v.transfers_sent;
      t.seconds += v.seconds;
    }
    return t;
  }
  TransferTotals Total() const {
    return Sum([](const LedgerKey&) { return true; });
  }
  // The time the messages sent under each key would take on `cluster` (the α-β model,
  // nodes.h): each peer's sends (one α each) and bytes over the link to it.
  std::map<LedgerKey, LinkSeconds> ModelledSeconds(const Nodes& nodes,
                                                   const Cluster& cluster) const {
    std::map<LedgerKey, LinkSeconds> seconds;
    for (const auto& [key, v] : transfers_) {
      const Link link = nodes.LinkBetween(world_rank_, key.second);
      LinkSeconds& s = seconds[key.first];
      (link == Link::kIntra ? s.intra : s.inter) +=
          cluster.Of(link).Seconds(v.bytes_sent, v.transfers_sent);
    }
    return seconds;
  }
  // Bytes sent under the keys `match` accepts, by the link to each peer (nodes.h).
  template <typename Match>
  LinkBytes SentByLink(const Nodes& nodes, Match match) const {
    LinkBytes bytes;
    for (const auto& [key, v] : transfers_) {
      if (match(key.first)) bytes += nodes.Split(world_rank_, key.second, v.bytes_sent);
    }
    return bytes;
  }

  // The rank's timeline (timeline.h), recorded while it is on.
  tally::Timeline& timeline() { return timeline_; }
  const tally::Timeline& timeline() const { return timeline_; }

  // Forgets everything booked so far. Not while a call is in flight.
  void Clear();

  // The ledger's totals and events as bytes, and back (false: not a ledger's bytes).
  void Encode(ByteWriter& w) const;
  bool Decode(ByteReader& r);

 private:
  friend class PhaseScope;
  friend class LabelScope;

  CopyableMutex mu_;
  int world_rank_;
  Phase phase_ = Phase::kOther;
  std::string label_;
  std::map<std::pair<LedgerKey, int>, TransferTotals> transfers_;  // (key, peer) -> totals
  std::map<LedgerKey, CallTotals> calls_;
  std::map<LedgerKey, int64_t> expected_;
  bool tracing_ = false;
  int64_t sent_ = 0;
  std::vector<CallEvent> events_;
  tally::Timeline timeline_;
};

// Sets the ledger's phase for the scope's lifetime.
class PhaseScope {
 public:
  PhaseScope(TrafficLedger& ledger, Phase phase) : ledger_(ledger), saved_(ledger.phase_) {
    ledger.phase_ = phase;
  }
  ~PhaseScope() { ledger_.phase_ = saved_; }
  PhaseScope(const PhaseScope&) = delete;
  PhaseScope& operator=(const PhaseScope&) = delete;

 private:
  TrafficLedger& ledger_;
  Phase saved_;
};

// Appends ".part" to the ledger's label for the scope's lifetime.
class LabelScope {
 public:
  LabelScope(TrafficLedger& ledger, const std::string& part);
  ~LabelScope() { ledger_.label_.resize(saved_size_); }
  LabelScope(const LabelScope&) = delete;
  LabelScope& operator=(const LabelScope&) = delete;

 private:
  TrafficLedger& ledger_;
  size_t saved_size_;
};

// --- Reports over the ledgers of every rank (index = world rank) -----------------------

// One row per (group, primitive, algorithm, phase, label): calls, bytes sent and received
// per rank (min and max over the ranks that took part), messages, time.
std::string FormatTrafficTable(std::span<const TrafficLedger> ledgers);

// bytes[i][j]: bytes world rank i sent to world rank j.
std::vector<std::vector<int64_t>> PeerMatrix(std::span<const TrafficLedger> ledgers);
// With `nodes` (more than one), the node boundaries are marked.
std::string FormatPeerMatrix(const std::vector<std::vector<int64_t>>& bytes,
                             const Nodes* nodes = nullptr);

// {"ranks": [{"rank", "transfers": [{"group", "op", "algorithm", "phase", "scope", "peer",
//   "bytes_sent", "bytes_recv", "messages_sent", "messages_recv", "seconds"}],
//   "calls": [{"group", "op", "algorithm", "phase", "scope", "calls", "payload_bytes",
//   "seconds"}]}], "peer_matrix": [[...]]}
std::string TrafficJson(std::span<const TrafficLedger> ledgers);
absl::Status WriteTrafficJson(const std::string& path, std::span<const TrafficLedger> ledgers);

}  // namespace tally::comm
