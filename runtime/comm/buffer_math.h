// Byte-address helpers shared by the algorithm files.
#pragma once

#include <cstdint>
#include <cstring>

#include "runtime/comm/partition.h"
#include "runtime/comm/wire.h"

namespace tally::comm {

// Element `index` of a buffer of the wire's dtype.
inline char* At(void* base, int64_t index, const Wire& wire) {
  return static_cast<char*>(base) + size_t(index) * wire.element_size();
}
inline const char* At(const void* base, int64_t index, const Wire& wire) {
  return static_cast<const char*>(base) + size_t(index) * wire.element_size();
}
inline size_t Bytes(int64_t count, const Wire& wire) { return size_t(count) * wire.element_size(); }

// Copies `count` elements unless source and destination are the same buffer.
inline void CopyElements(void* dst, const void* src, int64_t count, const Wire& wire) {
  if (dst != src && count > 0) std::memcpy(dst, src, Bytes(count, wire));
}

}  // namespace tally::comm
