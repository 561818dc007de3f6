#include "core/runtime/comm/ledger/wire.h"

#include <algorithm>

#include "core/runtime/comm/ledger/exact_traffic.h"

namespace tally::comm {

Wire::Wire(Transport& transport, TrafficLedger& ledger, Allocator& allocator, Tensor* scratch,
           const OpSignature& signature, size_t max_chunk_bytes, int64_t started_nanos)
    : transport_(transport),
      ledger_(ledger),
      allocator_(allocator),
      scratch_(scratch),
      signature_(signature),
      max_chunk_bytes_(max_chunk_bytes),
      key_{transport.name(), signature.primitive, signature.algorithm, ledger.phase(),
           ledger.label()},
      recording_(ledger.timeline().recording()),
      started_nanos_(started_nanos) {}

Wire::SegmentList Wire::Segments(size_t bytes) const {
  size_t element = element_size();
  size_t piece = std::max(element, max_chunk_bytes_ / element * element);
  SegmentList segments;
  size_t offset = 0;
  do {
    size_t n = std::min(piece, bytes - offset);
    segments.push_back({offset, n});
    offset += n;
  } while (offset < bytes);
  return segments;
}

int Wire::PeerWorldRank(int peer) const {
  return peer >= 0 && peer < size() ? transport_.world_rank(peer) : -1;  // -1: the transport refuses it
}

TransferTotals& Wire::Row(int peer_world) {
  for (auto& [peer, row] : rows_) {
    if (peer == peer_world) return *row;
  }
  TransferTotals* row = &ledger_.Transfers(key_, peer_world);
  rows_.push_back({peer_world, row});
  return *row;
}

Wire::SegmentList Wire::Posted(const SegmentList& segments, size_t bytes) const {
  if (!signature_.meta()) return segments;
  return {{0, bytes}};
}

void Wire::Send(int peer, const void* data, size_t bytes, Requests& pending, SendMode mode) {
  TransferTotals& row = Row(PeerWorldRank(peer));
  const SegmentList segments = Segments(bytes);
  for (Segment s : segments) {
    row.bytes_sent += int64_t(s.bytes);
    row.messages_sent += 1;
    sent_bytes_ += int64_t(s.bytes);
  }
  row.transfers_sent += segments.empty() ? 0 : 1;
  if (recording_) {  // the replay's record of the call (timeline.h)
    const int peer_world = PeerWorldRank(peer);
    if (sent_.empty() || sent_.back().peer != peer_world) sent_.push_back({peer_world, 0, 0});
    sent_.back().bytes += int64_t(bytes);
    sent_.back().messages += segments.empty() ? 0 : 1;  // one send, however many segments
  }
  for (Segment s : Posted(segments, bytes)) {
    pending.entries_.push_back(
        {transport_.Isend(peer, static_cast<const char*>(data) + s.offset, s.bytes, signature_,
                          mode),
         this, &row, PostedNanos(), false, absl::OkStatus()});
  }
}

void Wire::PostRecv(int peer, void* data, size_t bytes, bool reduce, Requests& pending) {
  TransferTotals& row = Row(PeerWorldRank(peer));
  std::optional<Reduction> reduction;
  if (reduce) reduction = Reduction{signature_.op, signature_.dtype};
  const SegmentList segments = Segments(bytes);
  for (Segment s : segments) {
    row.bytes_recv += int64_t(s.bytes);
    row.messages_recv += 1;
  }
  for (Segment s : Posted(segments, bytes)) {
    pending.entries_.push_back({transport_.Irecv(peer, static_cast<char*>(data) + s.offset,
                                                 s.bytes, signature_, reduction),
                                this, &row, PostedNanos(), false, absl::OkStatus()});
  }
}

void Wire::BookModelled() {
  if (size() < 2) return;
  const RankTraffic t = ExactTraffic(signature_.primitive, Algorithm::kRing, size(), rank(),
                                     signature_.root, signature_.count, element_size());
  TransferTotals& to = Row(PeerWorldRank(right()));
  to.bytes_sent += t.sent;
  to.messages_sent += t.sent > 0 ? 1 : 0;
  to.transfers_sent += t.sent > 0 ? 1 : 0;
  sent_bytes_ += t.sent;
  TransferTotals& from = Row(PeerWorldRank(left()));
  from.bytes_recv += t.recv;
  from.messages_recv += t.recv > 0 ? 1 : 0;
}

void Wire::Recv(int peer, void* data, size_t bytes, Requests& pending) {
  PostRecv(peer, data, bytes, /*reduce=*/false, pending);
}

void Wire::RecvReduce(int peer, void* data, size_t bytes, Requests& pending) {
  PostRecv(peer, data, bytes, /*reduce=*/true, pending);
}

int64_t Wire::PostedNanos() {
  if (posted_nanos_ < 0) posted_nanos_ = StampCompleted();
  return posted_nanos_;
}

void Wire::Completed(TransferTotals* row, int64_t posted_nanos) {
  posted_nanos_ = -1;
  completed_.push_back({row, posted_nanos});
}

int64_t Wire::StampCompleted(int64_t now) {
  if (now < 0) now = MonotonicNanos();
  for (auto [row, posted] : completed_) row->seconds += double(now - posted) / 1e9;
  completed_.clear();
  return now;
}

void Wire::RecordCall(int64_t payload_bytes, int64_t blocked_nanos) {
  RecordCall(payload_bytes, blocked_nanos, StampCompleted());
}

void Wire::RecordCall(int64_t payload_bytes, int64_t blocked_nanos, int64_t ended_nanos) {
  const double seconds = double(ended_nanos - started_nanos_) / 1e9;
  const double blocked = double(std::max<int64_t>(0, ended_nanos - blocked_nanos)) / 1e9;
  ledger_.RecordCall(key_, payload_bytes, seconds, blocked, ended_nanos, sent_bytes_);
  sent_bytes_ = 0;
}

absl::StatusOr<void*> Wire::Scratch(int64_t count) {
  size_t bytes = size_t(count) * element_size();
  const Device device = signature_.meta()        ? Device::Meta()
                        : signature_.device >= 0 ? Device{DeviceType::kCUDA, signature_.device}
                                                 : Device::CPU();
  if (scratch_->nbytes() < bytes || scratch_->device() != device) {
    *scratch_ = Tensor();  // give the old buffer back before taking the larger one
    // Kept as 8-byte words, which hold any dtype's elements at any alignment they need.
    Allocator on(allocator_.ledger(), device);
    ASSIGN_OR_RETURN(*scratch_, Tensor::Empty({int64_t((bytes + 7) / 8)}, DType::kF64, on,
                                              MemoryCategory::kComm));
  }
  return scratch_->raw_data();
}

void Requests::Fail(absl::Status status) {
  entries_.push_back({FailedRequest(std::move(status)), nullptr, nullptr, 0, false, {}});
}

absl::Status Requests::Wait(size_t i) {
  Entry& e = entries_[i];
  if (!e.waited) {
    e.status = e.request->Wait();
    e.waited = true;
    if (e.wire != nullptr) e.wire->Completed(e.row, e.posted_nanos);
  }
  return e.status;
}

absl::Status Requests::WaitAll() {
  absl::Status first;
  for (size_t i = 0; i < entries_.size(); ++i) {
    absl::Status s = Wait(i);
    if (first.ok() && !s.ok()) first = s;
  }
  return first;
}

}  // namespace tally::comm
