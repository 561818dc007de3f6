// The modelled GPU (cluster.h): the roofline's efficiency curve and seconds, the presets'
// figures, and cluster files (bad ones: tests/e2e/bad_input_test.cc).
#include "core/train/cluster.h"

#include <cmath>
#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "core/runtime/kernels/work.h"

namespace tally::train {
namespace {

GpuModel Roofline() {
  GpuModel g;
  g.peak_tflops = 100;
  g.matmul_efficiency = {{0.1, 0.2}, {10, 0.8}};
  g.hbm_gbps = 1000;
  g.hbm_efficiency = 0.5;
  return g;
}

TEST(GpuModel, EfficiencyIsLinearInTheLogOfTheSizeAndFlatBeyondTheEnds) {
  const GpuModel g = Roofline();
  EXPECT_DOUBLE_EQ(g.Efficiency(1e6), 0.2);    // below the first point
  EXPECT_DOUBLE_EQ(g.Efficiency(0.1e9), 0.2);
  EXPECT_DOUBLE_EQ(g.Efficiency(1e9), 0.5);    // halfway in log between 0.1 and 10 GFLOP
  EXPECT_DOUBLE_EQ(g.Efficiency(10e9), 0.8);
  EXPECT_DOUBLE_EQ(g.Efficiency(1e15), 0.8);   // beyond the last
  EXPECT_DOUBLE_EQ(GpuModel::Flat(5).Efficiency(1), 1);
}

TEST(GpuModel, AMatmulTakesTheLongerOfItsComputeAndItsBytesAndPassesTheirBytes) {
  const GpuModel g = Roofline();
  // 10 GFLOP at 80% of 100 TFLOP/s: 125 us; its 1 MB at 500 GB/s: 2 us.
  EXPECT_DOUBLE_EQ(g.MatmulSeconds({10e9, 1e6, 3}), 3 * 10e9 / 80e12);
  // 0.1 GFLOP whose 100 MB take 200 us, longer than its 5 us of compute.
  EXPECT_DOUBLE_EQ(g.MatmulSeconds({0.1e9, 100e6, 1}), 100e6 / 500e9);
  ComputeWork w;
  w.AddMatmuls(10e9, 1e6, 2);
  w.AddMatmuls(10e9, 1e6, 1);  // the same size: one entry of 3 calls
  w.memory_bytes = 50e6;
  ASSERT_EQ(w.matmuls.size(), 1u);
  EXPECT_EQ(w.matmuls[0].calls, 3);
  EXPECT_DOUBLE_EQ(w.flops, 30e9);
  EXPECT_DOUBLE_EQ(g.Seconds(w), 3 * 10e9 / 80e12 + 50e6 / 500e9);
  // A flat rate times FLOPs alone; no GPU, nothing.
  EXPECT_DOUBLE_EQ(GpuModel::Flat(10).Seconds(w), 30e9 / 10e12);
  EXPECT_EQ(GpuModel{}.Seconds(w), 0);
}

TEST(GpuModel, KernelsCountTheirWorkByTheFormulas) {
  Timeline t;
  t.set_recording(true);
  {
    ScopedTimeline scope(&t);
    CountLinearForward(8, 16, 32);        // one 8×16 by 16×32 matmul
    CountLinearBackward(8, 16, 32);       // two of the same size
    CountAttentionForward(2, 4, 6, 3);    // 2 calls of 6 products of 4×2 by 2×4
    CountLayerNormForward(8, 16);         // 256 elements
  }
  ASSERT_EQ(t.entries().size(), 1u);  // consecutive kernels: one compute entry
  const ComputeWork& w = t.entries()[0].compute;
  ASSERT_EQ(w.matmuls.size(), 2u);
  EXPECT_EQ(w.matmuls[0].flops, 2.0 * 8 * 16 * 32);
  EXPECT_EQ(w.matmuls[0].bytes, 2.0 * (8 * 16 + 16 * 32 + 8 * 32));
  EXPECT_EQ(w.matmuls[0].calls, 3);
  EXPECT_EQ(w.matmuls[1].flops, 2.0 * 4 * 4 * 2 * 6);
  EXPECT_EQ(w.matmuls[1].calls, 2);
  EXPECT_EQ(w.flops, 3 * 2.0 * 8 * 16 * 32 + 4.0 * 2 * 4 * 4 * 6);
  EXPECT_EQ(w.memory_bytes, kActivationBytes * (2.0 * 2 * 3 * 4 * 4 + 2.0 * 8 * 16));
}

TEST(ClusterPresets, AreTheDatasheetsFigures) {
  const ClusterPreset a100 = LoadCluster("a100").value();
  EXPECT_EQ(a100.gpus_per_node, 8);
  EXPECT_EQ(a100.gpu.peak_tflops, 312);
  EXPECT_EQ(a100.gpu.hbm_gbps, 2039);
  EXPECT_EQ(a100.links.intra.gbps, 300);  // NVLink 3: 600 GB/s both ways together
  EXPECT_EQ(a100.links.inter.gbps, 25);   // 200 Gb/s HDR
  const ClusterPreset h100 = LoadCluster("h100").value();
  EXPECT_EQ(h100.gpu.peak_tflops, 989);
  EXPECT_EQ(h100.links.intra.gbps, 450);
  EXPECT_EQ(h100.links.inter.gbps, 50);
  // 80 GB GPUs, so that a rank is said to fit or not.
  EXPECT_EQ(a100.gpu.memory_gb, 80);
  EXPECT_EQ(h100.gpu.memory_gb, 80);
  EXPECT_TRUE(a100.gpu.Holds(80e9));
  EXPECT_FALSE(a100.gpu.Holds(80e9 + 1));
  EXPECT_EQ(a100.gpu.Fits(40e9, "a100"), "fits the 80 GB of a GPU of a100 (50%)");
  EXPECT_EQ(a100.gpu.Fits(113e9, "a100"), "does NOT fit the 80 GB of a GPU of a100 (141%)");
  EXPECT_EQ(GpuModel{}.Fits(1e12, "x"), "");  // memory unknown: nothing said
  EXPECT_TRUE(GpuModel{}.Holds(1e30));
  // The efficiency curve rises with size.
  for (size_t i = 1; i < a100.gpu.matmul_efficiency.size(); ++i) {
    EXPECT_GT(a100.gpu.matmul_efficiency[i].second, a100.gpu.matmul_efficiency[i - 1].second);
  }
}

TEST(ClusterFiles, GiveARooflineOrAFlatRate) {
  const std::string path = ::testing::TempDir() + "/cluster.json";
  std::ofstream(path) << R"({"gpus_per_node": 4, "tflops": 100, "intra": [300, 1.5], "inter": [12.5, 3]})";
  const ClusterPreset flat = LoadCluster(path).value();
  EXPECT_EQ(flat.gpus_per_node, 4);
  EXPECT_EQ(flat.gpu.memory_gb, 0);  // not given: unknown
  EXPECT_EQ(flat.gpu.peak_tflops, 100);
  EXPECT_TRUE(flat.gpu.matmul_efficiency.empty());
  EXPECT_EQ(flat.links.intra.latency_us, 1.5);
  EXPECT_EQ(flat.links.intra.efficiency, 1);
  std::ofstream(path) << R"({"gpus_per_node": 8, "peak_tflops": 312, "hbm": [2039, 0.9],
      "matmul_efficiency": [[0.1, 0.3], [10, 0.6]], "intra": [300, 1, 0.8], "inter": [25, 2]})";
  const ClusterPreset roofline = LoadCluster(path).value();
  EXPECT_EQ(roofline.gpu.matmul_efficiency.size(), 2u);
  EXPECT_EQ(roofline.gpu.hbm_efficiency, 0.9);
  EXPECT_EQ(roofline.links.intra.efficiency, 0.8);
  // 1 GB one way over 300 GB/s at 80%, and one α.
  EXPECT_DOUBLE_EQ(roofline.links.intra.Seconds(1'000'000'000, 1), 1e-6 + 1.0 / 240);
  std::ofstream(path) << R"({"gpus_per_node": 4, "tflops": -1, "intra": [300, 1], "inter": [12, 3]})";
  EXPECT_TRUE(absl::StrContains(LoadCluster(path).status().message(), "tflops must be a number in [0.001, 1e+06]"));
  EXPECT_FALSE(LoadCluster("/no/such/cluster.json").ok());
  std::ofstream(path) << R"({"gpus_per_node": 4, "tflops": 100, "memory_gb": 24, "intra": [300, 1], "inter": [12, 3]})";
  EXPECT_EQ(LoadCluster(path).value().gpu.memory_gb, 24);
  for (const char* memory : {"0", "-80", "1e7", "\"80\""}) {
    std::ofstream(path) << R"({"gpus_per_node": 4, "tflops": 100, "memory_gb": )" << memory
                        << R"(, "intra": [300, 1], "inter": [12, 3]})";
    EXPECT_TRUE(absl::StrContains(LoadCluster(path).status().message(), "memory_gb must be a number in [0.001, 1e6]"))
        << memory;
  }
}

}  // namespace
}  // namespace tally::train
