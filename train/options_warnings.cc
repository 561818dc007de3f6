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
  if (tp == 1 && sequence_parallel) unused("--sequence_parallel", "with --tp=1");
  if (recompute_layers && (!recompute || pp == 1)) {
    unused("--recompute_method=layer", !recompute ? "without full recompute (--recompute)"
                                                  : "with --pp=1 (a layer at a time already)");
  }
  if (pp_scatter_gather && !ScatterGather()) {
    unused("--pp_scatter_gather", sequence_parallel ? "with --sequence_parallel (a rank's boundary "
                                                      "is already its part of the sequence)"
                                                    : "without --pp > 1 and --tp > 1");
  }
  if (pp == 1) {
    if (schedule != defaults.schedule) unused("--schedule", "with --pp=1");
    if (virtual_stages != defaults.virtual_stages) unused("--virtual_stages", "with --pp=1");
    if (!pp_layers.empty()) unused("--pp_layers", "with --pp=1");
    if (show_schedule) unused("--show_schedule", "with --pp=1");
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
  if (dp == 1 && zero == 0) {
    if (allreduce != defaults.allreduce) unused("--allreduce", "with --dp=1");
    if (bucket_mb != defaults.bucket_mb) unused("--bucket_mb", "with --dp=1");
  }
  // --overlap overlaps the dp gradient buckets, ZeRO-2/3's reduce-scatters, ZeRO-3's
  // gathers on one stage and the pipeline's receives.
  const bool overlaps = pp > 1 || (dp > 1 && zero != 1);
  if (overlap && !overlaps) {
    unused("--overlap=on", dp == 1 ? "with --dp=1 --pp=1"
                                   : "with --zero=1 (its reduce-scatter follows backward)");
  }
  if (allreduce == comm::Algorithm::kHierarchical && gpus_per_node == 0 &&
      backend == Backend::kThreads) {
    unused("--allreduce=hierarchical", "on one node (give --gpus_per_node): the ring runs");
  }
  if (precision == DType::kF32 && fp32_grad_accum) unused("--fp32_grad_accum", "with --precision=fp32");
  if (precision == DType::kBF16 && tf32) unused("--tf32", "with --precision=bf16 (its matmuls take bf16)");
  if (dp == 1 && zero == 0 && grad_comm_dtype) unused("--grad_comm_dtype", "with --dp=1");
  // Read from the flags as given: a dry run turns evaluation and sampling off itself.
  if (dry_run) {
    if (eval_every > 0 && eval_every != defaults.eval_every) unused("--eval_every", "with --dry_run (it evaluates nothing)");
    if (sample_bytes > 0 && sample_bytes != defaults.sample_bytes) unused("--sample_bytes", "with --dry_run (it samples nothing)");
  }
  const bool evaluates = eval_every > 0 && !dry_run;
  if (!evaluates && eval_batches != defaults.eval_batches) {
    unused("--eval_batches", dry_run ? "with --dry_run" : "with --eval_every=0");
  }
  if (sample_bytes == 0 || dry_run) {
    const char* because = dry_run ? "with --dry_run" : "with --sample_bytes=0";
    if (temperature != defaults.temperature) unused("--temperature", because);
    if (top_k != defaults.top_k) unused("--top_k", because);
    if (!prompt.empty()) unused("--prompt", because);
  }
  // A sampling job reads the checkpoint's parameters and nothing of training.
  if (sample_only) {
    const char* because = "with --sample_only (it trains nothing)";
    const std::pair<bool, const char*> training[] = {
        {steps != defaults.steps, "--steps"},
        {lr != defaults.lr, "--lr"},
        {min_lr != defaults.min_lr, "--min_lr"},
        {warmup_steps != defaults.warmup_steps, "--warmup_steps"},
        {weight_decay != defaults.weight_decay, "--weight_decay"},
        {grad_clip != defaults.grad_clip, "--grad_clip"},
        {optimizer != defaults.optimizer, "--optimizer"},
        {!data.empty(), "--data"},
        {eval_every != defaults.eval_every, "--eval_every"},
        {eval_batches != defaults.eval_batches, "--eval_batches"},
        {global_batch_size != defaults.global_batch_size, "--global_batch_size"},
        {micro_batch_size != defaults.micro_batch_size, "--micro_batch_size"},
        {report != defaults.report, "--report"},
        {peer_matrix, "--peer_matrix"}};
    for (auto [given, flag] : training) {
      if (given) unused(flag, because);
    }
  }
  return lines;
}

}  // namespace tally::train
