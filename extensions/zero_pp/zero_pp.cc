#include "extensions/zero_pp/zero_pp.h"

#include <utility>

#include "core/parallel/zero/quantize.h"
#include "core/runtime/status_macros.h"
#include "core/train/extensions.h"

namespace tally::extensions {

absl::Status QwzGatherer::Gather(const PieceToGather& piece, std::vector<Posted>* posted) {
  parallel::QuantizedGather gather(*piece.group, block_, algorithm_);
  RETURN_IF_ERROR(gather.Post(piece.mine, piece.whole, /*blocking=*/posted == nullptr));
  if (posted != nullptr) {
    posted->push_back([gather = std::move(gather)]() mutable { return gather.Finish(); });
  }
  return absl::OkStatus();
}

ErrorSums QwzGatherer::ErrorOf(const Tensor& own) const {
  if (own.device().type != DeviceType::kCPU) return {};
  return parallel::QuantizationError(ConstTypedPtr(own.raw_data(), own.dtype()), own.numel(),
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
  parallel::QgzConfig how = how_;
  if (&group != dp_) how.across = nullptr;  // the experts' pieces: one hop
  return parallel::QuantizedReduceScatter(group, how, grads, reduced, &error_);
}

absl::StatusOr<Posted> QgzReducer::IReduceScatter(comm::Communicator&, const Tensor&,
                                                  const Tensor&) {
  return absl::UnimplementedError("[zero] qgZ's all-to-alls are blocking");
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
          dp, parallel::QgzConfig{.block = p.zero_quant_block,
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
