// A modelled GPU cluster: what a GPU computes in a second (a roofline over each matmul's
// size and the memory-bound passes' bytes) and the links between GPUs (α-β, one way,
// with an achieved share). The planner (lab/plan/plan.h) and the replay of a run's timeline
// (lab/report/replay.h) time work on the same GpuModel, so that they agree.
//
//   ClusterPreset a100 = LoadCluster("a100").value();
//   a100.gpu.Seconds(work);   // a ComputeWork's seconds (core/runtime/timeline.h)
//
// Presets (the figures a public datasheet gives, and the shares achieved, which are this
// model's assumptions, stated in the README's "Time" section):
//   a100  8 A100 SXM4 80 GB a node: 312 TFLOP/s dense bf16, HBM2e 2,039 GB/s, 80 GB;
//         NVLink 3: 300 GB/s each way + 1 us; one HDR InfiniBand NIC (200 Gb/s) per GPU:
//         25 GB/s each way + 2 us
//   h100  8 H100 SXM5 80 GB a node: 989 TFLOP/s dense bf16, HBM3 3,350 GB/s, 80 GB;
//         NVLink 4: 450 GB/s each way + 1 us; one NDR NIC (400 Gb/s) per GPU: 50 GB/s + 2 us
// or a JSON file:
//   {"gpus_per_node": 8, "peak_tflops": 312, "hbm": [2039, 0.9], "memory_gb": 80,
//    "matmul_efficiency": [[0.01, 0.1], [1, 0.6], [100, 0.75]],
//    "intra": [300, 1, 0.8], "inter": [25, 2, 0.9]}
// (links as [GB/s one way, us a message, achieved share (optional, default 1)]; the
// efficiency curve as [GFLOP of one matmul call, share of the peak] with sizes
// increasing and shares in (0, 1]; "hbm" as [GB/s, achieved share]; "memory_gb", a GPU's
// memory in GB of 1e9 bytes, optional: without it nothing is said to fit or not), or with a flat rate
// instead of the roofline: {"gpus_per_node": 8, "tflops": 156, "intra": ..., "inter": ...}.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "core/runtime/comm/nodes.h"
#include "core/runtime/timeline.h"

namespace tally::train {

// How long a GPU takes for a ComputeWork:
//   a matmul call of F FLOPs and B bytes   max(F / (peak · e(F)), B / (hbm · share))
//   the memory-bound passes' bytes         bytes / (hbm · share)
// where e(F) is the efficiency curve, linear in log(F) between its points and flat
// beyond its ends (no curve: 1). A GPU without HBM figures (hbm_gbps 0) takes no time for
// bytes: the flat rate of a cluster file with "tflops".
struct GpuModel {
  double peak_tflops = 0;  // 0: no compute time at all
  std::vector<std::pair<double, double>> matmul_efficiency;  // (GFLOP a call, share)
  double hbm_gbps = 0, hbm_efficiency = 1;
  double memory_gb = 0;  // a GPU's memory, GB (1e9 bytes); 0: not known

  static GpuModel Flat(double tflops) {
    GpuModel g;
    g.peak_tflops = tflops;
    return g;
  }
  bool given() const { return peak_tflops > 0; }
  // e(F): the share of the peak a matmul call of `flops` achieves.
  double Efficiency(double flops) const;
  double MatmulSeconds(const MatmulCalls& m) const;
  double Seconds(const ComputeWork& work) const;
  // "312 TFLOP/s peak, matmuls at 2-62% by size; HBM 2039 GB/s × 0.9", or "156 TFLOP/s".
  std::string Describe() const;
  // With memory_gb: "fits the 80 GB of a GPU of a100 (57%)" or "does NOT fit the 80 GB of
  // a GPU of a100 (141%)" for `bytes` held at the peak; empty without it.
  std::string Fits(double bytes, const std::string& cluster) const;
  bool Holds(double bytes) const { return memory_gb <= 0 || bytes <= memory_gb * 1e9; }
};

struct ClusterPreset {
  std::string name;
  int gpus_per_node = 8;
  GpuModel gpu;
  comm::Cluster links;
};
// a100, h100, or a JSON file (above); a bad file gets one line naming what is wrong.
absl::StatusOr<ClusterPreset> LoadCluster(const std::string& name_or_file);

}  // namespace tally::train
