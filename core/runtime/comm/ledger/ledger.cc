#include "core/runtime/comm/ledger/ledger.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/runtime/clock.h"
#include "core/runtime/json_writer.h"

namespace tally::comm {

std::string LedgerKey::RowName() const {
  return absl::StrCat(group, " ", Name(primitive), " ", Name(phase), label.empty() ? "" : " ",
                      label);
}

void TrafficLedger::RecordCall(const LedgerKey& key, int64_t payload_bytes, double seconds,
                               double blocked_seconds, int64_t ended_nanos,
                               int64_t sent_bytes) {
  std::lock_guard<std::mutex> lock(mu_.get());
  sent_ += sent_bytes;
  CallTotals& c = calls_[key];
  c.calls += 1;
  c.payload_bytes += payload_bytes;
  c.seconds += seconds;
  c.blocked_seconds += blocked_seconds;
  if (tracing_) {
    const int64_t end = ended_nanos >= 0 ? ended_nanos : MonotonicNanos();
    events_.push_back({key, end - int64_t(seconds * 1e9), end, payload_bytes, sent_});
  }
}

void TrafficLedger::Clear() {
  std::lock_guard<std::mutex> lock(mu_.get());
  transfers_.clear();
  calls_.clear();
  expected_.clear();
  events_.clear();
  timeline_.Clear();
}

namespace {

void EncodeKey(ByteWriter& w, const LedgerKey& key) {
  w.String(key.group).Int(int64_t(key.primitive)).Int(int64_t(key.algorithm));
  w.Int(int64_t(key.phase)).String(key.label);
}

LedgerKey DecodeKey(ByteReader& r) {
  LedgerKey key;
  key.group = r.String();
  key.primitive = Primitive(r.Int());
  key.algorithm = Algorithm(r.Int());
  key.phase = Phase(r.Int());
  key.label = r.String();
  return key;
}

}  // namespace

void TrafficLedger::Encode(ByteWriter& w) const {
  w.Int(world_rank_).Int(sent_).Int(int64_t(transfers_.size()));
  for (const auto& [key_peer, t] : transfers_) {
    EncodeKey(w, key_peer.first);
    w.Int(key_peer.second).Int(t.bytes_sent).Int(t.bytes_recv).Int(t.messages_sent);
    w.Int(t.messages_recv).Int(t.transfers_sent).Double(t.seconds);
  }
  w.Int(int64_t(calls_.size()));
  for (const auto& [key, c] : calls_) {
    EncodeKey(w, key);
    w.Int(c.calls).Int(c.payload_bytes).Double(c.seconds).Double(c.blocked_seconds);
  }
  w.Int(int64_t(expected_.size()));
  for (const auto& [key, bytes] : expected_) {
    EncodeKey(w, key);
    w.Int(bytes);
  }
  w.Int(int64_t(events_.size()));
  for (const CallEvent& e : events_) {
    EncodeKey(w, e.key);
    w.Int(e.start_nanos).Int(e.end_nanos).Int(e.payload_bytes).Int(e.sent_so_far);
  }
  timeline_.Encode(w);
}

bool TrafficLedger::Decode(ByteReader& r) {
  Clear();
  world_rank_ = int(r.Int());
  sent_ = r.Int();
  for (int64_t i = 0, n = r.Int(); r.ok() && i < n; ++i) {
    LedgerKey key = DecodeKey(r);
    const int peer = int(r.Int());
    TransferTotals& t = transfers_[{key, peer}];
    t.bytes_sent = r.Int();
    t.bytes_recv = r.Int();
    t.messages_sent = r.Int();
    t.messages_recv = r.Int();
    t.transfers_sent = r.Int();
    t.seconds = r.Double();
  }
  for (int64_t i = 0, n = r.Int(); r.ok() && i < n; ++i) {
    CallTotals& c = calls_[DecodeKey(r)];
    c.calls = r.Int();
    c.payload_bytes = r.Int();
    c.seconds = r.Double();
    c.blocked_seconds = r.Double();
  }
  for (int64_t i = 0, n = r.Int(); r.ok() && i < n; ++i) {
    const LedgerKey key = DecodeKey(r);
    expected_[key] = r.Int();
  }
  for (int64_t i = 0, n = r.Int(); r.ok() && i < n; ++i) {
    CallEvent e;
    e.key = DecodeKey(r);
    e.start_nanos = r.Int();
    e.end_nanos = r.Int();
    e.payload_bytes = r.Int();
    e.sent_so_far = r.Int();
    events_.push_back(std::move(e));
  }
  return timeline_.Decode(r) && r.ok();
}

LabelScope::LabelScope(TrafficLedger& ledger, const std::string& part)
    : ledger_(ledger), saved_size_(ledger.label_.size()) {
  if (!ledger.label_.empty()) ledger.label_ += '.';
  ledger.label_ += part;
}

namespace {

// Per key, what each rank did under it.
struct RowAcrossRanks {
  int ranks = 0;
  int64_t calls = 0;
  int64_t messages = 0;
  int64_t sent_min = std::numeric_limits<int64_t>::max(), sent_max = 0;
  int64_t recv_min = std::numeric_limits<int64_t>::max(), recv_max = 0;
  double seconds_max = 0;
};

std::map<LedgerKey, RowAcrossRanks> Rows(std::span<const TrafficLedger> ledgers) {
  std::map<LedgerKey, RowAcrossRanks> rows;
  for (const TrafficLedger& ledger : ledgers) {
    std::map<LedgerKey, TransferTotals> per_key;
    for (const auto& [key_peer, t] : ledger.transfers()) {
      TransferTotals& sum = per_key[key_peer.first];
      sum.bytes_sent += t.bytes_sent;
      sum.bytes_recv += t.bytes_recv;
      sum.messages_sent += t.messages_sent;
    }
    for (const auto& [key, c] : ledger.calls()) per_key.try_emplace(key);
    for (const auto& [key, t] : per_key) {
      RowAcrossRanks& row = rows[key];
      row.ranks += 1;
      auto call = ledger.calls().find(key);
      if (call != ledger.calls().end()) {
        row.calls = std::max(row.calls, call->second.calls);
        row.seconds_max = std::max(row.seconds_max, call->second.seconds);
      }
      row.messages += t.messages_sent;
      row.sent_min = std::min(row.sent_min, t.bytes_sent);
      row.sent_max = std::max(row.sent_max, t.bytes_sent);
      row.recv_min = std::min(row.recv_min, t.bytes_recv);
      row.recv_max = std::max(row.recv_max, t.bytes_recv);
    }
  }
  return rows;
}

std::string MinMax(int64_t lo, int64_t hi) {
  return lo == hi ? absl::StrCat(lo) : absl::StrCat(lo, "..", hi);
}

}  // namespace

std::string FormatTrafficTable(std::span<const TrafficLedger> ledgers) {
  std::string out = absl::StrFormat("%-8s %-15s %-6s %-10s %-14s %5s %6s %24s %24s %8s %10s\n",
                                    "group", "op", "algo", "phase", "scope", "ranks", "calls",
                                    "bytes sent/rank", "bytes recv/rank", "msgs", "time (ms)");
  for (const auto& [key, row] : Rows(ledgers)) {
    out += absl::StrFormat("%-8s %-15s %-6s %-10s %-14s %5d %6d %24s %24s %8d %10.3f\n",
                           key.group, Name(key.primitive), Name(key.algorithm), Name(key.phase),
                           key.label.empty() ? "-" : key.label, row.ranks, row.calls,
                           MinMax(row.sent_min, row.sent_max), MinMax(row.recv_min, row.recv_max),
                           row.messages, row.seconds_max * 1e3);
  }
  return out;
}

std::vector<std::vector<int64_t>> PeerMatrix(std::span<const TrafficLedger> ledgers) {
  size_t n = ledgers.size();
  std::vector<std::vector<int64_t>> bytes(n, std::vector<int64_t>(n, 0));
  for (const TrafficLedger& ledger : ledgers) {
    for (const auto& [key_peer, t] : ledger.transfers()) {
      int peer = key_peer.second;
      if (peer >= 0 && size_t(peer) < n) bytes[ledger.world_rank()][peer] += t.bytes_sent;
    }
  }
  return bytes;
}

std::string FormatPeerMatrix(const std::vector<std::vector<int64_t>>& bytes, const Nodes* nodes) {
  // A node boundary between ranks j - 1 and j: a bar between the columns, a rule between
  // the rows.
  const bool marked = nodes != nullptr && nodes->count() > 1 && nodes->world() == int(bytes.size());
  auto boundary = [&](size_t j) { return marked && j > 0 && nodes->node(int(j)) != nodes->node(int(j) - 1); };
  std::string out = "bytes sent from rank (row) to rank (column)";
  if (marked) out += absl::StrFormat("; | and --- mark node boundaries (%s)", nodes->Describe());
  out += "\n      ";
  for (size_t j = 0; j < bytes.size(); ++j) {
    out += absl::StrFormat("%s %12d", boundary(j) ? " |" : "", j);
  }
  out += '\n';
  for (size_t i = 0; i < bytes.size(); ++i) {
    if (boundary(i)) {
      out += std::string(6 + 13 * bytes.size() + 2 * (nodes->count() - 1), '-') + '\n';
    }
    out += absl::StrFormat("%5d ", i);
    for (size_t j = 0; j < bytes[i].size(); ++j) {
      out += absl::StrFormat("%s %12d", boundary(j) ? " |" : "", bytes[i][j]);
    }
    out += '\n';
  }
  return out;
}

namespace {

void WriteKey(JsonWriter& w, const LedgerKey& key) {
  w.Key("group").String(key.group);
  w.Key("op").String(Name(key.primitive));
  w.Key("algorithm").String(Name(key.algorithm));
  w.Key("phase").String(Name(key.phase));
  w.Key("scope").String(key.label);
}

}  // namespace

std::string TrafficJson(std::span<const TrafficLedger> ledgers) {
  JsonWriter w;
  w.BeginObject().Key("ranks").BeginArray();
  for (const TrafficLedger& ledger : ledgers) {
    w.BeginObject().Key("rank").Int(ledger.world_rank());
    w.Key("transfers").BeginArray();
    for (const auto& [key_peer, t] : ledger.transfers()) {
      w.BeginObject();
      WriteKey(w, key_peer.first);
      w.Key("peer").Int(key_peer.second);
      w.Key("bytes_sent").Int(t.bytes_sent).Key("bytes_recv").Int(t.bytes_recv);
      w.Key("messages_sent").Int(t.messages_sent).Key("messages_recv").Int(t.messages_recv);
      w.Key("seconds").Double(t.seconds);
      w.EndObject();
    }
    w.EndArray().Key("calls").BeginArray();
    for (const auto& [key, c] : ledger.calls()) {
      w.BeginObject();
      WriteKey(w, key);
      w.Key("calls").Int(c.calls).Key("payload_bytes").Int(c.payload_bytes);
      w.Key("seconds").Double(c.seconds).Key("blocked_seconds").Double(c.blocked_seconds);
      w.EndObject();
    }
    w.EndArray().EndObject();
  }
  w.EndArray().Key("peer_matrix").BeginArray();
  for (const auto& row : PeerMatrix(ledgers)) w.IntArray(row);
  w.EndArray().EndObject();
  return w.str();
}

absl::Status WriteTrafficJson(const std::string& path, std::span<const TrafficLedger> ledgers) {
  return WriteTextFile(path, TrafficJson(ledgers) + "\n");
}

}  // namespace tally::comm
