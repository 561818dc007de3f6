// How `count` elements are split into `parts` chunks: the first count % parts chunks get
// one element more. Ring collectives, scatter/gather and (later) ZeRO shards all use this
// one rule, so "rank r's shard" means the same range everywhere.
//
//   ChunkOf(10, 4, 0) == {0, 3}, ChunkOf(10, 4, 1) == {3, 3}, ChunkOf(10, 4, 3) == {8, 2}
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace tally::comm {

struct Chunk {
  int64_t offset = 0;  // first element
  int64_t count = 0;   // elements
  int64_t end() const { return offset + count; }
};

inline Chunk ChunkOf(int64_t count, int parts, int index) {
  int64_t base = count / parts, extra = count % parts;
  int64_t offset = index * base + (index < extra ? index : extra);
  return Chunk{offset, base + (index < extra ? 1 : 0)};
}

// Where each of `counts` consecutive runs starts: {0, c0, c0 + c1, ...} (counts.size()
// entries). An all-to-all-v's blocks, packed in rank order.
inline std::vector<int64_t> Offsets(std::span<const int64_t> counts) {
  std::vector<int64_t> offsets(counts.size(), 0);
  for (size_t i = 1; i < counts.size(); ++i) offsets[i] = offsets[i - 1] + counts[i - 1];
  return offsets;
}

// The uneven counts an all-to-all-v of nominal `count` elements over `parts` ranks moves
// in the collective checks and tally_bench: rank `from` sends rank `to`
// ⌊count/parts⌋·((from + 2·to) mod 3) / 2 elements (integer division) — none, half a
// chunk or a whole chunk, so every rank sends and receives unequal blocks, zeros
// included.
inline int64_t SkewedCount(int64_t count, int parts, int from, int to) {
  return count / parts * ((from + 2 * to) % 3) / 2;
}

}  // namespace tally::comm
