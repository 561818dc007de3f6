#include "core/parallel/zero/sharding.h"

#include <algorithm>
#include <tuple>

#include "core/runtime/comm/ledger/exact_traffic.h"
#include "core/runtime/comm/ledger/names.h"

namespace tally::parallel {

Sharding::Sharding(const std::vector<ZeroUnit>& units, Cut dense, Cut experts) {
  for (const ZeroUnit& unit : units) {
    const Cut cut = unit.experts ? experts : dense;
    comm::Chunk own = comm::ChunkOf(unit.range.count, cut.ranks, cut.rank);
    own.offset += unit.range.offset;
    pieces_.push_back({unit.range, own, size_, unit.experts});
    size_ += own.count;
  }
}

namespace {

// `range` as one unit, or with `expert_parallel` as its runs of experts' tensors and of
// the others, in buffer order.
std::vector<ZeroUnit> UnitsOf(const model::ParameterLayout& layout, comm::Chunk range,
                              bool expert_parallel) {
  if (!expert_parallel) return {{range, false}};
  std::vector<ZeroUnit> runs;
  for (const model::ParamSpec& spec : layout.specs()) {
    const int64_t begin = std::max(spec.offset, range.offset);
    const int64_t end = std::min(spec.offset + spec.numel, range.end());
    if (begin >= end) continue;
    if (!runs.empty() && runs.back().experts == spec.expert) {
      runs.back().range.count = end - runs.back().range.offset;
    } else {
      runs.push_back({{begin, end - begin}, spec.expert});
    }
  }
  return runs;
}

// ZeRO-2/3's units, listed by the model's unit they belong to: each model unit whole,
// except that a first pipeline stage cuts its embeddings into wte and wpe. wte is then a
// unit on the first and on the last stage alike, so the two copies' shards line up
// element for element and the embedding group can sum them shard by shard. With
// `expert_parallel` a layer's unit is its dense run and its experts' run.
std::vector<std::vector<ZeroUnit>> PartsOfModelUnits(const model::ParameterLayout& layout,
                                                     bool expert_parallel) {
  std::vector<std::vector<ZeroUnit>> parts;
  for (const model::ParamUnit& u : layout.units()) {
    parts.push_back(UnitsOf(layout, {u.begin, u.count()}, expert_parallel));
  }
  if (layout.first_stage() && !layout.last_stage()) {
    const int64_t wte = layout.specs()[0].numel;
    const model::ParamUnit& embeddings = layout.units()[model::ParameterLayout::kEmbeddings];
    parts[model::ParameterLayout::kEmbeddings] = {
        {{embeddings.begin, wte}}, {{embeddings.begin + wte, embeddings.count() - wte}}};
  }
  return parts;
}

}  // namespace

std::vector<ZeroUnit> ZeroUnits(const model::ParameterLayout& layout, int zero_stage,
                                bool expert_parallel) {
  if (zero_stage <= 1) return UnitsOf(layout, {0, layout.total()}, expert_parallel);
  std::vector<ZeroUnit> units;
  for (const std::vector<ZeroUnit>& parts : PartsOfModelUnits(layout, expert_parallel)) {
    units.insert(units.end(), parts.begin(), parts.end());
  }
  return units;
}

std::vector<comm::Chunk> UnitRanges(const std::vector<ZeroUnit>& units, bool experts) {
  std::vector<comm::Chunk> ranges;
  for (const ZeroUnit& unit : units) {
    if (unit.experts == experts) ranges.push_back(unit.range);
  }
  return ranges;
}

int ZeroCallsPerStep(int zero_stage, int micro_batches, comm::Primitive primitive, comm::Phase phase,
                     bool recompute, bool reshard) {
  using comm::Phase;
  if (zero_stage < 1) return 0;
  if (primitive == comm::Primitive::kReduceScatter && phase == Phase::kBackward) {
    return zero_stage == 1 ? 1 : micro_batches;  // ZeRO-1 once after backward; else per backward
  }
  if (primitive == comm::Primitive::kAllGather) {
    if (phase == Phase::kOptimizer && zero_stage <= 2) return 1;
    if (phase == Phase::kForward && zero_stage == 3) return micro_batches;
    // Backward gathers each unit once more for the recomputed forward.
    if (phase == Phase::kBackward && zero_stage == 3) {
      return reshard ? micro_batches * (recompute ? 2 : 1) : 0;
    }
  }
  return 0;
}

int64_t ZeroBytesPerStep(std::span<const comm::Chunk> units, int zero_stage, int ranks, int rank,
                         int micro_batches, comm::Algorithm algorithm, comm::Primitive primitive,
                         comm::Phase phase, bool recompute, int64_t element,
                         std::span<const int> nodes) {
  comm::ExpectedCalls calls =
      ZeroCalls(units, {.ranks = ranks,
                        .rank = rank,
                        .nodes = std::vector<int>(nodes.begin(), nodes.end()),
                        .zero_stage = zero_stage,
                        .micro_batches = micro_batches,
                        .recompute = recompute,
                        .grad_element = element,
                        .param_element = element});
  std::erase_if(calls, [&](const comm::ExpectedCall& c) {
    return c.primitive != primitive || c.phase != phase;
  });
  return comm::TotalSent(calls, algorithm);
}

comm::ExpectedCalls ZeroCalls(std::span<const comm::Chunk> units, const ZeroShape& s) {
  using comm::Phase;
  using comm::Primitive;
  comm::ExpectedCalls calls;
  for (auto [primitive, phase] : {std::pair{Primitive::kReduceScatter, Phase::kBackward},
                                  std::pair{Primitive::kAllGather, Phase::kOptimizer},
                                  std::pair{Primitive::kAllGather, Phase::kForward},
                                  std::pair{Primitive::kAllGather, Phase::kBackward}}) {
    const int per_unit =
        ZeroCallsPerStep(s.zero_stage, s.micro_batches, primitive, phase, s.recompute, s.reshard);
    if (per_unit == 0) continue;
    for (const comm::Chunk& unit : units) {
      calls.push_back(
          {.group = s.group,
           .primitive = primitive,
           .phase = phase,
           .count = unit.count,
           .element = primitive == Primitive::kReduceScatter ? s.grad_element : s.param_element,
           .calls = per_unit,
           .ranks = s.ranks,
           .rank = s.rank,
           .nodes = s.nodes});
    }
  }
  return calls;
}

std::vector<std::pair<size_t, size_t>> PiecesOfUnits(const model::ParameterLayout& layout,
                                                     int zero_stage, bool expert_parallel) {
  std::vector<std::pair<size_t, size_t>> pieces;
  const size_t all = ZeroUnits(layout, zero_stage, expert_parallel).size();
  size_t piece = 0;
  for (const std::vector<ZeroUnit>& parts : PartsOfModelUnits(layout, expert_parallel)) {
    const size_t first = zero_stage >= 2 ? piece : 0;
    piece += parts.size();
    pieces.push_back({first, zero_stage >= 2 ? piece : all});
  }
  return pieces;
}

}  // namespace tally::parallel
