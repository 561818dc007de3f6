// How `count` elements are split into `parts` chunks: the first count % parts chunks get
// one element more. Ring collectives, scatter/gather and (later) ZeRO shards all use this
// one rule, so "rank r's shard" means the same range everywhere.
//
//   ChunkOf(10, 4, 0) == {0, 3}, ChunkOf(10, 4, 1) == {3, 3}, ChunkOf(10, 4, 3) == {8, 2}
#pragma once

#include <cstdint>

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

}  // namespace tally::comm
