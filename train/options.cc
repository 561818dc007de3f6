#include "train/options.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "parallel/pipeline_schedule.h"

namespace tally::train {

const char* Name(Backend backend) {
  switch (backend) {
    case Backend::kThreads: return "threads";
    case Backend::kMpi: return "mpi";
    case Backend::kNccl: return "nccl";
  }
  return "?";
}

const char* Name(OptimizerKind optimizer) { return optimizer == OptimizerKind::kAdamW ? "adamw" : "sgd"; }

const char* Name(ReportFormat report) {
  switch (report) {
    case ReportFormat::kText: return "text";
    case ReportFormat::kFull: return "full";
    case ReportFormat::kJson: return "json";
    case ReportFormat::kCsv: return "csv";
  }
  return "?";
}

const char* Name(DeviceType device) { return device == DeviceType::kCPU ? "cpu" : "cuda"; }

GpuModel TrainOptions::ModelledGpu() const {
  return cluster_given() ? cluster_gpu : LoadCluster(kDefaultCluster)->gpu;
}

std::string TrainOptions::ModelledClusterName() const {
  return cluster_given() ? cluster_name
                         : absl::StrCat(kDefaultCluster, ", the default (--cluster to choose)");
}

absl::StatusOr<RecomputeChoice> ParseRecompute(bool recompute, const std::string& granularity) {
  if (granularity != "" && granularity != "full" && granularity != "selective") {
    return absl::InvalidArgumentError(absl::StrCat(
        "[flags] --recompute_granularity must be full or selective, got '", granularity, "'"));
  }
  const bool on = recompute || !granularity.empty();
  return RecomputeChoice{on && granularity != "selective", on && granularity == "selective"};
}

absl::StatusOr<bool> ParseRecomputeMethod(const std::string& method) {
  if (method == "stage") return false;
  if (method == "layer") return true;
  return absl::InvalidArgumentError(
      absl::StrCat("[flags] --recompute_method must be stage or layer, got '", method, "'"));
}

absl::Status ParseSlowRank(const std::string& text, TrainOptions& o) {
  if (text.empty()) return absl::OkStatus();
  const size_t colon = text.find(':');
  int rank = -1;
  double ms = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(text.substr(0, colon), &rank) ||
      !absl::SimpleAtod(text.substr(colon + 1), &ms) || rank < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "[flags] --slow_rank must be RANK:MS (a world rank >= 0 and milliseconds, e.g. 1:20), got '",
        text, "'"));
  }
  o.slow_rank = rank;
  o.slow_ms = ms;
  return absl::OkStatus();
}

namespace {

// The value of `choices` whose name is `name`, or "[flags] --flag must be a, b or c, got 'x'".
template <typename T>
absl::StatusOr<T> Choose(const char* flag, const std::string& name, std::initializer_list<T> choices) {
  std::string words;
  int i = 0;
  for (T choice : choices) {
    if (name == Name(choice)) return choice;
    absl::StrAppend(&words, i == 0 ? "" : i + 1 == int(choices.size()) ? " or " : ", ", Name(choice));
    ++i;
  }
  return absl::InvalidArgumentError(absl::StrCat("[flags] --", flag, " must be ", words, ", got '", name, "'"));
}

}  // namespace

absl::StatusOr<Backend> ParseBackend(const std::string& name) {
  return Choose("backend", name, {Backend::kThreads, Backend::kMpi, Backend::kNccl});
}
absl::StatusOr<OptimizerKind> ParseOptimizer(const std::string& name) {
  return Choose("optimizer", name, {OptimizerKind::kAdamW, OptimizerKind::kSgd});
}
absl::StatusOr<ReportFormat> ParseReport(const std::string& name) {
  return Choose("report", name, {ReportFormat::kText, ReportFormat::kFull, ReportFormat::kJson,
                                   ReportFormat::kCsv});
}
absl::StatusOr<DeviceType> ParseDevice(const std::string& name) {
  return Choose("device", name, {DeviceType::kCPU, DeviceType::kCUDA});
}
absl::StatusOr<comm::Algorithm> ParseAllReduce(const std::string& name) {
  return Choose("allreduce", name,
                {comm::Algorithm::kRing, comm::Algorithm::kNaive, comm::Algorithm::kHierarchical});
}

const char* PrecisionName(DType dtype) { return dtype == DType::kBF16 ? "bf16" : "fp32"; }

absl::StatusOr<DType> ParsePrecision(const char* flag, const std::string& name) {
  if (name == "fp32") return DType::kF32;
  if (name == "bf16") return DType::kBF16;
  return absl::InvalidArgumentError(
      absl::StrCat("[flags] --", flag, " must be fp32 or bf16, got '", name, "'"));
}

