#include "core/train/options.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/parallel/pipeline_schedule.h"

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
  return cluster.given() ? cluster.gpu : LoadCluster(ClusterOptions::kDefaultCluster)->gpu;
}

std::string TrainOptions::ModelledClusterName() const {
  return cluster.given()
             ? cluster.name
             : absl::StrCat(ClusterOptions::kDefaultCluster, ", the default (--cluster to choose)");
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
  o.cluster.slow_rank = rank;
  o.cluster.slow_ms = ms;
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
  return placement.device == DeviceType::kCUDA ? Device{DeviceType::kCUDA, gpu} : Device::CPU();
}

model::Precision TrainOptions::Precision() const {
  model::Precision p;
  p.params = p.activations = precision.dtype;
  p.grads =
      precision.dtype == DType::kBF16 && !precision.fp32_grad_accum ? DType::kBF16 : DType::kF32;
  p.grad_comm = precision.grad_comm_dtype.value_or(precision.dtype);
  return p;
}

model::ParameterLayout TrainOptions::RankLayout(int rank) const {
  const parallel::GridCoordinates at = topology().Of(rank);
  return model::ParameterLayout::ForGPT(model, parallel.tp, at.tp, StageModelChunks(at.pp), parallel.ep,
                                        topology().ExpertRank(at));
}

model::ModelChunks TrainOptions::StageModelChunks(int pp_rank) const {
  // One stage runs no schedule: it holds the whole model.
  return parallel::StageModelChunks(model.n_layer, parallel.pp,
                               parallel.pp > 1 ? parallel.virtual_stages : 1, parallel.pp_layers,
                               pp_rank)
      .value();
}

std::shared_ptr<const comm::Nodes> TrainOptions::DpSplitNodes() const {
  const bool split = parallel.ShardsByNode() || parallel.Hpz() ||
                     (parallel.Qgz() && placement.gpus_per_node > 0);
  return split ? PlacedNodes() : nullptr;
}

std::shared_ptr<const comm::Nodes> TrainOptions::PlacedNodes() const {
  if (placement.gpus_per_node <= 0) return nullptr;
  return std::make_shared<const comm::Nodes>(
      comm::Nodes::Blocks(world(), placement.gpus_per_node).value());
}

MatmulInputs TrainOptions::matmul_inputs() const {
  if (precision.dtype == DType::kBF16) return MatmulInputs::kBF16;
  return precision.tf32 ? MatmulInputs::kTF32 : MatmulInputs::kF32;
}

std::string TrainOptions::CpWords() const {
  if (parallel.cp == 1) return "";
  return absl::StrCat(" x cp=", parallel.cp, " (", parallel::Name(parallel.cp_comm), ", ",
                      parallel::Name(parallel.cp_load_balance), ")");
}

TrainOptions TrainOptions::Resolved() const {
  TrainOptions o = *this;
  if (o.training.micro_batch_size == 0 && o.parallel.dp > 0 &&
      o.training.global_batch_size % o.parallel.dp == 0) {
    o.training.micro_batch_size = o.training.global_batch_size / o.parallel.dp;
  }
  if (o.dry_run) {  // nothing to evaluate or sample: the model has no values
    o.data.eval_every = 0;
    o.sampling.sample_bytes = 0;
  }
  if (o.sampling.sample_only) o.data.eval_every = 0;  // it evaluates nothing either
  return o;
}

}  // namespace tally::train
