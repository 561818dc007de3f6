// Counter-based random numbers: value = f(seed, stream, index).
//
// Any element of any random tensor can be computed on its own, so a rank that holds rows
// [a, b) of a sharded weight generates exactly those values of the serial tensor:
//
//   uint64_t stream = StreamOf("h.3.mlp.c_fc.weight");
//   FillNormal(shard, /*seed=*/1337, stream, /*first_index=*/a * cols, 0.0f, 0.02f);
//
// The generator is Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as
// 1, 2, 3", SC'11): a 10-round bijection of a 128-bit counter under a 64-bit key. The key
// is the seed; the counter is (index, stream). Each element uses its own counter, so the
// values do not depend on how a tensor is split, nor on the order elements are drawn.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace tally {

// The 128 random bits of Philox4x32-10 for one (seed, stream, index).
std::array<uint32_t, 4> Philox(uint64_t seed, uint64_t stream, uint64_t index);

// FNV-1a, 64 bits (offset basis 0xcbf29ce484222325, prime 0x100000001b3), of `bytes`.
uint64_t Fnv1a64(std::string_view bytes);
// A stable 64-bit stream id for a name (its Fnv1a64), e.g. a parameter name.
inline uint64_t StreamOf(std::string_view name) { return Fnv1a64(name); }

// Uniform in [0, 1), with 24 random bits (every value is an exact float).
float Uniform(uint64_t seed, uint64_t stream, uint64_t index);
// Standard normal N(0, 1) by the Box-Muller transform, computed in double.
float Normal(uint64_t seed, uint64_t stream, uint64_t index);

// out[i] = mean + std * Normal(seed, stream, first_index + i) for i in [0, count).
void FillNormal(float* out, int64_t count, uint64_t seed, uint64_t stream, uint64_t first_index,
                float mean, float std);
// out[i] = low + (high - low) * Uniform(seed, stream, first_index + i).
void FillUniform(float* out, int64_t count, uint64_t seed, uint64_t stream, uint64_t first_index,
                 float low, float high);

}  // namespace tally