Device TrainOptions::ModelDevice(int gpu) const {
  if (dry_run) return Device::Meta();
  return device == DeviceType::kCUDA ? Device{DeviceType::kCUDA, gpu} : Device::CPU();
}

model::Precision TrainOptions::Precision() const {
  model::Precision p;
  p.params = p.activations = precision;
  p.grads = precision == DType::kBF16 && !fp32_grad_accum ? DType::kBF16 : DType::kF32;
  p.grad_comm = grad_comm_dtype.value_or(precision);
  return p;
}

model::ParameterLayout TrainOptions::RankLayout(int rank) const {
  const parallel::GridCoordinates at = topology().Of(rank);
  return model::ParameterLayout::ForGPT(model, tp, at.tp, StageChunks(at.pp), ep, at.dp % ep);
}

model::Chunks TrainOptions::StageChunks(int pp_rank) const {
  // One stage runs no schedule: it holds the whole model.
  return parallel::StageChunks(model.n_layer, pp, pp > 1 ? virtual_stages : 1, pp_layers, pp_rank)
      .value();
}

std::shared_ptr<const comm::Nodes> TrainOptions::PlacedNodes() const {
  if (gpus_per_node <= 0) return nullptr;
  return std::make_shared<const comm::Nodes>(comm::Nodes::Blocks(world(), gpus_per_node).value());
}

MatmulInputs TrainOptions::matmul_inputs() const {
  if (precision == DType::kBF16) return MatmulInputs::kBF16;
  return tf32 ? MatmulInputs::kTF32 : MatmulInputs::kF32;
}

TrainOptions TrainOptions::Resolved() const {
  TrainOptions o = *this;
  if (o.micro_batch_size == 0 && o.dp > 0 && o.global_batch_size % o.dp == 0) {
    o.micro_batch_size = o.global_batch_size / o.dp;
  }
  if (o.dry_run) {  // nothing to evaluate or sample: the model has no values
    o.eval_every = 0;
    o.sample_bytes = 0;
  }
  if (o.sample_only) o.eval_every = 0;  // it evaluates nothing either
  return o;
}

