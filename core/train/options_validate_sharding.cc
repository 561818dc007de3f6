// The data-parallel sharding and compression flags checked against the rest of the
// options (TrainOptions::Validate calls these): HSDP's nodes, ZeRO-3's resharding, ZeRO++'s
// hpZ, qwZ and qgZ, PowerSGD and 1-bit Adam. Messages as options_validate.cc's: one line
// naming the flag.
#include "absl/strings/str_cat.h"
#include "core/model/checkpoint.h"
#include "core/parallel/powersgd.h"
#include "core/parallel/topology.h"
#include "core/runtime/status_macros.h"
#include "core/train/options.h"
#include "core/train/options_validate.h"

namespace tally::train {

absl::Status TrainOptions::ValidateZeroShard() const {
  const ParallelOptions& p = parallel;
  if (!p.zero3_reshard_after_forward) {
    if (p.zero != 3) {
      return Bad("--zero3_reshard_after_forward=false keeps ZeRO-3's gathered parameters: it "
                 "needs --zero=3, got --zero=", p.zero);
    }
    if (p.pp > 1) {
      return Bad("--zero3_reshard_after_forward=false runs with --pp=1 only so far (a pipeline "
                 "interleaves micro-batches' forwards and backwards)");
    }
  }
  if (p.zero_hpz) {
    if (p.zero != 3) return Bad("--zero_hpz keeps ZeRO-3's secondary copy: it needs --zero=3");
    if (p.zero_shard == parallel::ZeroShard::kNode) {
      return Bad("--zero_hpz with --zero_shard=node: HSDP's gathers are inside the node already");
    }
    if (!p.zero3_reshard_after_forward) {
      return Bad("--zero_hpz with --zero3_reshard_after_forward=false: the backward gathers "
                 "nothing to keep inside the node");
    }
  }
  if (p.zero_quant_block < 1) {
    return Bad("--zero_quant_block must be at least 1 value a block, got ", p.zero_quant_block);
  }
  if (p.zero_quantized_weights) {
    if (p.zero != 3) {
      return Bad("--zero_quantized_weights quantises ZeRO-3's parameter gathers: it needs --zero=3");
    }
    if (placement.device != DeviceType::kCPU) {
      return Bad("--zero_quantized_weights with --device=cuda is not built yet (its quantiser "
                 "runs on the host)");
    }
  }
  if (p.zero_quant_grad_bits != 8 && p.zero_quant_grad_bits != 4) {
    return Bad("--zero_quant_grad_bits must be 8 or 4, got ", p.zero_quant_grad_bits);
  }
  if (p.zero_quantized_gradients) {
    if (p.zero != 3) {
      return Bad("--zero_quantized_gradients quantises ZeRO-3's gradient reduce-scatters: it "
                 "needs --zero=3");
    }
    if (placement.device != DeviceType::kCPU) {
      return Bad("--zero_quantized_gradients with --device=cuda is not built yet (its "
                 "quantiser runs on the host)");
    }
    if (p.ep > 1) {
      return Bad("--zero_quantized_gradients with --ep=", p.ep, " is not supported yet");
    }
  }
  // qgZ's two hops need the dp group cut by nodes as HSDP's is.
  const bool qgz_hops = p.Qgz() && placement.gpus_per_node > 0;
  if (p.zero_shard != parallel::ZeroShard::kNode && !p.Hpz() && !qgz_hops) {
    return absl::OkStatus();
  }
  const char* flag = p.ShardsByNode() ? "--zero_shard=node"
                     : p.Hpz()        ? "--zero_hpz"
                                      : "--zero_quantized_gradients";
  if (p.zero == 0) return Bad("--zero_shard=node shards ZeRO's state: give --zero=1, 2 or 3");
  if (placement.gpus_per_node == 0) {
    return Bad(flag, " needs --gpus_per_node (which ranks share a node)");
  }
  if (p.ep > 1) {
    return Bad(flag, " with --ep=", p.ep,
               " is not supported yet (the experts' edp group is sharded on its own)");
  }
  // Every dp group (the one of each rank with dp and cp index 0) tiles its nodes alike.
  const parallel::Topology grid = topology();
  const std::shared_ptr<const comm::Nodes> nodes = PlacedNodes();
  for (int r = 0; r < world(); ++r) {
    if (grid.DpGroupRank(grid.Of(r)) == 0) {
      RETURN_IF_ERROR(grid.ShardByNode(r, *nodes, flag).status());
    }
  }
  return absl::OkStatus();
}

absl::Status TrainOptions::ValidateGradCompression() const {
  const ParallelOptions& p = parallel;
  if (p.grad_compression == parallel::GradCompression::kNone) return absl::OkStatus();
  const std::string flag = absl::StrCat("--grad_compression=", parallel::Name(p.grad_compression));
  if (p.PowerSgd()) {
    if (p.powersgd_rank < 1) return Bad("--powersgd_rank must be at least 1, got ", p.powersgd_rank);
    if (p.powersgd_warmup_steps < 0) {
      return Bad("--powersgd_warmup_steps must be 0 or more, got ", p.powersgd_warmup_steps);
    }
  } else if (p.onebit_warmup_steps < 1) {
    return Bad("--onebit_warmup_steps must be at least 1 (the warm-up estimates the variance "
               "1-bit Adam then freezes), got ", p.onebit_warmup_steps);
  }
  if (p.zero > 0) {
    return Bad(flag, " compresses data parallelism's all-reduce: it needs --zero=0 (ZeRO's "
               "reduce-scatter is not compressed)");
  }
  if (p.OneBitAdam() && training.optimizer != OptimizerKind::kAdamW) {
    return Bad(flag, " needs --optimizer=adamw, got --optimizer=", Name(training.optimizer));
  }
  if (topology().DpGroupSize() < 2) {
    return Bad(flag, " needs more than one dp rank (there is no sum to compress)");
  }
  for (auto [unsupported, what] :
       {std::pair{p.ep > 1, "--ep"},
        {precision.dtype == DType::kBF16 || precision.grad_comm_dtype == DType::kBF16,
         "bf16 (--precision, --grad_comm_dtype)"},
        {placement.device != DeviceType::kCPU, "--device=cuda"}}) {
    if (unsupported) return Bad(flag, " with ", what, " is not supported yet");
  }
  if (!checkpoint.save.empty() && world() > model::kMostCompressedRanks) {
    return Bad(flag, " with --save: a checkpoint holds the error buffers of at most ",
               model::kMostCompressedRanks, " ranks, and this grid has ", world());
  }
  if (p.PowerSgd() && parallel::SplitForPowerSgd(RankLayout(0), p.powersgd_rank).matrices.empty()) {
    return Bad("--powersgd_rank=", p.powersgd_rank,
               " compresses no tensor of this model: an m x n gradient is compressed only when "
               "(m + n) x r < m x n");
  }
  return absl::OkStatus();
}

}  // namespace tally::train
