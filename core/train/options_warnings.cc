// TrainOptions::Warnings (options.h): one line for each flag given that has no effect in
// its configuration, read from the flags as given.
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/train/options.h"

namespace tally::train {
namespace {

// Books "[flags] warning: --flag has no effect because". Each topic below reads the
// options given against `defaults`, the options no flag changed.
using Unused = std::function<void(const char* flag, const char* because)>;

// The grid's flags that the grid leaves unused.
void ParallelWarnings(const TrainOptions& o, const TrainOptions& defaults, const Unused& unused) {
  if (o.parallel.tp == 1 && o.parallel.sequence_parallel) {
    unused("--sequence_parallel", "with --tp=1");
  }
  if (o.parallel.recompute_layers && (!o.parallel.recompute || o.parallel.pp == 1)) {
    unused("--recompute_method=layer", !o.parallel.recompute
                                           ? "without full recompute (--recompute)"
                                           : "with --pp=1 (a layer at a time already)");
  }
  if (o.parallel.pp_scatter_gather && !o.parallel.ScatterGather()) {
    unused("--pp_scatter_gather", o.parallel.sequence_parallel
                                      ? "with --sequence_parallel (a rank's boundary "
                                        "is already its part of the sequence)"
                                      : "without --pp > 1 and --tp > 1");
  }
  if (o.parallel.pp == 1) {
    if (o.parallel.schedule != defaults.parallel.schedule) unused("--schedule", "with --pp=1");
    if (o.parallel.virtual_stages != defaults.parallel.virtual_stages) {
      unused("--virtual_stages", "with --pp=1");
    }
    if (!o.parallel.pp_layers.empty()) unused("--pp_layers", "with --pp=1");
    if (o.output.show_schedule) unused("--show_schedule", "with --pp=1");
  }
  if (o.parallel.cp == 1) {
    if (o.parallel.cp_comm != defaults.parallel.cp_comm) unused("--cp_comm", "with --cp=1");
    if (o.parallel.cp_load_balance != defaults.parallel.cp_load_balance) {
      unused("--cp_load_balance", "with --cp=1");
    }
  } else if (o.parallel.cp_comm == parallel::CpComm::kAllToAll &&
             o.parallel.cp_load_balance != defaults.parallel.cp_load_balance) {
    unused("--cp_load_balance", "with --cp_comm=a2a (each rank attends over the whole sequence)");
  }
  // The dp group's ranks: dp·cp under context parallelism, whose replicas sum gradients too.
  const int replicas = o.parallel.dp * o.parallel.cp;
  if (replicas == 1 && o.parallel.zero == 0) {
    if (o.parallel.allreduce != defaults.parallel.allreduce) unused("--allreduce", "with --dp=1");
    if (o.parallel.bucket_mb != defaults.parallel.bucket_mb) unused("--bucket_mb", "with --dp=1");
  }
  // --overlap overlaps the dp gradient buckets, ZeRO-2/3's reduce-scatters, ZeRO-3's
  // gathers on one stage and the pipeline's receives.
  const bool overlaps = o.parallel.pp > 1 || (replicas > 1 && o.parallel.zero != 1);
  if (o.parallel.overlap && !overlaps) {
    unused("--overlap=on", replicas == 1
                               ? "with --dp=1 --pp=1"
                               : "with --zero=1 (its reduce-scatter follows backward)");
  }
  if (!o.parallel.Qwz() && !o.parallel.Qgz() &&
      o.parallel.zero_quant_block != defaults.parallel.zero_quant_block) {
    unused("--zero_quant_block", "without --zero=3 --zero_quantized_weights or _gradients");
  }
  if (!o.parallel.Qgz() &&
      o.parallel.zero_quant_grad_bits != defaults.parallel.zero_quant_grad_bits) {
    unused("--zero_quant_grad_bits", "without --zero=3 --zero_quantized_gradients");
  }
  if (o.parallel.Qgz() && o.precision.grad_comm_dtype) {
    unused("--grad_comm_dtype", "with --zero_quantized_gradients (the gradients travel as int8)");
  }
  if (!o.parallel.PowerSgd()) {
    if (o.parallel.powersgd_rank != defaults.parallel.powersgd_rank) {
      unused("--powersgd_rank", "without --grad_compression=powersgd");
    }
    if (o.parallel.powersgd_warmup_steps != defaults.parallel.powersgd_warmup_steps) {
      unused("--powersgd_warmup_steps", "without --grad_compression=powersgd");
    }
  } else if (o.parallel.powersgd_warmup_steps >= o.training.steps) {
    unused("--grad_compression=powersgd",
           "when its warm-up outlasts the run (--powersgd_warmup_steps >= --steps)");
  }
  if (!o.parallel.OneBitAdam()) {
    if (o.parallel.onebit_warmup_steps != defaults.parallel.onebit_warmup_steps) {
      unused("--onebit_warmup_steps", "without --grad_compression=onebit_adam");
    }
  } else if (o.parallel.onebit_warmup_steps >= o.training.steps) {
    unused("--grad_compression=onebit_adam",
           "when its warm-up outlasts the run (--onebit_warmup_steps >= --steps)");
  }
  // HSDP and hpZ on a dp group that one node holds: ZeRO's own groups, nothing kept inside.
  if ((o.parallel.ShardsByNode() || o.parallel.Hpz()) && o.placement.gpus_per_node > 0) {
    const absl::StatusOr<parallel::Topology::NodeShards> cut =
        o.topology().ShardByNode(0, *o.PlacedNodes());
    if (cut.ok() && cut->replicate.size() == 1) {
      unused(o.parallel.Hpz() ? "--zero_hpz" : "--zero_shard=node",
             "when the dp group is on one node (it is plain ZeRO over it)");
    }
  }
  if (o.parallel.allreduce == comm::Algorithm::kHierarchical && o.placement.gpus_per_node == 0 &&
      o.placement.backend == Backend::kThreads) {
    unused("--allreduce=hierarchical", "on one node (give --gpus_per_node): the ring runs");
  }
}

// The experts' flags without experts.
void ModelWarnings(const TrainOptions& o, const TrainOptions& defaults, const Unused& unused) {
  if (!o.model.moe()) {
    if (o.model.moe_top_k != defaults.model.moe_top_k) unused("--moe_top_k", "without --n_experts");
    if (o.model.capacity_factor != defaults.model.capacity_factor) {
      unused("--capacity_factor", "without --n_experts");
    }
    if (o.model.aux_loss_coef != defaults.model.aux_loss_coef) {
      unused("--moe_aux_loss_coef", "without --n_experts");
    }
  }
}

// The precision's flags that the precision leaves unused.
void PrecisionWarnings(const TrainOptions& o, const Unused& unused) {
  if (o.precision.dtype == DType::kF32 && o.precision.fp32_grad_accum) {
    unused("--fp32_grad_accum", "with --precision=fp32");
  }
  if (o.precision.dtype == DType::kBF16 && o.precision.tf32) {
    unused("--tf32", "with --precision=bf16 (its matmuls take bf16)");
  }
  if (o.parallel.dp * o.parallel.cp == 1 && o.parallel.zero == 0 && o.precision.grad_comm_dtype) {
    unused("--grad_comm_dtype", "with --dp=1");
  }
}

// Evaluation's and sampling's flags where nothing is evaluated or sampled.
void EvaluationAndSamplingWarnings(const TrainOptions& o, const TrainOptions& defaults,
                                   const Unused& unused) {
  // Read from the flags as given: a dry run turns evaluation and sampling off itself.
  if (o.dry_run) {
    if (o.data.eval_every > 0 && o.data.eval_every != defaults.data.eval_every) {
      unused("--eval_every", "with --dry_run (it evaluates nothing)");
    }
    if (o.sampling.sample_bytes > 0 && o.sampling.sample_bytes != defaults.sampling.sample_bytes) {
      unused("--sample_bytes", "with --dry_run (it samples nothing)");
    }
  }
  const bool evaluates = o.data.eval_every > 0 && !o.dry_run;
  if (!evaluates && o.data.eval_batches != defaults.data.eval_batches) {
    unused("--eval_batches", o.dry_run ? "with --dry_run" : "with --eval_every=0");
  }
  if (o.sampling.sample_bytes == 0 || o.dry_run) {
    const char* because = o.dry_run ? "with --dry_run" : "with --sample_bytes=0";
    if (o.sampling.temperature != defaults.sampling.temperature) unused("--temperature", because);
    if (o.sampling.top_k != defaults.sampling.top_k) unused("--top_k", because);
    if (!o.sampling.prompt.empty()) unused("--prompt", because);
  }
}

// Training's flags in a sampling job.
void SampleOnlyWarnings(const TrainOptions& o, const TrainOptions& defaults, const Unused& unused) {
  // A sampling job reads the checkpoint's parameters and nothing of training.
  if (o.sampling.sample_only) {
    const char* because = "with --sample_only (it trains nothing)";
    const std::pair<bool, const char*> trains[] = {
        {o.training.steps != defaults.training.steps, "--steps"},
        {o.training.lr != defaults.training.lr, "--lr"},
        {o.training.min_lr != defaults.training.min_lr, "--min_lr"},
        {o.training.warmup_steps != defaults.training.warmup_steps, "--warmup_steps"},
        {o.training.weight_decay != defaults.training.weight_decay, "--weight_decay"},
        {o.training.grad_clip != defaults.training.grad_clip, "--grad_clip"},
        {o.training.optimizer != defaults.training.optimizer, "--optimizer"},
        {!o.data.path.empty(), "--data"},
        {o.data.eval_every != defaults.data.eval_every, "--eval_every"},
        {o.data.eval_batches != defaults.data.eval_batches, "--eval_batches"},
        {o.training.global_batch_size != defaults.training.global_batch_size,
         "--global_batch_size"},
        {o.training.micro_batch_size != defaults.training.micro_batch_size, "--micro_batch_size"},
        {o.output.report != defaults.output.report, "--report"},
        {o.output.peer_matrix, "--peer_matrix"}};
    for (auto [given, flag] : trains) {
      if (given) unused(flag, because);
    }
  }
}

}  // namespace

std::vector<std::string> TrainOptions::Warnings() const {
  const TrainOptions defaults;
  std::vector<std::string> lines;
  const Unused unused = [&](const char* flag, const char* because) {
    lines.push_back(absl::StrCat("[flags] warning: ", flag, " has no effect ", because));
  };
  ParallelWarnings(*this, defaults, unused);
  ModelWarnings(*this, defaults, unused);
  PrecisionWarnings(*this, unused);
  EvaluationAndSamplingWarnings(*this, defaults, unused);
  SampleOnlyWarnings(*this, defaults, unused);
  return lines;
}

}  // namespace tally::train
