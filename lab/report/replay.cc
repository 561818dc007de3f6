#include "lab/report/replay.h"

#include <algorithm>
#include <map>
#include <string>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/runtime/comm/ledger/names.h"

namespace tally::report {
namespace {

using Kind = TimelineEntry::Kind;

// A collective (blocking or posted) as its members reach it.
struct Call {
  int size = 0, arrived = 0;
  double last_arrival = 0, slowest = 0;  // the last member in, and the longest messages
  int last_rank = -1;                    // who came in last
  double end() const { return last_arrival + slowest; }
  bool complete() const { return arrived == size; }
  void Arrive(int rank, double at) {
    ++arrived;
    if (last_rank < 0 || at > last_arrival) last_arrival = at, last_rank = rank;
  }
};

// A point-to-point channel's messages in order: when each send and receive was posted, and
// each send's α-β time.
struct Channel {
  std::vector<std::pair<double, double>> sends;  // (posted, seconds)
  std::vector<double> recvs;                     // posted
};

// A timeline's group ("cp:0 1 2 3"): its name.
std::string GroupName(const std::string& group) { return group.substr(0, group.find(':')); }

// Books a wait from t0 to t1 on a call whose last peer, `peer`, arrived at `arrival`.
void BookWait(WaitedFor& waited, int peer, double arrival, double t0, double t1) {
  if (peer < 0) return;
  waited.Add(peer, std::min(std::max(arrival - t0, 0.0), std::max(t1 - t0, 0.0)));
}

// What a posted work is: a collective, or the index-th message of a channel.
struct Work {
  bool message = false, send = false;
  std::pair<std::string, int64_t> call;         // (group, seq)
  std::tuple<std::string, int, int> channel;    // (group, source, destination)
  size_t index = 0;
};

}  // namespace

void WaitedFor::Add(int peer, double s) {
  if (!(s > 0)) return;
  seconds += s;
  by_peer[peer] += s;
}

int WaitedFor::Most() const {
  int most = -1;
  double longest = 0;
  for (const auto& [peer, s] : by_peer) {
    if (s > longest) longest = s, most = peer;
  }
  return most;
}

absl::StatusOr<std::vector<ReplayedRank>> Replay(const std::vector<const Timeline*>& timelines,
                                                 const comm::Nodes& nodes,
                                                 const comm::Cluster& links,
                                                 const train::GpuModel& gpu) {
  const int ranks = int(timelines.size());
  // The α-β time of what rank r sent in a call.
  auto seconds = [&](int r, const std::vector<PeerBytes>& sent) {
    double s = 0;
    for (const PeerBytes& p : sent) {
      s += links.Of(nodes.LinkBetween(r, p.peer)).Seconds(p.bytes, p.messages);
    }
    return s;
  };
  // What each posted work sent, from its wait (works are numbered per rank).
  std::vector<std::map<int64_t, const std::vector<PeerBytes>*>> waited(static_cast<size_t>(ranks));
  for (int r = 0; r < ranks; ++r) {
    for (const TimelineEntry& e : timelines[size_t(r)]->entries()) {
      if (e.kind == Kind::kWait) waited[size_t(r)][e.work] = &e.sent;
    }
  }
  std::map<std::pair<std::string, int64_t>, Call> calls;
  std::map<std::tuple<std::string, int, int>, Channel> channels;
  std::vector<std::map<int64_t, Work>> works(static_cast<size_t>(ranks));
  std::vector<ReplayedRank> out(static_cast<size_t>(ranks));
  std::vector<size_t> next(static_cast<size_t>(ranks), 0);
  std::vector<bool> arrived(static_cast<size_t>(ranks), false);  // at its current blocking collective
  const std::vector<PeerBytes> none;
  auto sent_of = [&](int r, int64_t work) -> const std::vector<PeerBytes>& {
    const auto it = waited[size_t(r)].find(work);
    return it != waited[size_t(r)].end() ? *it->second : none;
  };
  auto wait_until = [&](ReplayedRank& rank, double end, bool idle, const std::string& what) {
    const double wait = std::max(0.0, end - rank.seconds);
    (idle ? rank.idle_s : rank.exposed_s) += wait;
    rank.spans.push_back({what, rank.seconds, rank.seconds + wait, false, idle});
    rank.seconds += wait;
  };
  // The name of a posted work, from its post.
  std::vector<std::map<int64_t, std::string>> names(static_cast<size_t>(ranks));
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < ranks; ++r) {
      const std::vector<TimelineEntry>& entries = timelines[size_t(r)]->entries();
      ReplayedRank& rank = out[size_t(r)];
      while (next[size_t(r)] < entries.size()) {
        const TimelineEntry& e = entries[next[size_t(r)]];
        if (e.kind == Kind::kCompute) {
          const double s = gpu.Seconds(e.compute) + e.seconds;
          rank.spans.push_back({"compute", rank.seconds, rank.seconds + s, true, false});
          rank.compute_s += s;
          rank.seconds += s;
        } else if (e.kind == Kind::kCollective) {
          Call& call = calls[{e.group, e.seq}];
          if (!arrived[size_t(r)]) {
            call.size = e.group_size;
            call.Arrive(r, rank.seconds);
            call.slowest = std::max(call.slowest, seconds(r, e.sent));
            arrived[size_t(r)] = true;
          }
          if (!call.complete()) break;
          BookWait(rank.waited, call.last_rank, call.last_arrival, rank.seconds, call.end());
          wait_until(rank, call.end(), false, e.what);
          arrived[size_t(r)] = false;
        } else if (e.kind == Kind::kPost && e.seq >= 0) {
          Call& call = calls[{e.group, e.seq}];
          call.size = e.group_size;
          call.Arrive(r, rank.seconds);
          call.slowest = std::max(call.slowest, seconds(r, sent_of(r, e.work)));
          works[size_t(r)][e.work] = {false, false, {e.group, e.seq}, {}, 0};
          names[size_t(r)][e.work] = e.what;
        } else if (e.kind == Kind::kPost) {
          const std::tuple<std::string, int, int> key{e.group, e.send ? r : e.peer,
                                                      e.send ? e.peer : r};
          Channel& channel = channels[key];
          Work work{true, e.send, {}, key, 0};
          if (e.send) {
            work.index = channel.sends.size();
            channel.sends.push_back({rank.seconds, seconds(r, sent_of(r, e.work))});
            rank.p2p_sent_s[GroupName(e.group)] += channel.sends.back().second;
          } else {
            work.index = channel.recvs.size();
            channel.recvs.push_back(rank.seconds);
          }
          works[size_t(r)][e.work] = work;
          names[size_t(r)][e.work] = e.what;
        } else {  // kWait
          const auto it = works[size_t(r)].find(e.work);
          if (it == works[size_t(r)].end()) {
            return absl::InternalError(absl::StrCat("[replay] rank ", r, " waits for work ", e.work,
                                                    ", never posted"));
          }
          const Work& work = it->second;
          if (!work.message) {
            const Call& call = calls[work.call];
            if (!call.complete()) break;
            BookWait(rank.waited, call.last_rank, call.last_arrival, rank.seconds, call.end());
            wait_until(rank, call.end(), false, names[size_t(r)][e.work]);
          } else {
            const Channel& channel = channels[work.channel];
            if (work.index >= channel.sends.size() || work.index >= channel.recvs.size()) break;
            const auto [sent, transfer] = channel.sends[work.index];
            const double end = std::max(sent, channel.recvs[work.index]) + transfer;
            if (work.send) {  // exposed: the receiver is the peer (idle receives are the bubble)
              BookWait(rank.waited, std::get<2>(work.channel), channel.recvs[work.index],
                       rank.seconds, end);
            }
            // A pipeline's receive waits for the neighbour stage (the bubble); context
            // parallelism's ring waits for the next block's K, V: communication exposed.
            const std::string group = GroupName(std::get<0>(work.channel));
            const bool ring = group == comm::group::kCp;
            if (work.send || ring) rank.p2p_exposed_s[group] += std::max(0.0, end - rank.seconds);
            wait_until(rank, end, !work.send && !ring, names[size_t(r)][e.work]);
          }
        }
        ++next[size_t(r)];
        progress = true;
      }
    }
  }
  for (int r = 0; r < ranks; ++r) {
    if (next[size_t(r)] < timelines[size_t(r)]->entries().size()) {
      return absl::InternalError(absl::StrCat("[replay] rank ", r, " cannot go past entry ",
                                              next[size_t(r)], " of its timeline"));
    }
  }
  return out;
}

