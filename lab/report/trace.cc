#include "lab/report/trace.h"

#include <algorithm>
#include <limits>
#include <map>

#include "absl/strings/str_cat.h"
#include "core/runtime/comm/ledger/names.h"
#include "core/runtime/json_writer.h"

namespace tally::report {
namespace {

constexpr int kComputeTrack = 1, kCommTrack = 2;

}  // namespace

// Long, and kept whole: one pass over the ranks writes the Trace Event file in order
// (names, spans, calls, counters, then the pipeline's flow arrows).
std::string TraceJson(const train::TrainOptions& o, const std::vector<comm::TrafficLedger>& ledgers,
                      const std::vector<std::vector<train::Trainer::Span>>& spans) {
  int64_t zero = std::numeric_limits<int64_t>::max();
  for (const comm::TrafficLedger& l : ledgers) {
    for (const comm::CallEvent& e : l.events()) zero = std::min(zero, e.start_nanos);
  }
  for (const auto& rank : spans) {
    for (const train::Trainer::Span& s : rank) zero = std::min(zero, s.start_nanos);
  }
  auto us = [&](int64_t nanos) { return double(nanos - zero) / 1e3; };

  JsonWriter w;
  w.BeginObject().Key("displayTimeUnit").String("ms").Key("traceEvents").BeginArray();
  auto metadata = [&](const char* name, int pid, int tid, const std::string& value) {
    w.BeginObject().Key("name").String(name).Key("ph").String("M").Key("pid").Int(pid);
    w.Key("tid").Int(tid).Key("args").BeginObject().Key("name").String(value).EndObject().EndObject();
  };
  // Pipeline transfers, by (sending rank, receiving rank, scope): the sender's events and
  // the receiver's, paired in order for the flow arrows.
  struct Ends {
    std::vector<const comm::CallEvent*> sends, recvs;
  };
  std::map<std::tuple<int, int, std::string>, Ends> flows;
  for (int r = 0; r < int(ledgers.size()); ++r) {
    metadata("process_name", r, 0,
             absl::StrCat("rank ", r, " (dp ", o.topology().Of(r).dp, ", pp ", o.topology().Of(r).pp,
                          ", tp ", o.topology().Of(r).tp, ")"));
    metadata("thread_name", r, kComputeTrack, "compute");
    metadata("thread_name", r, kCommTrack, "communication");
    for (const train::Trainer::Span& s : spans[r]) {
      w.BeginObject().Key("name").String(s.name).Key("ph").String("X").Key("pid").Int(r);
      w.Key("tid").Int(kComputeTrack).Key("ts").Double(us(s.start_nanos));
      w.Key("dur").Double(double(s.end_nanos - s.start_nanos) / 1e3).EndObject();
    }
    for (const comm::CallEvent& e : ledgers[r].events()) {
      const comm::LedgerKey& k = e.key;
      w.BeginObject().Key("name").String(absl::StrCat(k.group, " ", comm::Name(k.primitive)));
      w.Key("ph").String("X").Key("pid").Int(r).Key("tid").Int(kCommTrack);
      w.Key("ts").Double(us(e.start_nanos)).Key("dur").Double(double(e.end_nanos - e.start_nanos) / 1e3);
      w.Key("args").BeginObject().Key("group").String(k.group).Key("op").String(comm::Name(k.primitive));
      w.Key("algorithm").String(comm::Name(k.algorithm)).Key("phase").String(comm::Name(k.phase));
      w.Key("scope").String(k.label).Key("payload_bytes").Int(e.payload_bytes).EndObject().EndObject();
      w.BeginObject().Key("name").String("bytes sent").Key("ph").String("C").Key("pid").Int(r);
      w.Key("ts").Double(us(e.end_nanos)).Key("args").BeginObject().Key("bytes").Int(e.sent_so_far);
      w.EndObject().EndObject();
      // Stage `from` sends to stage `to` of the same (dp, tp) replica (in training and in
      // evaluation).
      const auto boundary = parallel::ParseBoundaryScope(k.label);
      if (k.group == comm::group::kPp && k.primitive == comm::Primitive::kSendRecv &&
          boundary.has_value()) {
        const auto [from, to] = *boundary;
        const parallel::Topology grid = o.topology();
        const parallel::GridCoordinates at = grid.Of(int(r));
        // Virtual stage vs is held by pipeline rank vs mod pp (interleaved; vs otherwise).
        const int sender = grid.RankAt({at.dp, at.tp, from % o.parallel.pp});
        const int receiver = grid.RankAt({at.dp, at.tp, to % o.parallel.pp});
        Ends& ends = flows[{sender, receiver, absl::StrCat(k.label, comm::Name(k.phase))}];
        (r == sender ? ends.sends : ends.recvs).push_back(&e);
      }
    }
  }
  int64_t id = 0;
  for (const auto& [route, ends] : flows) {
    const auto& [sender, receiver, scope] = route;
    for (size_t i = 0; i < std::min(ends.sends.size(), ends.recvs.size()); ++i, ++id) {
      w.BeginObject().Key("name").String("activation").Key("cat").String("pipeline");
      w.Key("ph").String("s").Key("id").Int(id).Key("pid").Int(sender).Key("tid").Int(kCommTrack);
      w.Key("ts").Double(us(ends.sends[i]->start_nanos)).EndObject();
      w.BeginObject().Key("name").String("activation").Key("cat").String("pipeline");
      w.Key("ph").String("f").Key("bp").String("e").Key("id").Int(id).Key("pid").Int(receiver);
      w.Key("tid").Int(kCommTrack).Key("ts").Double(us(ends.recvs[i]->end_nanos)).EndObject();
    }
  }
  w.EndArray().EndObject();
  return w.str();
}

std::string PredictedTraceJson(const train::TrainOptions& o,
                               const std::vector<ReplayedRank>& ranks) {
  JsonWriter w;
  w.BeginObject().Key("displayTimeUnit").String("ms").Key("traceEvents").BeginArray();
  for (int r = 0; r < int(ranks.size()); ++r) {
    const parallel::GridCoordinates at = o.topology().Of(r);
    for (auto [tid, name] :
         {std::pair{0, absl::StrCat("rank ", r, " (dp ", at.dp, ", pp ", at.pp, ", tp ", at.tp,
                                    ") on ", o.cluster.name, ", predicted")},
          {kComputeTrack, std::string("compute")},
          {kCommTrack, std::string("communication")}}) {
      w.BeginObject().Key("name").String(tid == 0 ? "process_name" : "thread_name");
      w.Key("ph").String("M").Key("pid").Int(r).Key("tid").Int(tid);
      w.Key("args").BeginObject().Key("name").String(name).EndObject().EndObject();
    }
    for (const ReplaySpan& s : ranks[size_t(r)].spans) {
      if (s.end <= s.start) continue;
      w.BeginObject().Key("name").String(s.name).Key("ph").String("X").Key("pid").Int(r);
      w.Key("tid").Int(s.compute ? kComputeTrack : kCommTrack).Key("ts").Double(s.start * 1e6);
      w.Key("dur").Double((s.end - s.start) * 1e6).EndObject();
    }
  }
  w.EndArray().EndObject();
  return w.str();
}

}  // namespace tally::report
