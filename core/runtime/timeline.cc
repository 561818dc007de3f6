#include "core/runtime/timeline.h"

#include <utility>

namespace tally {
namespace {
thread_local Timeline* current = nullptr;
}  // namespace

Timeline* CurrentTimeline() { return current; }
ScopedTimeline::ScopedTimeline(Timeline* timeline) : saved_(current) { current = timeline; }
ScopedTimeline::~ScopedTimeline() { current = saved_; }

void ComputeWork::AddMatmuls(double flops_each, double bytes_each, int64_t calls) {
  if (calls <= 0) return;
  flops += flops_each * double(calls);
  for (MatmulCalls& m : matmuls) {
    if (m.flops == flops_each && m.bytes == bytes_each) {
      m.calls += calls;
      return;
    }
  }
  matmuls.push_back({flops_each, bytes_each, calls});
}

ComputeWork& ComputeWork::operator+=(const ComputeWork& o) {
  for (const MatmulCalls& m : o.matmuls) AddMatmuls(m.flops, m.bytes, m.calls);
  memory_bytes += o.memory_bytes;
  return *this;
}

ComputeWork ComputeWork::Times(double times) const {
  ComputeWork w;
  for (const MatmulCalls& m : matmuls) {
    w.matmuls.push_back({m.flops, m.bytes, int64_t(double(m.calls) * times)});
  }
  w.flops = flops * times;
  w.memory_bytes = memory_bytes * times;
  return w;
}

void Timeline::Compute(const ComputeWork& work) {
  if (!recording_ || work.empty()) return;
  if (entries_.empty() || entries_.back().kind != TimelineEntry::Kind::kCompute) {
    entries_.emplace_back();
  }
  entries_.back().compute += work;
}

void Timeline::ComputeSeconds(double seconds) {
  if (!recording_ || !(seconds > 0)) return;
  if (entries_.empty() || entries_.back().kind != TimelineEntry::Kind::kCompute) {
    entries_.emplace_back();
  }
  entries_.back().seconds += seconds;
}

namespace {
// An entry of a call on `group`: a collective, or a post.
TimelineEntry CallEntry(TimelineEntry::Kind kind, const std::string& group, int group_size,
                        int64_t seq, std::string what, int64_t begin_nanos, int64_t end_nanos) {
  TimelineEntry e;
  e.kind = kind;
  e.group = group;
  e.group_size = group_size;
  e.seq = seq;
  e.what = std::move(what);
  e.begin_nanos = begin_nanos;
  e.end_nanos = end_nanos;
  return e;
}
}  // namespace

void Timeline::Collective(const std::string& group, int group_size, int64_t seq,
                          std::string what, std::vector<PeerBytes> sent, int64_t begin_nanos,
                          int64_t end_nanos) {
  if (!recording_) return;
  entries_.push_back(CallEntry(TimelineEntry::Kind::kCollective, group, group_size, seq,
                               std::move(what), begin_nanos, end_nanos));
  entries_.back().sent = std::move(sent);
}

int64_t Timeline::PostCollective(const std::string& group, int group_size, int64_t seq,
                                 std::string what, int64_t nanos) {
  if (!recording_) return -1;
  entries_.push_back(CallEntry(TimelineEntry::Kind::kPost, group, group_size, seq,
                               std::move(what), nanos, nanos));
  return entries_.back().work = works_++;
}

int64_t Timeline::PostMessage(const std::string& group, int peer, bool send, int64_t bytes,
                              std::string what, int64_t nanos) {
  if (!recording_) return -1;
  entries_.push_back(
      CallEntry(TimelineEntry::Kind::kPost, group, 2, -1, std::move(what), nanos, nanos));
  TimelineEntry& e = entries_.back();
  e.peer = peer;
  e.send = send;
  e.bytes = bytes;
  return e.work = works_++;
}

void Timeline::Wait(int64_t work, std::vector<PeerBytes> sent, int64_t begin_nanos,
                    int64_t end_nanos) {
  if (!recording_ || work < 0) return;
  TimelineEntry e;
  e.kind = TimelineEntry::Kind::kWait;
  e.work = work;
  e.sent = std::move(sent);
  e.begin_nanos = begin_nanos;
  e.end_nanos = end_nanos;
  entries_.push_back(std::move(e));
}

void Timeline::Encode(ByteWriter& w) const {
  w.Int(int64_t(entries_.size()));
  for (const TimelineEntry& e : entries_) {
    w.Int(int64_t(e.kind)).Double(e.seconds).Int(e.begin_nanos).Int(e.end_nanos);
    w.Double(e.compute.flops).Double(e.compute.memory_bytes).Int(int64_t(e.compute.matmuls.size()));
    for (const MatmulCalls& m : e.compute.matmuls) w.Double(m.flops).Double(m.bytes).Int(m.calls);
    w.Int(e.work).String(e.group).Int(e.group_size);
    w.Int(e.seq).Int(e.peer).Int(e.send ? 1 : 0).Int(e.bytes).String(e.what);
    w.Int(int64_t(e.sent.size()));
    for (const PeerBytes& p : e.sent) w.Int(p.peer).Int(p.bytes).Int(p.messages);
  }
}

bool Timeline::Decode(ByteReader& r) {
  entries_.clear();
  for (int64_t i = 0, n = r.Int(); r.ok() && i < n; ++i) {
    TimelineEntry e;
    const int64_t kind = r.Int();
    if (kind < 0 || kind > int64_t(TimelineEntry::Kind::kWait)) return false;
    e.kind = TimelineEntry::Kind(kind);
    e.seconds = r.Double();
    e.begin_nanos = r.Int();
    e.end_nanos = r.Int();
    e.compute.flops = r.Double();
    e.compute.memory_bytes = r.Double();
    for (int64_t j = 0, m = r.Int(); r.ok() && j < m; ++j) {
      MatmulCalls calls;
      calls.flops = r.Double();
      calls.bytes = r.Double();
      calls.calls = r.Int();
      e.compute.matmuls.push_back(calls);
    }
    e.work = r.Int();
    e.group = r.String();
    e.group_size = int(r.Int());
    e.seq = r.Int();
    e.peer = int(r.Int());
    e.send = r.Int() != 0;
    e.bytes = r.Int();
    e.what = r.String();
    for (int64_t j = 0, m = r.Int(); r.ok() && j < m; ++j) {
      PeerBytes p;
      p.peer = int(r.Int());
      p.bytes = r.Int();
      p.messages = r.Int();
      e.sent.push_back(p);
    }
    entries_.push_back(std::move(e));
  }
  return r.ok();
}

}  // namespace tally
