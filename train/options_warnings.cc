// TrainOptions::Warnings (options.h): one line for each flag given that has no effect in
// its configuration, read from the flags as given.
#include <utility>

#include "absl/strings/str_cat.h"
#include "train/options.h"

namespace tally::train {

std::vector<std::string> TrainOptions::Warnings() const {
  const TrainOptions defaults;
  std::vector<std::string> lines;
  auto unused = [&](const char* flag, const char* because) {
    lines.push_back(absl::StrCat("[flags] warning: ", flag, " has no effect ", because));
  };
  if (parallel.tp == 1 && parallel.sequence_parallel) unused("--sequence_parallel", "with --tp=1");
  if (parallel.recompute_layers && (!parallel.recompute || parallel.pp == 1)) {
    unused("--recompute_method=layer", !parallel.recompute
                                           ? "without full recompute (--recompute)"
                                           : "with --pp=1 (a layer at a time already)");
  }
  if (parallel.pp_scatter_gather && !parallel.ScatterGather()) {
    unused("--pp_scatter_gather", parallel.sequence_parallel
                                      ? "with --sequence_parallel (a rank's boundary "
                                        "is already its part of the sequence)"
                                      : "without --pp > 1 and --tp > 1");
  }
  if (parallel.pp == 1) {
    if (parallel.schedule != defaults.parallel.schedule) unused("--schedule", "with --pp=1");
    if (parallel.virtual_stages != defaults.parallel.virtual_stages) {
      unused("--virtual_stages", "with --pp=1");
    }
    if (!parallel.pp_layers.empty()) unused("--pp_layers", "with --pp=1");
    if (output.show_schedule) unused("--show_schedule", "with --pp=1");
  }
  if (!model.moe()) {
    if (model.moe_top_k != defaults.model.moe_top_k) unused("--moe_top_k", "without --n_experts");
    if (model.capacity_factor != defaults.model.capacity_factor) {
      unused("--capacity_factor", "without --n_experts");
    }
    if (model.aux_loss_coef != defaults.model.aux_loss_coef) {
      unused("--moe_aux_loss_coef", "without --n_experts");
    }
  }
  if (parallel.dp == 1 && parallel.zero == 0) {
    if (parallel.allreduce != defaults.parallel.allreduce) unused("--allreduce", "with --dp=1");
    if (parallel.bucket_mb != defaults.parallel.bucket_mb) unused("--bucket_mb", "with --dp=1");
  }
  // --overlap overlaps the dp gradient buckets, ZeRO-2/3's reduce-scatters, ZeRO-3's
  // gathers on one stage and the pipeline's receives.
  const bool overlaps = parallel.pp > 1 || (parallel.dp > 1 && parallel.zero != 1);
  if (parallel.overlap && !overlaps) {
    unused("--overlap=on", parallel.dp == 1
                               ? "with --dp=1 --pp=1"
                               : "with --zero=1 (its reduce-scatter follows backward)");
  }
  if (parallel.allreduce == comm::Algorithm::kHierarchical && placement.gpus_per_node == 0 &&
      placement.backend == Backend::kThreads) {
    unused("--allreduce=hierarchical", "on one node (give --gpus_per_node): the ring runs");
  }
  if (precision.dtype == DType::kF32 && precision.fp32_grad_accum) {
    unused("--fp32_grad_accum", "with --precision=fp32");
  }
  if (precision.dtype == DType::kBF16 && precision.tf32) {
    unused("--tf32", "with --precision=bf16 (its matmuls take bf16)");
  }
  if (parallel.dp == 1 && parallel.zero == 0 && precision.grad_comm_dtype) {
    unused("--grad_comm_dtype", "with --dp=1");
  }
  // Read from the flags as given: a dry run turns evaluation and sampling off itself.
  if (dry_run) {
    if (data.eval_every > 0 && data.eval_every != defaults.data.eval_every) {
      unused("--eval_every", "with --dry_run (it evaluates nothing)");
    }
    if (sampling.sample_bytes > 0 && sampling.sample_bytes != defaults.sampling.sample_bytes) {
      unused("--sample_bytes", "with --dry_run (it samples nothing)");
    }
  }
  const bool evaluates = data.eval_every > 0 && !dry_run;
  if (!evaluates && data.eval_batches != defaults.data.eval_batches) {
    unused("--eval_batches", dry_run ? "with --dry_run" : "with --eval_every=0");
  }
  if (sampling.sample_bytes == 0 || dry_run) {
    const char* because = dry_run ? "with --dry_run" : "with --sample_bytes=0";
    if (sampling.temperature != defaults.sampling.temperature) unused("--temperature", because);
    if (sampling.top_k != defaults.sampling.top_k) unused("--top_k", because);
    if (!sampling.prompt.empty()) unused("--prompt", because);
  }
  // A sampling job reads the checkpoint's parameters and nothing of training.
  if (sampling.sample_only) {
    const char* because = "with --sample_only (it trains nothing)";
    const std::pair<bool, const char*> trains[] = {
        {training.steps != defaults.training.steps, "--steps"},
        {training.lr != defaults.training.lr, "--lr"},
        {training.min_lr != defaults.training.min_lr, "--min_lr"},
        {training.warmup_steps != defaults.training.warmup_steps, "--warmup_steps"},
        {training.weight_decay != defaults.training.weight_decay, "--weight_decay"},
        {training.grad_clip != defaults.training.grad_clip, "--grad_clip"},
        {training.optimizer != defaults.training.optimizer, "--optimizer"},
        {!data.path.empty(), "--data"},
        {data.eval_every != defaults.data.eval_every, "--eval_every"},
        {data.eval_batches != defaults.data.eval_batches, "--eval_batches"},
        {training.global_batch_size != defaults.training.global_batch_size, "--global_batch_size"},
        {training.micro_batch_size != defaults.training.micro_batch_size, "--micro_batch_size"},
        {output.report != defaults.output.report, "--report"},
        {output.peer_matrix, "--peer_matrix"}};
    for (auto [given, flag] : trains) {
      if (given) unused(flag, because);
    }
  }
  return lines;
}

}  // namespace tally::train
