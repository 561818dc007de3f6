#include "core/runtime/comm/ledger/exact_traffic.h"

#include <algorithm>

#include "core/runtime/comm/algorithms/hierarchical.h"
#include "core/runtime/comm/algorithms/partition.h"
#include "core/runtime/comm/algorithms/recursive_doubling.h"

namespace tally::comm {
namespace {

// Bytes of the chunk of `rank` (taken around the ring) and of the whole buffer.
struct Sizes {
  int p;
  int64_t count;
  int64_t e;
  int64_t Chunk(int rank) const { return ChunkOf(count, p, ((rank % p) + p) % p).count * e; }
  int64_t Whole() const { return count * e; }
  // Σ chunk(root + j) for distances j in [first, p).
  int64_t ChunksFrom(int root, int first) const {
    int64_t sum = 0;
    for (int j = first; j < p; ++j) sum += Chunk(root + j);
    return sum;
  }
};

RankTraffic Ring(Primitive primitive, const Sizes& s, int r, int root) {
  int p = s.p;
  int64_t M = s.Whole();
  int d = ((r - root) % p + p) % p;  // distance from the root along the ring
  switch (primitive) {
    case Primitive::kReduceScatter: return {M - s.Chunk(r), M - s.Chunk(r - 1)};
    case Primitive::kAllGather: return {M - s.Chunk(r + 1), M - s.Chunk(r)};
    case Primitive::kAllReduce:
      return {(M - s.Chunk(r)) + (M - s.Chunk(r + 1)), (M - s.Chunk(r - 1)) + (M - s.Chunk(r))};
    case Primitive::kBroadcast: return {d < p - 1 ? M : 0, d > 0 ? M : 0};
    case Primitive::kReduce: return {d > 0 ? M : 0, d < p - 1 ? M : 0};
    case Primitive::kScatter: return {s.ChunksFrom(root, d + 1), d > 0 ? s.ChunksFrom(root, d) : 0};
    case Primitive::kGather: return {d > 0 ? s.ChunksFrom(root, d) : 0, s.ChunksFrom(root, d + 1)};
    default: return {};
  }
}

RankTraffic Naive(Primitive primitive, const Sizes& s, int r, int root) {
  int p = s.p;
  int64_t M = s.Whole();
  bool is_root = r == root, is_hub = r == 0;
  switch (primitive) {
    case Primitive::kBroadcast: return is_root ? RankTraffic{(p - 1) * M, 0} : RankTraffic{0, M};
    case Primitive::kReduce: return is_root ? RankTraffic{0, (p - 1) * M} : RankTraffic{M, 0};
    case Primitive::kAllReduce:
      return is_hub ? RankTraffic{(p - 1) * M, (p - 1) * M} : RankTraffic{M, M};
    case Primitive::kScatter:
      return is_root ? RankTraffic{M - s.Chunk(root), 0} : RankTraffic{0, s.Chunk(r)};
    case Primitive::kGather:
      return is_root ? RankTraffic{0, M - s.Chunk(root)} : RankTraffic{s.Chunk(r), 0};
    case Primitive::kAllGather:  // gather to rank 0, then broadcast from it
      return is_hub ? RankTraffic{(p - 1) * M, M - s.Chunk(0)} : RankTraffic{s.Chunk(r), M};
    case Primitive::kReduceScatter:  // reduce to rank 0, then scatter from it
      return is_hub ? RankTraffic{M - s.Chunk(0), (p - 1) * M} : RankTraffic{M, s.Chunk(r)};
    default: return {};
  }
}

}  // namespace

Algorithm EffectiveAlgorithm(Primitive primitive, Algorithm algorithm, std::span<const int> nodes,
                             int64_t bytes, int64_t small_allreduce_bytes) {
  if (algorithm == Algorithm::kHierarchical) {
    const bool two_level = primitive == Primitive::kAllReduce ||
                           primitive == Primitive::kReduceScatter ||
                           primitive == Primitive::kAllGather;
    if (two_level && hierarchical::LayoutOf(nodes)) return algorithm;
    algorithm = Algorithm::kRing;
  }
  if (primitive != Primitive::kAllReduce) {
    return algorithm == Algorithm::kRecursiveDoubling ? Algorithm::kRing : algorithm;
  }
  const bool small = small_allreduce_bytes > 0 && bytes >= 0 && bytes <= small_allreduce_bytes;
  return algorithm == Algorithm::kRing && small ? Algorithm::kRecursiveDoubling : algorithm;
}

RankTraffic ExactTraffic(Primitive primitive, Algorithm algorithm, int group_size, int rank,
                         int root, int64_t count, size_t element_size, std::span<const int> nodes) {
  if (int(nodes.size()) == group_size &&
      EffectiveAlgorithm(primitive, algorithm, nodes) == Algorithm::kHierarchical) {
    const hierarchical::Layout layout = *hierarchical::LayoutOf(nodes);
    RankTraffic t;
    for (int q = 0; q < group_size; ++q) {
      const std::vector<int64_t> to = hierarchical::SentTo(primitive, layout, q, count, element_size);
      if (q == rank) {
        for (int64_t b : to) t.sent += b;
      }
      t.recv += to[rank];
    }
    return t;
  }
  Sizes s{group_size, count, int64_t(element_size)};
  if (group_size <= 1 || primitive == Primitive::kBarrier) return {};
  if (EffectiveAlgorithm(primitive, algorithm, nodes) == Algorithm::kRecursiveDoubling) {
    RankTraffic t;
    for (const recursive_doubling::Step& step : recursive_doubling::Schedule(group_size, rank)) {
      if (step.sends()) t.sent += s.Whole();
      if (step.receives()) t.recv += s.Whole();
    }
    return t;
  }
  if (primitive == Primitive::kSendRecv) return {s.Whole(), s.Whole()};
  if (primitive == Primitive::kAllToAll) {  // both algorithms: every peer's chunk once
    return {s.Whole() - s.Chunk(rank), (group_size - 1) * s.Chunk(rank)};
  }
  if (primitive == Primitive::kAllToAllV) {  // the skewed counts (partition.h)
    std::vector<int64_t> send(static_cast<size_t>(group_size), 0), recv = send;
    for (int j = 0; j < group_size; ++j) {
      send[size_t(j)] = SkewedCount(count, group_size, rank, j);
      recv[size_t(j)] = SkewedCount(count, group_size, j, rank);
    }
    return AllToAllVTraffic(send, recv, rank, element_size);
  }
  // kNative: the transport's own algorithm is unknown; it is counted as the ring.
  return algorithm == Algorithm::kNaive ? Naive(primitive, s, rank, root)
                                        : Ring(primitive, s, rank, root);
}

std::vector<int64_t> ExactSentTo(Primitive primitive, Algorithm algorithm, int group_size,
                                 int rank, int root, int64_t count, size_t element_size,
                                 std::span<const int> nodes) {
  if (int(nodes.size()) == group_size &&
      EffectiveAlgorithm(primitive, algorithm, nodes) == Algorithm::kHierarchical) {
    return hierarchical::SentTo(primitive, *hierarchical::LayoutOf(nodes), rank, count,
                                element_size);
  }
  algorithm = algorithm == Algorithm::kHierarchical ? Algorithm::kRing
                                                    : EffectiveAlgorithm(primitive, algorithm, {});
  const int p = group_size;
  std::vector<int64_t> to(std::max(p, 0), 0);
  const RankTraffic total =
      ExactTraffic(primitive, algorithm, group_size, rank, root, count, element_size);
  if (p <= 1 || total.sent == 0) return to;
  const Sizes s{p, count, int64_t(element_size)};
  if (algorithm == Algorithm::kRecursiveDoubling) {
    for (const recursive_doubling::Step& step : recursive_doubling::Schedule(p, rank)) {
      if (step.sends()) to[step.peer] += s.Whole();
    }
    return to;
  }
  const int right = (rank + 1) % p, left = (rank + p - 1) % p;
  if (primitive == Primitive::kAllToAll) {
    for (int j = 0; j < p; ++j) to[j] = j == rank ? 0 : s.Chunk(j);
    return to;
  }
  if (primitive == Primitive::kAllToAllV) {
    for (int j = 0; j < p; ++j) to[j] = j == rank ? 0 : SkewedCount(count, p, rank, j) * s.e;
    return to;
  }
  if (primitive == Primitive::kSendRecv) {
    to[right] = total.sent;
    return to;
  }
  if (algorithm != Algorithm::kNaive) {  // the ring (and what is modelled as it)
    const bool leftward = primitive == Primitive::kReduce || primitive == Primitive::kGather;
    to[leftward ? left : right] = total.sent;
    return to;
  }
  // The star: a centre (the root, or the hub 0 of the all- collectives) and the others.
  const bool rooted = primitive == Primitive::kBroadcast || primitive == Primitive::kReduce ||
                      primitive == Primitive::kScatter || primitive == Primitive::kGather;
  const int centre = rooted ? root : 0;
  if (rank != centre) {
    to[centre] = total.sent;
    return to;
  }
  for (int j = 0; j < p; ++j) {
    if (j == centre) continue;
    const bool chunks = primitive == Primitive::kScatter || primitive == Primitive::kReduceScatter;
    to[j] = chunks ? s.Chunk(j) : s.Whole();
  }
  return to;
}

LinkBytes ExactSentByLink(Primitive primitive, Algorithm algorithm, std::span<const int> nodes,
                          int rank, int root, int64_t count, size_t element_size) {
  const std::vector<int64_t> to =
      ExactSentTo(primitive, algorithm, int(nodes.size()), rank, root, count, element_size, nodes);
  LinkBytes bytes;
  for (size_t j = 0; j < to.size(); ++j) {
    (nodes[j] == nodes[rank] ? bytes.intra : bytes.inter) += to[j];
  }
  return bytes;
}

RankTraffic AllToAllVTraffic(std::span<const int64_t> send_counts,
                             std::span<const int64_t> recv_counts, int rank,
                             size_t element_size) {
  RankTraffic t;
  for (size_t j = 0; j < send_counts.size(); ++j) {
    if (int(j) == rank) continue;
    t.sent += send_counts[j] * int64_t(element_size);
    t.recv += recv_counts[j] * int64_t(element_size);
  }
  return t;
}

double BusFactor(Primitive primitive, int ranks) {
  const double n = ranks;
  switch (primitive) {
    case Primitive::kAllReduce:
      return 2 * (n - 1) / n;
    case Primitive::kAllGather:
    case Primitive::kReduceScatter:
    case Primitive::kAllToAll:
    case Primitive::kAllToAllV:
    case Primitive::kGather:
    case Primitive::kScatter:
      return (n - 1) / n;
    default:
      return 1;
  }
}

}  // namespace tally::comm