// Long, and kept whole: one check per flag, in the order of the flags table; the first
// wrong value is the message.
absl::Status TrainOptions::Validate() const {
  auto bad = [](auto... parts) { return absl::InvalidArgumentError(absl::StrCat("[flags] ", parts...)); };
  if (absl::Status s = model.Validate(); !s.ok()) return s;
  if (model.vocab_size != 256 && !dry_run) {
    return bad("--vocab_size=", model.vocab_size, " needs --dry_run (training is byte-level: 256)");
  }
  if (dry_run) {
    for (auto [set, flag] : {std::pair{!save.empty(), "--save"}, {!load.empty(), "--load"},
                             {!metrics_json.empty(), "--metrics_json"},
                             {check_against_serial, "--check_against_serial"}}) {
      if (set) return bad(flag, " with --dry_run: a dry run has no values to save, load, log or compare");
    }
    if (backend != Backend::kThreads || device != DeviceType::kCPU) {
      return bad("--dry_run runs on --backend=threads --device=cpu (its ranks are threads; its "
                 "tensors have no memory to put on a GPU)");
    }
  }
  if (ep < 1) return bad("--ep must be >= 1, got ", ep);
  if (ep > 1) {
    if (!model.moe()) return bad("--ep=", ep, " splits experts over ranks: it needs --n_experts");
    if (model.n_experts % ep != 0) {
      return bad("--n_experts=", model.n_experts, " must be divisible by --ep=", ep,
                 " (each rank takes whole experts)");
    }
    if (dp % ep != 0) {
      return bad("--ep=", ep, " must divide --dp=", dp,
                 " (expert-parallel ranks are carved out of the data-parallel ones)");
    }
  }
  if (model.moe() && tp > 1 && sequence_parallel) {
    return bad("--n_experts with --sequence_parallel: the experts take whole rows; drop "
               "--sequence_parallel (--tp splits each expert as Megatron splits the MLP)");
  }
  // Every real-valued flag is a finite number (a float flag of 1e39 is inf as a float).
  for (auto [value, flag] : {std::pair{double(lr), "--lr"}, {double(min_lr), "--min_lr"},
                             {double(weight_decay), "--weight_decay"}, {double(grad_clip), "--grad_clip"},
                             {double(temperature), "--temperature"}, {bucket_mb, "--bucket_mb"},
                             {timeout_s, "--timeout_s"}}) {
    if (!std::isfinite(value)) return bad(flag, " must be a finite number, got ", value);
  }
  if (global_batch_size <= 0) return bad("--global_batch_size must be positive, got ", global_batch_size);
  if (dp < 1) return bad("--dp must be >= 1, got ", dp);
  if (tp < 1) return bad("--tp must be >= 1, got ", tp);
  if (pp < 1) return bad("--pp must be >= 1, got ", pp);
  // Sizes multiply in 64 bits: no product of flags may wrap.
  const int64_t world_size = int64_t(dp) * tp * pp;
  if (world_size > kMaxRanks) {
    return bad("--dp x --tp x --pp = ", dp, " x ", tp, " x ", pp, " = ", world_size,
               " ranks; tally runs at most ", kMaxRanks);
  }
  if (recompute && recompute_attention) {
    return bad("--recompute_granularity is full or selective, not both");
  }
  if (virtual_stages < 1) return bad("--virtual_stages must be >= 1, got ", virtual_stages);
  const bool interleaved = schedule == parallel::PipelineSchedule::kInterleaved;
  if (interleaved && pp > 1 && virtual_stages < 2) {
    return bad("--schedule=interleaved needs --virtual_stages >= 2 (chunks of layers a stage; "
               "with one it is 1f1b)");
  }
  if (!interleaved && virtual_stages > 1) {
    return bad("--virtual_stages=", virtual_stages, " needs --schedule=interleaved");
  }
  if (absl::Status s =
          parallel::StageChunks(model.n_layer, pp, pp > 1 ? virtual_stages : 1, pp_layers, 0).status();
      !s.ok()) {
    return s;
  }
  if (micro_batch_size < 0) return bad("--micro_batch_size must be positive, got ", micro_batch_size);
  if (micro_batch_size == 0) {  // not given, and the global batch does not split over dp
    return bad("--global_batch_size (", global_batch_size, ") must be a multiple of --dp (", dp,
               "): each dp rank takes an equal share of every batch");
  }
  if (model.n_head % tp != 0) {
    return bad("--n_head=", model.n_head, " must be divisible by --tp=", tp,
               " (each rank takes whole heads)");
  }
  if (sequence_parallel && model.seq_len % tp != 0) {
    return bad("--seq_len=", model.seq_len, " must be divisible by --tp=", tp,
               " under --sequence_parallel (each rank takes seq_len/tp positions)");
  }
  const int64_t per_micro_batch = int64_t(dp) * micro_batch_size;
  if (global_batch_size % per_micro_batch != 0) {
    return bad("--global_batch_size (", global_batch_size,
               ") must be a multiple of --dp x --micro_batch_size (", dp, " x ", micro_batch_size,
               " = ", per_micro_batch, ")");
  }
  if (interleaved && pp > 1 && accumulation_steps() % pp != 0) {
    return bad("--schedule=interleaved runs micro-batches in groups of --pp: ",
               accumulation_steps(), " micro-batches a step (--global_batch_size / (--dp x "
               "--micro_batch_size)) is not a multiple of --pp=", pp);
  }
  if (allreduce == comm::Algorithm::kNative) {
    return bad("--allreduce must be ring, naive or hierarchical, got '", comm::Name(allreduce),
               "'");
  }
  if (zero < 0 || zero > 3) return bad("--zero must be 0, 1, 2 or 3, got ", zero);
  if (gpus_per_node < 0) {
    return bad("--gpus_per_node must be at least 1 (or 0: the machine's own nodes), got ",
               gpus_per_node);
  }
  if (!(bucket_mb > 0)) return bad("--bucket_mb must be positive, got ", bucket_mb);
  if (steps < 0) return bad("--steps must be >= 0, got ", steps);
  if (!(lr > 0)) return bad("--lr must be positive, got ", lr);
  if (!(min_lr >= 0) || min_lr > lr) return bad("--min_lr must be in [0, --lr], got ", min_lr);
  if (warmup_steps < 0) return bad("--warmup_steps must be >= 0, got ", warmup_steps);
  if (!(weight_decay >= 0)) return bad("--weight_decay must be >= 0, got ", weight_decay);
  if (!(grad_clip >= 0)) return bad("--grad_clip must be >= 0 (0 turns clipping off), got ", grad_clip);
  if (eval_every < 0) return bad("--eval_every must be >= 0, got ", eval_every);
  if (eval_batches <= 0) return bad("--eval_batches must be positive, got ", eval_batches);
  if (sample_bytes < 0) return bad("--sample_bytes must be >= 0, got ", sample_bytes);
  if (!(temperature > 0)) return bad("--temperature must be positive, got ", temperature);
  // Sampling picks among the vocabulary; a run that samples nothing has no k to check.
  if (top_k < 0 || (sample_bytes > 0 && top_k > model.vocab_size)) {
    return bad("--top_k must be in [0, --vocab_size = ", model.vocab_size, "], got ", top_k);
  }
  if (int64_t(prompt.size()) > kMaxPromptBytes) {
    return bad("--prompt is ", prompt.size(), " bytes; it may be at most ", kMaxPromptBytes,
               " (a sample reads only its last --seq_len bytes)");
  }
  for (size_t i = 0; i < prompt.size(); ++i) {
    if (int(static_cast<unsigned char>(prompt[i])) >= model.vocab_size) {
      return bad("--prompt's byte ", i, " is ", int(static_cast<unsigned char>(prompt[i])),
                 ", outside the vocabulary of --vocab_size = ", model.vocab_size);
    }
  }
  if (sample_only) {
    if (load.empty()) return bad("--sample_only samples a checkpoint's model: give --load=PATH");
    if (dry_run) return bad("--sample_only with --dry_run: a dry run's model has no values to sample");
    if (sample_bytes == 0) return bad("--sample_only with --sample_bytes=0 samples nothing");
    for (auto [set, flag] : {std::pair{!save.empty(), "--save"}, {!metrics_json.empty(), "--metrics_json"},
                             {!traffic_json.empty(), "--traffic_json"}, {!report_html.empty(), "--report_html"},
                             {!trace.empty(), "--trace"}, {check_against_serial, "--check_against_serial"},
                             {repeat > 1, "--repeat"}}) {
      if (set) return bad(flag, " with --sample_only: a sampling job trains no step, so it has no checkpoint, "
                          "step, report or trace to write");
    }
  }
  if (save_every < 0) return bad("--save_every must be >= 0, got ", save_every);
  if (save_every > 0 && save.empty()) return bad("--save_every needs --save=PATH");
  if (threads < 0) return bad("--threads must be >= 0 (0: every core), got ", threads);
  if (native_collectives && backend == Backend::kThreads) {
    return bad(
        "--native_collectives needs --backend=mpi or nccl (the threads transport has only "
        "ring and naive)");
  }
  if (!(timeout_s > 0)) return bad("--timeout_s must be positive, got ", timeout_s);
  if (repeat < 1 || repeat > kMaxRepeat) {
    return bad("--repeat must be in [1, ", kMaxRepeat, "] (runs of the same configuration), got ", repeat);
  }
  if (repeat > 1 && dry_run) {
    return bad("--repeat measures this host's clock again, and a dry run computes nothing to "
               "measure (its modelled clock is the same on every run)");
  }
  if (slow_rank >= 0) {
    if (world() == 1) return bad("--slow_rank needs more than one rank (nobody waits for it)");
    if (slow_rank >= world()) {
      return bad("--slow_rank=", slow_rank, ":", slow_ms, ": rank ", slow_rank,
                 " is not in the run's ", world(), " ranks (0..", world() - 1, ")");
    }
    // Its peers wait for it every step: longer than their deadline would stop the run.
    if (!(slow_ms > 0) || !std::isfinite(slow_ms) || slow_ms >= 1e3 * timeout_s) {
      return bad("--slow_rank=", slow_rank, ":", slow_ms, ": the milliseconds must be > 0 and "
                 "below --timeout_s (", 1e3 * timeout_s, " ms), the longest a peer waits");
    }
  }
  if (tf32 && device != DeviceType::kCUDA) return bad("--tf32 needs --device=cuda (it is cuBLAS's)");
  if (device == DeviceType::kCUDA && backend == Backend::kMpi) {
    return bad(
        "--device=cuda runs on --backend=threads (every rank on GPU 0) or --backend=nccl (a GPU "
        "per rank, under mpirun too); MPI moving GPU memory is not built");
  }
  if (backend == Backend::kNccl && device != DeviceType::kCUDA) {
    return bad("--backend=nccl needs --device=cuda (NCCL moves GPU memory)");
  }
  for (auto [dtype, flag] : {std::pair{std::optional<DType>(precision), "--precision"},
                             {grad_comm_dtype, "--grad_comm_dtype"}}) {
    if (dtype && *dtype != DType::kF32 && *dtype != DType::kBF16) {
      return bad(flag, " must be fp32 or bf16, got ", Name(*dtype));
    }
  }
  if (native_collectives && backend == Backend::kMpi &&
      (precision == DType::kBF16 || grad_comm_dtype == DType::kBF16)) {
    return bad("--native_collectives over MPI cannot reduce bf16 (MPI has no bfloat16); "
               "drop it to use tally's ring and naive over MPI");
  }
  return absl::OkStatus();
}

}  // namespace tally::train
