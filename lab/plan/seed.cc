// The seed article's numeric examples by the planner (plan.h's SeedExamples), and the
// byte units every table prints.
#include "lab/plan/plan.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tally::plan {

using comm::Algorithm;

// Long, and kept whole: a table, one entry for each of the seed's worked examples.
std::vector<SeedExample> SeedExamples() {
  const double GB = 1e9, MiB = double(1 << 20), GiB = double(1 << 30);
  // Each figure is the planner's own, for the example's parameters: LLaMA-7B in fp16
  // (e = 2), b = 4, s = 2048; the 70B layout at s = 4096.
  auto plan = [](const char* model, int dp, int tp, int pp, int batch, int seq_len,
                 Algorithm allreduce = Algorithm::kRing) {
    PlanInput in{ModelPreset(model).value()};
    in.dp = dp;
    in.tp = tp;
    in.pp = pp;
    in.batch = batch;
    in.seq_len = seq_len;
    in.allreduce = allreduce;
    return in;
  };
  auto row = [](const PlanInput& in, const std::string& strategy) {
    for (const PlanRow& r : Plan(in)) {
      if (r.strategy == strategy) return r;
    }
    return PlanRow{};
  };
  auto states = [](PlanInput in, int zero) {  // the bf16 line: 2 + 2 + 12
    in.zero = zero;
    return PlanMemoryPerGpu(in)[1].bytes_per_gpu;
  };
  const PlanInput naive = plan("llama-7b", 4, 1, 1, 4, 2048, Algorithm::kNaive);
  const PlanInput ring = plan("llama-7b", 4, 1, 1, 4, 2048);
  const PlanInput tp = plan("llama-7b", 1, 2, 1, 4, 2048);
  const PlanInput pp = plan("llama-7b", 1, 1, 4, 4, 2048);
  const PlanInput one = plan("llama-7b", 1, 1, 1, 4, 2048);
  const PlanInput eight = plan("llama-7b", 8, 1, 1, 4, 2048);
  const PlanInput big = plan("llama-70b", 8, 8, 2, 4, 4096);
  const PlanInput big_b8 = plan("llama-70b", 8, 8, 2, 8, 4096);
  const int layers70 = big.model.layers / big.pp;
  // The seed's tp figure per layer: the tp row's seed column over the stage's layers.
  const double tp_layer = row(tp, "tp (layers of a stage)").seed_bytes_per_gpu / tp.model.layers;
  const PlanRow naive_dp = row(naive, "dp all-reduce");
  std::vector<SeedExample> out;
  out.push_back({"LLaMA-7B naive all-reduce, 4 GPUs, all GPUs' bytes (2·N·Φ)", "112 GB", 112 * GB,
                 naive_dp.seed_bytes_per_gpu * naive.dp,
                 absl::StrCat("exact: ", Bytes(naive_dp.total_bytes),
                              ": the root's broadcast and the others' sends, 2(N-1)·Φ")});
  out.push_back({"LLaMA-7B ring all-reduce, 4 GPUs, per GPU (2(N-1)/N·Φ)", "21 GB", 21 * GB,
                 row(ring, "dp all-reduce").exact_bytes_per_gpu, ""});
  out.push_back({"TP, the FFN's all-reduces per layer (4bsh)", "256 MB", 256 * MiB, tp_layer / 2,
                 "the seed's MB is MiB here"});
  out.push_back({"TP per layer (8bsh)", "512 MB", 512 * MiB, tp_layer, ""});
  out.push_back({"TP, 32 layers", "16 GB", 16 * GiB, tp_layer * tp.model.layers, "GiB"});
  out.push_back({"PP, 4 stages (2(N-1)bsh)", "384 MB", 384 * MiB,
                 row(pp, "pp (boundaries)").seed_bytes_per_gpu, ""});
  out.push_back({"ZeRO-1/2 per GPU (2Φ)", "28 GB", 28 * GB, row(ring, "zero-1").seed_bytes_per_gpu, ""});
  out.push_back({"ZeRO-3 per GPU (3Φ)", "42 GB", 42 * GB, row(ring, "zero-3").seed_bytes_per_gpu,
                 "50% more than ZeRO-1/2"});
  out.push_back({"model states per GPU, no sharding (16Φ)", "112 GB", 112 * GB, states(one, 0), ""});
  out.push_back({"model states per GPU, ZeRO-3 over 8 GPUs", "14 GB", 14 * GB, states(eight, 3), ""});
  out.push_back({"70B on 128 GPUs (TP 8, PP 2, DP 8): DP per GPU 2Φe/(tp·pp)", "17.5 GB", 17.5 * GB,
                 row(big, "dp all-reduce").seed_bytes_per_gpu, ""});
  const double tp70 = row(big_b8, "tp (layers of a stage)").seed_bytes_per_gpu / layers70;
  out.push_back({"70B: TP per layer 8·b·s·h·e", "≈ 4 GB", 4 * GB, tp70,
                 absl::StrCat("matches with b = 8 (b = 4 gives ",
                              Bytes(row(big, "tp (layers of a stage)").seed_bytes_per_gpu / layers70),
                              ")")});
  out.push_back({"70B: PP 2(N-1)·b·s·h·e, N = 2", "≈ 0.5 GB", 0.5 * GB,
                 row(big, "pp (boundaries)").seed_bytes_per_gpu,
                 absl::StrCat("matches with b = 4 (b = 8 gives ",
                              Bytes(row(big_b8, "pp (boundaries)").seed_bytes_per_gpu),
                              "): the seed's TP and PP figures assume different batch sizes")});
  return out;
}

std::string Bytes(double bytes) {
  return absl::StrFormat("%.2f GB (%.2f GiB)", bytes / 1e9, bytes / double(1 << 30));
}

}  // namespace tally::plan
