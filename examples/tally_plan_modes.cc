// tally_plan's --sweep, --search and --explain (tally_plan_modes.h).
#include "examples/tally_plan_modes.h"

#include <cmath>
#include <cstdint>
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "examples/example_main.h"
#include "core/runtime/status_macros.h"
#include "core/train/cluster.h"

ABSL_DECLARE_FLAG(std::string, cluster);
ABSL_DECLARE_FLAG(bool, json);
ABSL_DECLARE_FLAG(int, world);
ABSL_DECLARE_FLAG(int, global_batch_size);
ABSL_DECLARE_FLAG(double, gpu_memory_gb);

namespace tally {

absl::Status Sweep(plan::PlanInput in, const std::string& spec) {
  std::vector<std::string> parts = absl::StrSplit(spec, ':');
  if (parts.size() != 2) return absl::InvalidArgumentError("[flags] --sweep wants dim:v1,v2,...");
  int* dim = parts[0] == "dp" ? &in.dp : parts[0] == "tp" ? &in.tp : parts[0] == "pp" ? &in.pp
             : parts[0] == "cp" ? &in.cp : parts[0] == "batch_size" ? &in.batch : nullptr;
  if (dim == nullptr) {
    return absl::InvalidArgumentError("[flags] --sweep: dim must be dp, tp, pp, cp or batch_size");
  }
  // Every value is checked before the first row is printed.
  std::vector<int> values;
  for (absl::string_view value : absl::StrSplit(parts[1], ',')) {
    if (!absl::SimpleAtoi(value, dim) || *dim < 1) {
      return absl::InvalidArgumentError(absl::StrCat("[flags] --sweep: bad value '", value, "'"));
    }
    RETURN_IF_ERROR(plan::CheckGrid(in));
    if (in.pp > in.model.layers) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "[flags] --sweep: pp %d is more stages than the %d layers", in.pp, in.model.layers));
    }
    if (in.batch % in.micro_batches != 0) {
      return absl::InvalidArgumentError("[flags] --sweep: batch_size must be a multiple of --micro_batches");
    }
    values.push_back(*dim);
  }
  std::cout << parts[0]
            << ",strategy,seed_bytes_per_gpu,exact_bytes_per_gpu,total_bytes,time_s,"
               "inter_bytes_per_gpu\n";
  for (int value : values) {
    *dim = value;
    for (const plan::PlanRow& r : plan::Plan(in)) {
      std::cout << absl::StrFormat("%d,%s,%.0f,%.0f,%.0f,%.6g,%.0f\n", value, r.strategy,
                                   r.seed_bytes_per_gpu, r.exact_bytes_per_gpu, r.total_bytes,
                                   r.time_s, r.inter_bytes_per_gpu);
    }
  }
  return absl::OkStatus();
}

absl::Status Search(const plan::PlanInput& base) {
  const int64_t world = absl::GetFlag(FLAGS_world) != 0 ? absl::GetFlag(FLAGS_world) : base.world();
  const int global = absl::GetFlag(FLAGS_global_batch_size) != 0
                         ? absl::GetFlag(FLAGS_global_batch_size)
                         : base.batch * base.dp;
  const double memory = absl::GetFlag(FLAGS_gpu_memory_gb);
  if (world < 1 || world > (1 << 16) || global < 1 || !(memory > 0) || !std::isfinite(memory)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "[flags] --search wants --world in [1, 65536] (0: dp x cp x tp x pp), --global_batch_size "
        ">= 1 (0: batch_size x dp) and --gpu_memory_gb > 0, got ",
        world, ", ", global, " and ", memory));
  }
  ASSIGN_OR_RETURN(const std::vector<plan::SearchResult> found,
                   plan::SearchGrids(base, int(world), global, memory * 1e9, &std::cerr));
  plan::PrintSearch(base, int(world), global, memory, found, absl::GetFlag(FLAGS_json), std::cout);
  return absl::OkStatus();
}

absl::Status Explain(plan::PlanInput base) {
  std::string cluster = absl::GetFlag(FLAGS_cluster);
  if (cluster.empty() && !FlagGiven("link_intra") && !FlagGiven("link_inter")) {
    cluster = "a100";
    ASSIGN_OR_RETURN(const train::ClusterPreset preset, train::LoadCluster(cluster));
    if (base.gpus_per_node == 0) base.gpus_per_node = preset.gpus_per_node;
    base.cluster = preset.links;
    base.gpu = preset.gpu;
  }
  const int64_t world = absl::GetFlag(FLAGS_world) != 0 ? absl::GetFlag(FLAGS_world) : base.world();
  if (world < 1 || world > (1 << 16)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "[flags] --explain wants --world in [1, 65536] (0: dp x cp x tp x pp), got ", world));
  }
  const int64_t global = absl::GetFlag(FLAGS_global_batch_size) != 0
                             ? absl::GetFlag(FLAGS_global_batch_size)
                             : int64_t(base.batch) * world;
  const double memory = FlagGiven("gpu_memory_gb") || base.gpu.memory_gb <= 0
                            ? absl::GetFlag(FLAGS_gpu_memory_gb)
                            : base.gpu.memory_gb;
  if (global < 1 || global > (1 << 30) || !(memory > 0) || !std::isfinite(memory)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "[flags] --explain wants --global_batch_size in [1, 2^30] (0: batch_size x world) and a "
        "finite --gpu_memory_gb > 0, got ", global, " and ", memory));
  }
  ASSIGN_OR_RETURN(const plan::Explanation e,
                   plan::Explain(base, int(world), int(global), memory * 1e9, cluster));
  plan::PrintExplanation(base, int(world), e, absl::GetFlag(FLAGS_json), std::cout);
  return absl::OkStatus();
}

}  // namespace tally
