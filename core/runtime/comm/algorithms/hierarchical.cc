#include "core/runtime/comm/algorithms/hierarchical.h"

#include <map>

#include "core/runtime/comm/algorithms/buffer_math.h"
#include "core/runtime/status_macros.h"

namespace tally::comm::hierarchical {
namespace {

int Mod(int i, int n) { return ((i % n) + n) % n; }

int64_t CountOf(const Ranges& ranges) {
  int64_t n = 0;
  for (const Chunk& c : ranges) n += c.count;
  return n;
}

// The ranks with `rank`'s node, and those with its local index, as ring orders.
std::vector<int> LocalRing(const Layout& layout, int rank) {
  return layout.members[layout.node_index[rank]];
}
std::vector<int> CrossRing(const Layout& layout, int rank) {
  std::vector<int> ring;
  for (const std::vector<int>& node : layout.members) ring.push_back(node[layout.local_index[rank]]);
  return ring;
}

// The pieces the reduce-scatter and all-gather pass around: the chunk of each group rank
// (ChunkOf over the group), grouped by local index for the local ring and by node for
// the cross ring.
std::vector<Ranges> ChunksByLocalIndex(const Layout& layout, int64_t count, int p) {
  std::vector<Ranges> pieces(layout.per_node());
  for (int l = 0; l < layout.per_node(); ++l) {
    for (int k = 0; k < layout.nodes(); ++k) pieces[l].push_back(ChunkOf(count, p, layout.members[k][l]));
  }
  return pieces;
}
std::vector<Ranges> ChunksByNode(const Layout& layout, int rank, int64_t count, int p) {
  std::vector<Ranges> pieces;
  for (int g : CrossRing(layout, rank)) pieces.push_back({ChunkOf(count, p, g)});
  return pieces;
}

// One pass on this rank: at step s a reduce-scatter sends piece me-s-1 and receive-reduces
// piece me-s-2; an all-gather sends piece me-s and receives piece me-s-1 (ring.h's steps,
// with pieces of several ranges). Empty ranges are not sent.
absl::Status Run(Wire& wire, const Pass& pass, void* data) {
  const int n = int(pass.ring.size()), i = pass.me;
  const int right = pass.ring[Mod(i + 1, n)], left = pass.ring[Mod(i - 1, n)];
  for (int s = 0; s < n - 1; ++s) {
    const Ranges& send = pass.pieces[Mod(pass.reduce ? i - s - 1 : i - s, n)];
    const Ranges& recv = pass.pieces[Mod(pass.reduce ? i - s - 2 : i - s - 1, n)];
    Requests step;
    for (const Chunk& c : send) {
      if (c.count > 0) wire.Send(right, At(data, c.offset, wire), Bytes(c.count, wire), step, SendMode::kExchange);
    }
    for (const Chunk& c : recv) {
      if (c.count <= 0) continue;
      if (pass.reduce) {
        wire.RecvReduce(left, At(data, c.offset, wire), Bytes(c.count, wire), step);
      } else {
        wire.Recv(left, At(data, c.offset, wire), Bytes(c.count, wire), step);
      }
    }
    RETURN_IF_ERROR(step.WaitAll());
  }
  return absl::OkStatus();
}

}  // namespace

std::optional<Layout> LayoutOf(std::span<const int> nodes) {
  Layout layout;
  std::map<int, int> index;  // node id -> its place in node order
  layout.node_index.resize(nodes.size());
  layout.local_index.resize(nodes.size());
  for (size_t g = 0; g < nodes.size(); ++g) {
    auto [it, added] = index.emplace(nodes[g], int(index.size()));
    if (added) layout.members.emplace_back();
    std::vector<int>& node = layout.members[it->second];
    layout.node_index[g] = it->second;
    layout.local_index[g] = int(node.size());
    node.push_back(int(g));
  }
  if (layout.members.size() < 2) return std::nullopt;
  for (const std::vector<int>& node : layout.members) {
    if (node.size() != layout.members.front().size()) return std::nullopt;
  }
  if (layout.per_node() < 2) return std::nullopt;
  return layout;
}

std::vector<Pass> Passes(Primitive primitive, const Layout& layout, int rank, int64_t count) {
  const int p = int(layout.node_index.size()), k = layout.node_index[rank],
            l = layout.local_index[rank];
  const std::vector<int> local = LocalRing(layout, rank), cross = CrossRing(layout, rank);
  switch (primitive) {
    case Primitive::kAllReduce: {
      const int g = layout.per_node(), nodes = layout.nodes();
      std::vector<Ranges> pieces(g);
      for (int j = 0; j < g; ++j) pieces[j] = {ChunkOf(count, g, j)};
      const Chunk own = ChunkOf(count, g, l);
      std::vector<Ranges> parts(nodes);
      for (int j = 0; j < nodes; ++j) {
        const Chunk c = ChunkOf(own.count, nodes, j);
        parts[j] = {Chunk{own.offset + c.offset, c.count}};
      }
      return {{true, local, l, pieces}, {true, cross, k, parts}, {false, cross, k, parts},
              {false, local, l, pieces}};
    }
    case Primitive::kReduceScatter:
      return {{true, local, l, ChunksByLocalIndex(layout, count, p)},
              {true, cross, k, ChunksByNode(layout, rank, count, p)}};
    case Primitive::kAllGather:
      return {{false, cross, k, ChunksByNode(layout, rank, count, p)},
              {false, local, l, ChunksByLocalIndex(layout, count, p)}};
    default:
      return {};
  }
}

std::vector<int64_t> SentTo(Primitive primitive, const Layout& layout, int rank, int64_t count,
                            size_t element_size) {
  std::vector<int64_t> to(layout.node_index.size(), 0);
  for (const Pass& pass : Passes(primitive, layout, rank, count)) {
    const int n = int(pass.ring.size());
    // A reduce-scatter sends every piece but its own; an all-gather every piece but its
    // right neighbour's.
    const int kept = pass.reduce ? pass.me : Mod(pass.me + 1, n);
    for (int j = 0; j < n; ++j) {
      if (j != kept) to[pass.ring[Mod(pass.me + 1, n)]] += CountOf(pass.pieces[j]) * int64_t(element_size);
    }
  }
  return to;
}

absl::Status AllReduce(Wire& wire, const Layout& layout, void* data, int64_t count) {
  const std::vector<Pass> passes = Passes(Primitive::kAllReduce, layout, wire.rank(), count);
  RETURN_IF_ERROR(Run(wire, passes[0], data));
  RETURN_IF_ERROR(Run(wire, passes[1], data));
  for (const Chunk& c : passes[1].pieces[passes[1].me]) {
    RETURN_IF_ERROR(FinishAverageOf(wire, At(data, c.offset, wire), c.count));
  }
  RETURN_IF_ERROR(Run(wire, passes[2], data));
  return Run(wire, passes[3], data);
}

absl::Status ReduceScatter(Wire& wire, const Layout& layout, const void* input, void* output,
                           int64_t count) {
  // In place on a copy of the input, which the caller keeps.
  ASSIGN_OR_RETURN(void* work, wire.Scratch(count));
  RETURN_IF_ERROR(CopyElements(work, input, count, wire));
  for (const Pass& pass : Passes(Primitive::kReduceScatter, layout, wire.rank(), count)) {
    RETURN_IF_ERROR(Run(wire, pass, work));
  }
  const Chunk own = ChunkOf(count, wire.size(), wire.rank());
  RETURN_IF_ERROR(CopyElements(output, At(work, own.offset, wire), own.count, wire));
  return FinishAverageOf(wire, output, own.count);
}

absl::Status AllGather(Wire& wire, const Layout& layout, const void* input, void* output,
                       int64_t count) {
  const Chunk own = ChunkOf(count, wire.size(), wire.rank());
  RETURN_IF_ERROR(CopyElements(At(output, own.offset, wire), input, own.count, wire));
  for (const Pass& pass : Passes(Primitive::kAllGather, layout, wire.rank(), count)) {
    RETURN_IF_ERROR(Run(wire, pass, output));
  }
  return absl::OkStatus();
}

}  // namespace tally::comm::hierarchical
