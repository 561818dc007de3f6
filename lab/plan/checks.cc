// What tally_plan refuses (plan.h): a grid it cannot place, and flags that do not fit it,
// one line each.
#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/model/parameters.h"
#include "core/parallel/powersgd.h"
#include "lab/plan/plan.h"
#include "lab/plan/rows.h"
#include "core/runtime/comm/nodes.h"

namespace tally::plan {

namespace {

// The most GPUs a plan may have (dp x cp x tp x pp).
constexpr int64_t kMaxGpus = int64_t(1) << 20;

}  // namespace

// A grid of at most kMaxGpus GPUs whose tensor-parallel ranks split the hidden size, and
// whose cp ranks split the sequence as tally_train would (CheckContextParallel).
absl::Status CheckGrid(const PlanInput& in) {
  const int64_t gpus = in.world();
  if (gpus > kMaxGpus) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "[flags] dp %d x cp %d x tp %d x pp %d = %d GPUs; tally_plan plans at most %d", in.dp,
        in.cp, in.tp, in.pp, gpus, kMaxGpus));
  }
  if (in.cp > 1) {
    // A preset of another shape has heads of 128 channels.
    const int heads = (in.model.gpt ? in.model.config.n_head : std::max(1, in.model.hidden / 128));
    const absl::Status split = parallel::CheckContextParallel(
        in.cp, in.seq_len, heads / in.tp, in.cp_comm, in.cp_load_balance);
    if (!split.ok()) return absl::InvalidArgumentError(absl::StrCat("[flags] ", split.message()));
    if (in.recompute_attention) {
      return absl::InvalidArgumentError(
          "[flags] --recompute_granularity=selective has nothing to make again under --cp (its "
          "attention keeps only each query's log-sum-exp): use full recompute or none");
    }
  }
  if (in.model.hidden % in.tp != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "[flags] the hidden size %d is not divisible by --tp=%d", in.model.hidden, in.tp));
  }
  if (in.model.gpt && in.model.config.n_head % in.tp != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "[flags] the %d heads of %s are not divisible by --tp=%d", in.model.config.n_head,
        in.model.name, in.tp));
  }
  return absl::OkStatus();
}

absl::Status CheckZeroShard(const PlanInput& in) {
  if (!in.zero3_reshard_after_forward && in.StageRecompute()) {
    return absl::InvalidArgumentError(
        "[flags] --zero3_reshard_after_forward=false with a pipeline's --recompute: the "
        "recomputed forward gathers again");
  }
  if (in.zero_hpz && in.zero_shard == parallel::ZeroShard::kNode) {
    return absl::InvalidArgumentError(
        "[flags] --zero_hpz with --zero_shard=node: HSDP's gathers are inside the node already");
  }
  if (in.zero_shard != parallel::ZeroShard::kNode && !in.zero_hpz) return absl::OkStatus();
  const std::string flag = in.zero_hpz ? "--zero_hpz" : "--zero_shard=node";
  if (in.gpus_per_node <= 0) {
    return absl::InvalidArgumentError(
        "[flags] " + flag + " needs --gpus_per_node (or a --cluster): which GPUs share a node");
  }
  if (in.ep > 1) {
    return absl::InvalidArgumentError("[flags] " + flag + " with --ep is not supported yet");
  }
  if (in.world() > kLookedAt) {
    return absl::InvalidArgumentError(absl::StrCat(
        "[flags] ", flag, " looks at every GPU's node: at most ", kLookedAt, " GPUs"));
  }
  const parallel::Topology grid(in.dp, in.tp, in.pp, in.order, in.ep, in.cp);
  const comm::Nodes nodes = comm::Nodes::Blocks(int(in.world()), in.gpus_per_node).value();
  return grid.ShardByNode(0, nodes, flag.c_str()).status();
}

absl::Status CheckQuantization(const PlanInput& in) {
  if (in.zero_quant_block < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "[flags] --zero_quant_block must be at least 1 value a block, got ", in.zero_quant_block));
  }
  if (in.zero_quant_grad_bits != 8 && in.zero_quant_grad_bits != 4) {
    return absl::InvalidArgumentError(absl::StrCat(
        "[flags] --zero_quant_grad_bits must be 8 or 4, got ", in.zero_quant_grad_bits));
  }
  if (!in.zero_quantized_gradients) return absl::OkStatus();
  if (in.ep > 1) {
    return absl::InvalidArgumentError(
        "[flags] --zero_quantized_gradients with --ep is not supported yet");
  }
  if (in.gpus_per_node <= 0 || in.world() > kLookedAt) return absl::OkStatus();  // one hop
  const parallel::Topology grid(in.dp, in.tp, in.pp, in.order, in.ep, in.cp);
  const comm::Nodes nodes = comm::Nodes::Blocks(int(in.world()), in.gpus_per_node).value();
  for (int gpu = 0; gpu < int(in.world()); ++gpu) {
    RETURN_IF_ERROR(grid.ShardByNode(gpu, nodes, "--zero_quantized_gradients").status());
  }
  return absl::OkStatus();
}

absl::Status CheckGradCompression(const PlanInput& in) {
  if (in.grad_compression == parallel::GradCompression::kOneBitAdam) {
    auto bad = [](const std::string& why) {
      return absl::InvalidArgumentError("[flags] --grad_compression=onebit_adam " + why);
    };
    if (in.zero > 0) return bad("compresses data parallelism's all-reduce: it needs --zero=0");
    if (in.ep > 1) return bad("with --ep is not supported yet");
    return absl::OkStatus();
  }
  if (in.grad_compression != parallel::GradCompression::kPowerSgd) return absl::OkStatus();
  auto bad = [](const std::string& why) {
    return absl::InvalidArgumentError("[flags] --grad_compression=powersgd " + why);
  };
  if (!in.model.gpt) {
    return bad("prices tally's GPT shapes only (--model=toy or gpt2-124m, or --n_layer ...): "
               "it needs each tensor's m x n");
  }
  if (in.powersgd_rank < 1) return bad(absl::StrCat("needs --powersgd_rank >= 1, got ", in.powersgd_rank));
  if (in.zero > 0) return bad("compresses data parallelism's all-reduce: it needs --zero=0");
  if (in.ep > 1) return bad("with --ep is not supported yet");
  const model::ParameterLayout layout = model::ParameterLayout::ForGPT(in.model.config, in.tp, 0);
  if (parallel::SplitForPowerSgd(layout, in.powersgd_rank).matrices.empty()) {
    return bad(absl::StrCat("with --powersgd_rank=", in.powersgd_rank,
                            " compresses no tensor: (m + n) x r must be below m x n"));
  }
  return absl::OkStatus();
}

}  // namespace tally::plan
