#include "extensions/zero_pp/zero_pp.h"

#include <tuple>
#include <utility>

#include "core/runtime/comm/ledger/names.h"
#include "core/runtime/status_macros.h"
#include "core/train/extensions.h"
#include "extensions/zero_pp/names.h"
#include "extensions/zero_pp/quantize.h"

namespace tally::extensions {

absl::Status QwzGatherer::Gather(const PieceToGather& piece, std::vector<Posted>* posted) {
  QuantizedGather gather(*piece.group, block_, algorithm_);
  RETURN_IF_ERROR(gather.Post(piece.mine, piece.whole, /*blocking=*/posted == nullptr));
  if (posted != nullptr) {
    posted->push_back([gather = std::move(gather)]() mutable { return gather.Finish(); });
  }
  return absl::OkStatus();
}

ErrorSums QwzGatherer::ErrorOf(const Tensor& own) const {
  if (own.device().type != DeviceType::kCPU) return {};
  return QuantizationError(ConstTypedPtr(own.raw_data(), own.dtype()), own.numel(),
                                     block_);
}

HpzGatherer::HpzGatherer(std::unique_ptr<parallel::ParameterGatherer> across,
                         comm::Communicator& node, const model::ParameterLayout& layout,
                         Allocator& alloc, DType params, comm::Algorithm algorithm)
    : across_(std::move(across)),
      node_(&node),
      layout_(layout),
      secondary_(parallel::ZeroUnits(layout, 3), node.size(), node.rank()),
      alloc_(alloc),
      params_(params),
      in_node_(algorithm) {}

Tensor HpzGatherer::SecondaryOwn(size_t i) const {
  const parallel::Sharding::Piece& p = secondary_.pieces()[i];
  return secondary_params_.Flat(p.packed, p.packed + p.own.count);
}

absl::Status HpzGatherer::Gather(const PieceToGather& piece, std::vector<Posted>* posted) {
  if (piece.group->ledger().phase() != comm::Phase::kBackward) return across_->Gather(piece, posted);
  PieceToGather in_node = piece;  // the secondary copy, inside the node
  in_node.group = node_;
  in_node.mine = SecondaryOwn(piece.index);
  return in_node_.Gather(in_node, posted);
}

absl::Status HpzGatherer::Gathered(int unit, const Tensor& whole, size_t first, size_t second) {
  if (!secondary_params_.defined()) {
    ASSIGN_OR_RETURN(secondary_params_, Tensor::Empty({secondary_.size()}, params_, alloc_,
                                                      MemoryCategory::kParams));
  }
  const model::ParamUnit& u = layout_.units()[unit];
  for (size_t i = first; i < second; ++i) {
    const comm::Chunk& own = secondary_.pieces()[i].own;
    RETURN_IF_ERROR(SecondaryOwn(i).CopyFrom(whole.Flat(own.offset - u.begin, own.end() - u.begin)));
  }
  return absl::OkStatus();
}

absl::Status QgzReducer::ReduceScatter(comm::Communicator& group, const Tensor& grads,
                                       const Tensor& reduced) {
  QgzConfig how = how_;
  if (&group != dp_) how.across = nullptr;  // the experts' pieces: one hop
  return QuantizedReduceScatter(group, how, grads, reduced, &error_);
}

absl::StatusOr<Posted> QgzReducer::IReduceScatter(comm::Communicator&, const Tensor&,
                                                  const Tensor&) {
  return absl::UnimplementedError("[zero] qgZ's all-to-alls are blocking");
}

namespace {

// qgZ's all-to-alls for one reduce-scatter of `count` values (qgz.h), `calls` times: the
// bytes and the scales, in one hop over the shape's group or in two.
void AddQgzCalls(int64_t count, int calls, const parallel::ZeroShape& s,
                 const ZeroPlusPlusShape& v, comm::ExpectedCalls& out) {
  const QgzPart part =
      QgzPartOf(count, s.ranks, v.grad_quant_block, v.grad_quant_bits);
  struct Hop {
    const char* group;
    int ranks, rank;
    const std::vector<int>& nodes;
    int64_t parts;  // quantised parts a rank sends in all
  };
  std::vector<Hop> hops;
  if (v.qgz_across.ranks > 1) {
    hops.push_back({comm::group::kDpShard, v.qgz_node.ranks, v.qgz_node.rank, v.qgz_node.nodes,
                    int64_t(s.ranks)});
    hops.push_back({comm::group::kDpReplicate, v.qgz_across.ranks, v.qgz_across.rank,
                    v.qgz_across.nodes, int64_t(v.qgz_across.ranks)});
  } else {
    hops.push_back({s.group, s.ranks, s.rank, s.nodes, int64_t(s.ranks)});
  }
  for (const Hop& hop : hops) {
    for (auto [scope, per_part, element] :
         {std::tuple{extensions::scope::kQgz, part.bytes, int64_t{1}},
          std::tuple{extensions::scope::kQgzScales, part.scales, int64_t{4}}}) {
      out.push_back({.group = hop.group,
                     .primitive = comm::Primitive::kAllToAll,
                     .phase = comm::Phase::kBackward,
                     .scope = scope,
                     .count = hop.parts * per_part,
                     .element = element,
                     .calls = calls,
                     .ranks = hop.ranks,
                     .rank = hop.rank,
                     .nodes = hop.nodes});
    }
  }
}

}  // namespace

comm::ExpectedCalls ZeroPlusPlusCalls(std::span<const comm::Chunk> units,
                                      const parallel::ZeroShape& s, const ZeroPlusPlusShape& v) {
  comm::ExpectedCalls out;
  for (comm::ExpectedCall c : parallel::ZeroCalls(units, s)) {
    const bool gather = c.primitive == comm::Primitive::kAllGather;
    if (gather && c.phase == comm::Phase::kBackward && v.hpz.has_value()) {  // inside the node
      c.group = comm::group::kDpShard;
      c.ranks = v.hpz->ranks;
      c.rank = v.hpz->rank;
      c.nodes = v.hpz->nodes;
      out.push_back(c);
    } else if (gather && v.quant_block > 0) {  // qwZ: the values, then the scales
      comm::ExpectedCall scales = c;
      c.scope = extensions::scope::kQwz;
      c.element = 1;
      scales.scope = extensions::scope::kQwzScales;
      scales.count = s.ranks * ScalesPerRank(c.count, s.ranks, v.quant_block);
      scales.element = 4;
      out.push_back(c);
      out.push_back(scales);
    } else if (c.primitive == comm::Primitive::kReduceScatter && v.grad_quant_block > 0) {  // qgZ
      AddQgzCalls(c.count, c.calls, s, v, out);
    } else {
      out.push_back(c);
    }
  }
  return out;
}

namespace {

// --zero_hpz, --zero_quantized_weights, --zero_quantized_gradients (core/train/options.h).
class ZeroPlusPlus : public train::Extension {
 public:
  absl::Status Fill(const train::TrainOptions& options, const train::SeamGroups& groups,
                    train::Seams& seams) const override {
    const train::ParallelOptions& p = options.parallel;
    const comm::Algorithm algorithm = p.allreduce;
    if (p.Qwz() || p.Hpz()) {
      const bool qwz = p.Qwz(), hpz = p.Hpz();
      const int64_t block = p.zero_quant_block;
      comm::Communicator* node = groups.dp_shard.get();
      seams.zero_gatherer = [=](const model::ParameterLayout& layout, Allocator& alloc,
                                DType params)
          -> absl::StatusOr<std::unique_ptr<parallel::ParameterGatherer>> {
        std::unique_ptr<parallel::ParameterGatherer> across;
        if (qwz) {
          across = std::make_unique<QwzGatherer>(block, algorithm);
        } else {
          across = std::make_unique<parallel::PlainGatherer>(algorithm);
        }
        if (!hpz) return across;
        return std::make_unique<HpzGatherer>(std::move(across), *node, layout, alloc, params,
                                             algorithm);
      };
    }
    if (p.Qgz()) {
      // In two hops when the dp group spans nodes (HSDP's shard group is on one).
      const bool by_node = p.ShardsByNode();
      comm::Communicator& dp = by_node ? *groups.dp_shard : *groups.dp;
      seams.zero_reducer = std::make_shared<QgzReducer>(
          dp, QgzConfig{.block = p.zero_quant_block,
                                  .bits = p.zero_quant_grad_bits,
                                  .node = groups.dp_shard.get(),
                                  .across = by_node ? nullptr : groups.dp_replicate.get(),
                                  .algorithm = algorithm});
    }
    return absl::OkStatus();
  }
};

}  // namespace

TALLY_REGISTER_EXTENSION(zero_pp, 10, ZeroPlusPlus);

}  // namespace tally::extensions
