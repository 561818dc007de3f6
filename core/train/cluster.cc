#include "core/train/cluster.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/runtime/files.h"
#include "core/runtime/json_reader.h"

namespace tally::train {

double GpuModel::Efficiency(double flops) const {
  const auto& curve = matmul_efficiency;
  if (curve.empty()) return 1;
  const double gflop = flops / 1e9;
  if (gflop <= curve.front().first) return curve.front().second;
  if (gflop >= curve.back().first) return curve.back().second;
  size_t i = 1;
  while (curve[i].first < gflop) ++i;
  const auto [x0, e0] = curve[i - 1];
  const auto [x1, e1] = curve[i];
  const double f = (std::log(gflop) - std::log(x0)) / (std::log(x1) - std::log(x0));
  return e0 + f * (e1 - e0);
}

double GpuModel::MatmulSeconds(const MatmulCalls& m) const {
  if (!given()) return 0;
  double each = m.flops / (peak_tflops * 1e12 * Efficiency(m.flops));
  if (hbm_gbps > 0) each = std::max(each, m.bytes / (hbm_gbps * hbm_efficiency * 1e9));
  return each * double(m.calls);
}

double GpuModel::Seconds(const ComputeWork& work) const {
  if (!given()) return 0;
  double s = hbm_gbps > 0 ? work.memory_bytes / (hbm_gbps * hbm_efficiency * 1e9) : 0;
  for (const MatmulCalls& m : work.matmuls) s += MatmulSeconds(m);
  return s;
}

std::string GpuModel::Describe() const {
  if (matmul_efficiency.empty() && hbm_gbps <= 0) return absl::StrFormat("%g TFLOP/s", peak_tflops);
  std::string s = absl::StrFormat("%g TFLOP/s peak", peak_tflops);
  if (!matmul_efficiency.empty()) {
    absl::StrAppendFormat(&s, ", matmuls at %.0f-%.0f%% by size",
                          100 * matmul_efficiency.front().second,
                          100 * matmul_efficiency.back().second);
  }
  if (hbm_gbps > 0) absl::StrAppendFormat(&s, "; HBM %g GB/s × %g", hbm_gbps, hbm_efficiency);
  return s;
}

std::string GpuModel::Fits(double bytes, const std::string& cluster) const {
  if (memory_gb <= 0) return "";
  return absl::StrFormat("%s the %g GB of a GPU of %s (%.0f%%)", Holds(bytes) ? "fits" : "does NOT fit",
                         memory_gb, cluster, 100 * bytes / (memory_gb * 1e9));
}

namespace {

// The presets' matmul efficiency: a call's share of the peak by its size (GFLOP), rising
// as the call fills the GPU's waves of tiles and flat from 10 GFLOP on (an assumption:
// see the README's "Time").
const std::vector<std::pair<double, double>> kMatmulEfficiency = {
    {0.001, 0.02}, {0.01, 0.1}, {0.1, 0.35}, {1, 0.55}, {10, 0.62}};

ClusterPreset A100() {
  ClusterPreset c{"a100", 8, {312, kMatmulEfficiency, 2039, 0.9, 80}, {}};
  c.links.intra = {300, 1, 0.8};
  c.links.inter = {25, 2, 0.9};
  return c;
}

ClusterPreset H100() {
  ClusterPreset c{"h100", 8, {989, kMatmulEfficiency, 3350, 0.9, 80}, {}};
  c.links.intra = {450, 1, 0.8};
  c.links.inter = {50, 2, 0.9};
  return c;
}

bool Finite(const JsonValue& v) { return v.is_number() && std::isfinite(v.number); }

// A cluster's figures in physical ranges, so that no modelled time is inf or 0: TFLOP/s
// and HBM GB/s in [1e-3, 1e6], matmul sizes in [1e-9, 1e9] GFLOP, every share in
// [1e-3, 1] (the links' ranges are LinkModel's).
constexpr double kMinRate = 1e-3, kMaxRate = 1e6, kMinGflop = 1e-9, kMaxGflop = 1e9, kMinShare = 1e-3;
bool In(const JsonValue& v, double lo, double hi) { return Finite(v) && v.number >= lo && v.number <= hi; }

// A roofline GPU's matmul curve and HBM figures, into `gpu`: what is wrong with them,
// or "".
std::string ReadRoofline(const JsonValue* curve, const JsonValue* hbm, GpuModel& gpu) {
  if (curve == nullptr || curve->array.empty()) {
    return "matmul_efficiency must be a list of [GFLOP in [1e-9, 1e9], share in [0.001, 1]]";
  }
  for (const JsonValue& point : curve->array) {
    if (point.array.size() != 2 || !In(point.array[0], kMinGflop, kMaxGflop) ||
        !In(point.array[1], kMinShare, 1)) {
      return "matmul_efficiency must be a list of [GFLOP in [1e-9, 1e9], share in [0.001, 1]]";
    }
    if (!gpu.matmul_efficiency.empty() &&
        !(point.array[0].number > gpu.matmul_efficiency.back().first)) {
      return "matmul_efficiency's sizes must increase";
    }
    gpu.matmul_efficiency.push_back({point.array[0].number, point.array[1].number});
  }
  if (hbm == nullptr || hbm->array.size() != 2 || !In(hbm->array[0], kMinRate, kMaxRate) ||
      !In(hbm->array[1], kMinShare, 1)) {
    return "hbm must be [GB/s in [0.001, 1e6], share in [0.001, 1]]";
  }
  gpu.hbm_gbps = hbm->array[0].number;
  gpu.hbm_efficiency = hbm->array[1].number;
  return "";
}

// The intra- and inter-node links, into `links`: what is wrong with them, or "".
std::string ReadLinks(const JsonValue& doc, comm::Cluster& links) {
  for (auto [key, link] : {std::pair{"intra", &links.intra}, {"inter", &links.inter}}) {
    const JsonValue* v = doc.Find(key);
    const size_t n = v == nullptr ? 0 : v->array.size();
    bool ok = n == 2 || n == 3;
    for (size_t i = 0; ok && i < n; ++i) ok = Finite(v->array[i]) && v->array[i].number > 0;
    if (ok) *link = {v->array[0].number, v->array[1].number, n == 3 ? v->array[2].number : 1};
    if (!ok || !link->Physical()) {
      return absl::StrCat(
          key, " must be [GB/s, microseconds] or [GB/s, microseconds, share]: ", "GB/s in [",
          comm::LinkModel::kMinGbps, ", ", comm::LinkModel::kMaxGbps, "], microseconds in (0, ",
          comm::LinkModel::kMaxLatencyUs, "], share in [", comm::LinkModel::kMinEfficiency, ", 1]");
    }
  }
  return "";
}

}  // namespace

absl::StatusOr<ClusterPreset> LoadCluster(const std::string& name_or_file) {
  if (name_or_file == "a100") return A100();
  if (name_or_file == "h100") return H100();
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat(
        "[flags] --cluster must be a100, h100 or a JSON file {\"gpus_per_node\": 8, "
        "\"peak_tflops\": 312, \"hbm\": [2039, 0.9], \"matmul_efficiency\": [[0.01, 0.1], [10, "
        "0.72]], \"intra\": [300, 1, 0.8], \"inter\": [25, 2, 0.9]} (or \"tflops\": 156 for a "
        "flat rate); '", name_or_file, "': ", why));
  };
  if (absl::Status s = CheckInputFile(name_or_file, "the file", int64_t(1) << 20).status(); !s.ok()) {
    return bad(std::string(s.message()));
  }
  std::ifstream file(name_or_file);
  const std::string text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  absl::StatusOr<JsonValue> doc = ParseJson(text);
  if (!doc.ok()) return bad(std::string(doc.status().message()));
  ClusterPreset c;
  c.name = name_or_file;
  const JsonValue* gpus = doc->Find("gpus_per_node");
  if (gpus == nullptr || !gpus->is_integer() || gpus->number < 1 || gpus->number > 1 << 20) {
    return bad("gpus_per_node must be an integer in [1, 2^20]");
  }
  c.gpus_per_node = int(gpus->AsInt());
  const JsonValue* tflops = doc->Find("tflops");
  const JsonValue* peak = doc->Find("peak_tflops");
  if ((tflops == nullptr) == (peak == nullptr)) {
    return bad("give one of tflops (a flat rate) and peak_tflops (the roofline)");
  }
  const JsonValue* rate = tflops != nullptr ? tflops : peak;
  if (!In(*rate, kMinRate, kMaxRate)) {
    return bad(absl::StrCat(tflops != nullptr ? "tflops" : "peak_tflops", " must be a number in [",
                            kMinRate, ", ", kMaxRate, "]"));
  }
  c.gpu.peak_tflops = rate->number;
  const JsonValue* curve = doc->Find("matmul_efficiency");
  const JsonValue* hbm = doc->Find("hbm");
  if (tflops != nullptr && (curve != nullptr || hbm != nullptr)) {
    return bad("a flat tflops takes no matmul_efficiency or hbm (give peak_tflops)");
  }
  if (peak != nullptr) {
    if (std::string why = ReadRoofline(curve, hbm, c.gpu); !why.empty()) return bad(why);
  }
  if (const JsonValue* memory = doc->Find("memory_gb"); memory != nullptr) {
    if (!In(*memory, kMinRate, kMaxRate)) return bad("memory_gb must be a number in [0.001, 1e6]");
    c.gpu.memory_gb = memory->number;
  }
  if (std::string why = ReadLinks(*doc, c.links); !why.empty()) return bad(why);
  return c;
}

}  // namespace tally::train
