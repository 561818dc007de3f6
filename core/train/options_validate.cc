// The options checked: each section alone (its Validate), then what needs two sections
// (TrainOptions::Validate). Every check returns the first wrong value's message, naming
// its flag: "[flags] --tp must be >= 1, got 0".
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/parallel/pipeline_schedule.h"
#include "core/runtime/status_macros.h"
#include "core/train/options.h"
#include "core/train/options_validate.h"

namespace tally::train {
namespace {

// The first of `values` (a flag's value and its name) that is not a finite number (a
// float flag of 1e39 is inf as a float).
absl::Status Finite(std::initializer_list<std::pair<double, const char*>> values) {
  for (auto [value, flag] : values) {
    if (!std::isfinite(value)) return Bad(flag, " must be a finite number, got ", value);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status TrainingOptions::Validate() const {
  RETURN_IF_ERROR(Finite({{double(lr), "--lr"},
                          {double(min_lr), "--min_lr"},
                          {double(weight_decay), "--weight_decay"},
                          {double(grad_clip), "--grad_clip"}}));
  if (global_batch_size <= 0) {
    return Bad("--global_batch_size must be positive, got ", global_batch_size);
  }
  if (micro_batch_size < 0) {
    return Bad("--micro_batch_size must be positive, got ", micro_batch_size);
  }
  if (steps < 0) return Bad("--steps must be >= 0, got ", steps);
  if (!(lr > 0)) return Bad("--lr must be positive, got ", lr);
  if (!(min_lr >= 0) || min_lr > lr) return Bad("--min_lr must be in [0, --lr], got ", min_lr);
  if (warmup_steps < 0) return Bad("--warmup_steps must be >= 0, got ", warmup_steps);
  if (!(weight_decay >= 0)) return Bad("--weight_decay must be >= 0, got ", weight_decay);
  if (!(grad_clip >= 0)) {
    return Bad("--grad_clip must be >= 0 (0 turns clipping off), got ", grad_clip);
  }
  if (threads < 0) return Bad("--threads must be >= 0 (0: every core), got ", threads);
  return absl::OkStatus();
}

absl::Status DataOptions::Validate() const {
  if (eval_every < 0) return Bad("--eval_every must be >= 0, got ", eval_every);
  if (eval_batches <= 0) return Bad("--eval_batches must be positive, got ", eval_batches);
  return absl::OkStatus();
}

absl::Status SamplingOptions::Validate(int vocab_size) const {
  RETURN_IF_ERROR(Finite({{double(temperature), "--temperature"}}));
  if (sample_bytes < 0) return Bad("--sample_bytes must be >= 0, got ", sample_bytes);
  if (!(temperature > 0)) return Bad("--temperature must be positive, got ", temperature);
  // Sampling picks among the vocabulary; a run that samples nothing has no k to check.
  if (top_k < 0 || (sample_bytes > 0 && top_k > vocab_size)) {
    return Bad("--top_k must be in [0, --vocab_size = ", vocab_size, "], got ", top_k);
  }
  if (int64_t(prompt.size()) > kMaxPromptBytes) {
    return Bad("--prompt is ", prompt.size(), " bytes; it may be at most ", kMaxPromptBytes,
               " (a sample reads only its last --seq_len bytes)");
  }
  for (size_t i = 0; i < prompt.size(); ++i) {
    if (int(static_cast<unsigned char>(prompt[i])) >= vocab_size) {
      return Bad("--prompt's byte ", i, " is ", int(static_cast<unsigned char>(prompt[i])),
                 ", outside the vocabulary of --vocab_size = ", vocab_size);
    }
  }
  return absl::OkStatus();
}

absl::Status CheckpointOptions::Validate() const {
  if (save_every < 0) return Bad("--save_every must be >= 0, got ", save_every);
  if (save_every > 0 && save.empty()) return Bad("--save_every needs --save=PATH");
  return absl::OkStatus();
}

// Long, and kept whole: one check per flag of the four axes, in the order of the flags
// table, each axis's own checks together.
// What context parallelism needs of the model and runs with so far.
absl::Status ParallelOptions::ValidateContextParallel(const model::GPTConfig& model) const {
  if (cp == 1) return absl::OkStatus();
  const absl::Status split = parallel::CheckContextParallel(cp, model.seq_len, model.n_head / tp,
                                                            cp_comm, cp_load_balance);
  if (!split.ok()) {
    if (cp_comm == parallel::CpComm::kAllToAll && (model.n_head / tp) % cp != 0) {
      return Bad("--cp_comm=a2a splits each tp rank's ", model.n_head / tp,
                 " heads over --cp=", cp, ": n_head/tp must be divisible by cp");
    }
    return Bad(split.message());
  }
  if (model.moe() && model.capacity_factor > 0) {
    return Bad("--capacity_factor=", model.capacity_factor, " with --cp=", cp,
               ": an expert's capacity ranks every token of a micro-batch, and cp splits "
               "them over ranks; use --capacity_factor=0 (no limit)");
  }
  if (recompute_attention) {
    return Bad("--recompute_granularity=selective makes attention's probabilities again in "
               "backward, and --cp=", cp, "'s attention keeps none (each query's log-sum-exp "
               "only): nothing to make again; use full recompute or none");
  }
  return absl::OkStatus();
}

absl::Status ParallelOptions::Validate(const model::GPTConfig& model) const {
  if (ep < 1) return Bad("--ep must be >= 1, got ", ep);
  if (ep > 1) {
    if (!model.moe()) return Bad("--ep=", ep, " splits experts over ranks: it needs --n_experts");
    if (model.n_experts % ep != 0) {
      return Bad("--n_experts=", model.n_experts, " must be divisible by --ep=", ep,
                 " (each rank takes whole experts)");
    }
    if (dp % ep != 0 && cp == 1) {
      return Bad("--ep=", ep, " must divide --dp=", dp,
                 " (expert-parallel ranks are carved out of the data-parallel ones)");
    }
    if ((dp * cp) % ep != 0) {
      return Bad("--ep=", ep, " must divide --dp x --cp = ", dp * cp,
                 " (expert-parallel ranks are carved out of the dp group's dp·cp ranks)");
    }
  }
  if (model.moe() && tp > 1 && sequence_parallel) {
    return Bad(
        "--n_experts with --sequence_parallel: the experts take whole rows; drop "
        "--sequence_parallel (--tp splits each expert as Megatron splits the MLP)");
  }
  RETURN_IF_ERROR(Finite({{bucket_mb, "--bucket_mb"}}));
  if (dp < 1) return Bad("--dp must be >= 1, got ", dp);
  if (tp < 1) return Bad("--tp must be >= 1, got ", tp);
  if (pp < 1) return Bad("--pp must be >= 1, got ", pp);
  if (cp < 1) return Bad("--cp must be >= 1, got ", cp);
  // Sizes multiply in 64 bits: no product of flags may wrap.
  const int64_t world_size = int64_t(dp) * cp * tp * pp;
  if (world_size > kMaxRanks) {
    if (cp > 1) {
      return Bad("--dp x --cp x --tp x --pp = ", dp, " x ", cp, " x ", tp, " x ", pp, " = ",
                 world_size, " ranks; tally runs at most ", kMaxRanks);
    }
    return Bad("--dp x --tp x --pp = ", dp, " x ", tp, " x ", pp, " = ", world_size,
               " ranks; tally runs at most ", kMaxRanks);
  }
  RETURN_IF_ERROR(ValidateContextParallel(model));
  if (recompute && recompute_attention) {
    return Bad("--recompute_granularity is full or selective, not both");
  }
  if (virtual_stages < 1) return Bad("--virtual_stages must be >= 1, got ", virtual_stages);
  const bool interleaved = schedule == parallel::PipelineSchedule::kInterleaved;
  if (interleaved && pp > 1 && virtual_stages < 2) {
    return Bad(
        "--schedule=interleaved needs --virtual_stages >= 2 (chunks of layers a stage; "
        "with one it is 1f1b)");
  }
  if (!interleaved && virtual_stages > 1) {
    return Bad("--virtual_stages=", virtual_stages, " needs --schedule=interleaved");
  }
  RETURN_IF_ERROR(
      parallel::StageModelChunks(model.n_layer, pp, pp > 1 ? virtual_stages : 1, pp_layers, 0).status());
  if (model.n_head % tp != 0) {
    return Bad("--n_head=", model.n_head, " must be divisible by --tp=", tp,
               " (each rank takes whole heads)");
  }
  if (sequence_parallel && model.seq_len % tp != 0) {
    return Bad("--seq_len=", model.seq_len, " must be divisible by --tp=", tp,
               " under --sequence_parallel (each rank takes seq_len/tp positions)");
  }
  if (allreduce == comm::Algorithm::kNative) {
    return Bad("--allreduce must be ring, naive or hierarchical, got '", comm::Name(allreduce),
               "'");
  }
  if (zero < 0 || zero > 3) return Bad("--zero must be 0, 1, 2 or 3, got ", zero);
  if (!(bucket_mb > 0)) return Bad("--bucket_mb must be positive, got ", bucket_mb);
  return absl::OkStatus();
}

absl::Status PrecisionOptions::Validate() const {
  for (auto [type, flag] : {std::pair{std::optional<DType>(dtype), "--precision"},
                            {grad_comm_dtype, "--grad_comm_dtype"}}) {
    if (type && *type != DType::kF32 && *type != DType::kBF16) {
      return Bad(flag, " must be fp32 or bf16, got ", Name(*type));
    }
  }
  return absl::OkStatus();
}

absl::Status PlacementOptions::Validate() const {
  RETURN_IF_ERROR(Finite({{timeout_s, "--timeout_s"}}));
  if (gpus_per_node < 0) {
    return Bad("--gpus_per_node must be at least 1 (or 0: the machine's own nodes), got ",
               gpus_per_node);
  }
  if (native_collectives && backend == Backend::kThreads) {
    return Bad(
        "--native_collectives needs --backend=mpi or nccl (the threads transport has only "
        "ring and naive)");
  }
  if (!(timeout_s > 0)) return Bad("--timeout_s must be positive, got ", timeout_s);
  if (device == DeviceType::kCUDA && backend == Backend::kMpi) {
    return Bad(
        "--device=cuda runs on --backend=threads (every rank on GPU 0) or --backend=nccl (a "
        "GPU per rank, under mpirun too); MPI moving GPU memory is not built");
  }
  if (backend == Backend::kNccl && device != DeviceType::kCUDA) {
    return Bad("--backend=nccl needs --device=cuda (NCCL moves GPU memory)");
  }
  return absl::OkStatus();
}

absl::Status OutputOptions::Validate() const {
  if (repeat < 1 || repeat > kMaxRepeat) {
    return Bad("--repeat must be in [1, ", kMaxRepeat, "] (runs of the same configuration), got ",
               repeat);
  }
  return absl::OkStatus();
}

// The sections in the order of the flags table, then what needs two of them: a dry run
// and a sampling job against what they cannot do, the batch against the grid, the slow
// rank against the world, the matmuls and collectives against the device and transport.
absl::Status TrainOptions::Validate() const {
  RETURN_IF_ERROR(model.Validate());
  if (model.vocab_size != 256 && !dry_run) {
    return Bad("--vocab_size=", model.vocab_size, " needs --dry_run (training is byte-level: 256)");
  }
  if (dry_run) {
    for (auto [set, flag] : {std::pair{!checkpoint.save.empty(), "--save"},
                             {!checkpoint.load.empty(), "--load"},
                             {!output.metrics_json.empty(), "--metrics_json"},
                             {output.check_against_serial, "--check_against_serial"}}) {
      if (set) {
        return Bad(flag, " with --dry_run: a dry run has no values to save, load, log or compare");
      }
    }
    if (placement.backend != Backend::kThreads || placement.device != DeviceType::kCPU) {
      return Bad(
          "--dry_run runs on --backend=threads --device=cpu (its ranks are threads; its "
          "tensors have no memory to put on a GPU)");
    }
  }
  RETURN_IF_ERROR(training.Validate());
  RETURN_IF_ERROR(data.Validate());
  RETURN_IF_ERROR(sampling.Validate(model.vocab_size));
  RETURN_IF_ERROR(checkpoint.Validate());
  RETURN_IF_ERROR(parallel.Validate(model));
  RETURN_IF_ERROR(precision.Validate());
  RETURN_IF_ERROR(placement.Validate());
  RETURN_IF_ERROR(output.Validate());
  RETURN_IF_ERROR(ValidateBatch());
  RETURN_IF_ERROR(ValidateJobs());
  if (parallel.cp > 1) {  // what context parallelism's attention does not run on yet
    const std::string cp = absl::StrCat("--cp=", parallel.cp);
    if (placement.device == DeviceType::kCUDA) {
      return Bad(cp, " runs on --device=cpu only so far (its attention is the CPU's)");
    }
  }
  if (cluster.slow_rank >= 0) {
    if (world() == 1) return Bad("--slow_rank needs more than one rank (nobody waits for it)");
    if (cluster.slow_rank >= world()) {
      return Bad("--slow_rank=", cluster.slow_rank, ":", cluster.slow_ms, ": rank ",
                 cluster.slow_rank, " is not in the run's ", world(), " ranks (0..", world() - 1,
                 ")");
    }
    // Its peers wait for it every step: longer than their deadline would stop the run.
    const double ms = cluster.slow_ms, deadline_ms = 1e3 * placement.timeout_s;
    if (!(ms > 0) || !std::isfinite(ms) || ms >= deadline_ms) {
      return Bad("--slow_rank=", cluster.slow_rank, ":", ms,
                 ": the milliseconds must be > 0 and below --timeout_s (", deadline_ms,
                 " ms), the longest a peer waits");
    }
  }
  RETURN_IF_ERROR(ValidateZeroShard());
  RETURN_IF_ERROR(ValidateGradCompression());
  if (precision.tf32 && placement.device != DeviceType::kCUDA) {
    return Bad("--tf32 needs --device=cuda (it is cuBLAS's)");
  }
  if (placement.native_collectives && placement.backend == Backend::kMpi &&
      (precision.dtype == DType::kBF16 || precision.grad_comm_dtype == DType::kBF16)) {
    return Bad(
        "--native_collectives over MPI cannot reduce bf16 (MPI has no bfloat16); "
        "drop it to use tally's ring and naive over MPI");
  }
  return absl::OkStatus();
}

absl::Status TrainOptions::ValidateBatch() const {
  const int dp = parallel.dp, micro = training.micro_batch_size;
  if (micro == 0) {  // not given, and the global batch does not split over dp
    return Bad("--global_batch_size (", training.global_batch_size,
               ") must be a multiple of --dp (", dp,
               "): each dp rank takes an equal share of every batch");
  }
  const int64_t per_micro_batch = int64_t(dp) * micro;
  if (training.global_batch_size % per_micro_batch != 0) {
    return Bad("--global_batch_size (", training.global_batch_size,
               ") must be a multiple of --dp x --micro_batch_size (", dp, " x ", micro, " = ",
               per_micro_batch, ")");
  }
  const int pp = parallel.pp;
  if (parallel.schedule == parallel::PipelineSchedule::kInterleaved && pp > 1 &&
      accumulation_steps() % pp != 0) {
    return Bad("--schedule=interleaved runs micro-batches in groups of --pp: ",
               accumulation_steps(), " micro-batches a step (--global_batch_size / (--dp x ",
               "--micro_batch_size)) is not a multiple of --pp=", pp);
  }
  return absl::OkStatus();
}

absl::Status TrainOptions::ValidateJobs() const {
  if (sampling.sample_only) {
    if (checkpoint.load.empty()) {
      return Bad("--sample_only samples a checkpoint's model: give --load=PATH");
    }
    if (dry_run) {
      return Bad("--sample_only with --dry_run: a dry run's model has no values to sample");
    }
    if (sampling.sample_bytes == 0) {
      return Bad("--sample_only with --sample_bytes=0 samples nothing");
    }
    for (auto [set, flag] : {std::pair{!checkpoint.save.empty(), "--save"},
                             {!output.metrics_json.empty(), "--metrics_json"},
                             {!output.traffic_json.empty(), "--traffic_json"},
                             {!output.report_html.empty(), "--report_html"},
                             {!output.trace.empty(), "--trace"},
                             {output.check_against_serial, "--check_against_serial"},
                             {output.repeat > 1, "--repeat"}}) {
      if (set) {
        return Bad(flag,
                   " with --sample_only: a sampling job trains no step, so it has no "
                   "checkpoint, step, report or trace to write");
      }
    }
  }
  if (output.repeat > 1 && dry_run) {
    return Bad(
        "--repeat measures this host's clock again, and a dry run computes nothing to "
        "measure (its modelled clock is the same on every run)");
  }
  return absl::OkStatus();
}

}  // namespace tally::train