std::vector<MeasuredWaits> MeasureWaits(const std::vector<const Timeline*>& timelines) {
  const int ranks = int(timelines.size());
  auto at = [](int64_t nanos) { return double(nanos) * 1e-9; };
  // Every call's arrivals, and every channel's posts, on this host's clock.
  std::map<std::pair<std::string, int64_t>, Call> calls;
  std::map<std::tuple<std::string, int, int>, Channel> channels;
  std::vector<std::map<int64_t, Work>> works(static_cast<size_t>(ranks));
  for (int r = 0; r < ranks; ++r) {
    for (const TimelineEntry& e : timelines[size_t(r)]->entries()) {
      if (e.kind == Kind::kCollective || (e.kind == Kind::kPost && e.seq >= 0)) {
        calls[{e.group, e.seq}].Arrive(r, at(e.begin_nanos));
        if (e.kind == Kind::kPost) works[size_t(r)][e.work] = {false, false, {e.group, e.seq}, {}, 0};
      } else if (e.kind == Kind::kPost) {
        const std::tuple<std::string, int, int> key{e.group, e.send ? r : e.peer,
                                                    e.send ? e.peer : r};
        Channel& channel = channels[key];
        Work work{true, e.send, {}, key, e.send ? channel.sends.size() : channel.recvs.size()};
        if (e.send) {
          channel.sends.push_back({at(e.begin_nanos), 0});
        } else {
          channel.recvs.push_back(at(e.begin_nanos));
        }
        works[size_t(r)][e.work] = work;
      }
    }
  }
  std::vector<MeasuredWaits> out(static_cast<size_t>(ranks));
  for (int r = 0; r < ranks; ++r) {
    MeasuredWaits& rank = out[size_t(r)];
    for (const TimelineEntry& e : timelines[size_t(r)]->entries()) {
      const double t0 = at(e.begin_nanos), t1 = at(e.end_nanos);
      if (e.kind == Kind::kCollective) {
        const Call& call = calls[{e.group, e.seq}];
        rank.exposed_s += t1 - t0;
        BookWait(rank.waited, call.last_rank, call.last_arrival, t0, t1);
      } else if (e.kind == Kind::kWait) {
        const auto it = works[size_t(r)].find(e.work);
        if (it == works[size_t(r)].end()) continue;
        const Work& work = it->second;
        if (!work.message) {
          const Call& call = calls[work.call];
          rank.exposed_s += t1 - t0;
          BookWait(rank.waited, call.last_rank, call.last_arrival, t0, t1);
        } else if (work.send) {  // a receive's wait is the bubble, not exposed
          const Channel& channel = channels[work.channel];
          rank.exposed_s += t1 - t0;
          if (work.index < channel.recvs.size()) {
            BookWait(rank.waited, std::get<2>(work.channel), channel.recvs[work.index], t0, t1);
          }
        }
      }
    }
  }
  return out;
}

}  // namespace tally::report
