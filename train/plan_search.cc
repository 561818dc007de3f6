// The planner on a cluster (plan.h): the cluster presets and files, one step's predicted
// time, and the search over every grid of a world of GPUs.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "runtime/files.h"
#include "runtime/json_reader.h"
#include "runtime/status_macros.h"
#include "train/plan.h"

namespace tally::train {

absl::StatusOr<ClusterPreset> LoadCluster(const std::string& name_or_file) {
  if (name_or_file == "a100") return ClusterPreset{"a100", 8, 156, {{600, 1}, {25, 2}}};
  if (name_or_file == "h100") return ClusterPreset{"h100", 8, 495, {{900, 1}, {50, 2}}};
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat(
        "[flags] --cluster must be a100, h100 or a JSON file {\"gpus_per_node\": 8, \"tflops\": "
        "156, \"intra\": [600, 1], \"inter\": [25, 2]}; '", name_or_file, "': ", why));
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
  const JsonValue* tflops = doc->Find("tflops");
  if (gpus == nullptr || !gpus->is_integer() || gpus->number < 1 || gpus->number > 1 << 20) {
    return bad("gpus_per_node must be an integer in [1, 2^20]");
  }
  if (tflops == nullptr || !tflops->is_number() || !(tflops->number > 0) ||
      !std::isfinite(tflops->number)) {
    return bad("tflops must be a number > 0");
  }
  c.gpus_per_node = int(gpus->AsInt());
  c.tflops = tflops->number;
  for (auto [key, link] : {std::pair{"intra", &c.links.intra}, {"inter", &c.links.inter}}) {
    const JsonValue* v = doc->Find(key);
    if (v == nullptr || v->array.size() != 2 || !v->array[0].is_number() ||
        !v->array[1].is_number() || !(v->array[0].number > 0) || !(v->array[1].number > 0) ||
        !std::isfinite(v->array[0].number) || !std::isfinite(v->array[1].number)) {
      return bad(absl::StrCat(key, " must be [GB/s > 0, microseconds > 0]"));
    }
    *link = {v->array[0].number, v->array[1].number};
  }
  return c;
}

StepTime PredictStep(const PlanInput& in) {
  StepTime t;
  const double tokens = double(in.batch) * in.seq_len;  // a dp rank's, per step
  double flops_per_token = 0;
  if (in.model.gpt) {
    model::GPTConfig config = in.model.config;
    config.seq_len = in.seq_len;
    flops_per_token = config.FlopsPerToken();
  } else {
    flops_per_token = 6.0 * double(in.model.params) +
                      12.0 * in.model.layers * double(in.model.hidden) * in.seq_len;
  }
  if (in.tflops > 0) {
    const double passes = in.recompute && in.pp > 1 ? 4.0 / 3.0 : 1.0;  // 6 FLOPs a weight, 8
    const double again = in.recompute_attention ? 4.0 * in.model.layers * double(in.model.hidden) * in.seq_len : 0;
    t.compute_s = (passes * flops_per_token + again) * tokens / (double(in.tp) * in.pp) /
                  (in.tflops * 1e12);
  }
  t.bubble = PlanActivationsPerGpu(in).bubble;
  const std::string dp_row = in.zero > 0 ? absl::StrCat("zero-", in.zero) : "dp all-reduce";
  for (const PlanRow& row : Plan(in)) {
    const bool in_effect = row.strategy.rfind("dp all-reduce", 0) == 0 || row.strategy.rfind("zero-", 0) == 0
                               ? row.strategy == dp_row
                               : true;
    if (!in_effect) continue;
    t.comm_s += row.time_s;
    t.comm_rows.push_back({row.strategy, row.time_s});
  }
  t.step_s = t.compute_s / (1 - t.bubble) + t.comm_s;
  t.model_flops = MegatronStepFlops(in);
  if (t.step_s > 0) {
    t.tflops_per_gpu = t.model_flops / t.step_s / (double(in.dp) * in.tp * in.pp) / 1e12;
  }
  return t;
}

double MegatronStepFlops(const PlanInput& in) {
  const double B = double(in.batch) * in.dp, s = in.seq_len, l = in.model.layers;
  const double h = in.model.hidden, V = in.model.gpt ? in.model.config.vocab_size : 0;
  const double attention_again = in.recompute_attention ? 4 * B * s * s * l * h : 0;
  return attention_again + (in.recompute ? 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))
                                         : 72 * B * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h)));
}

std::vector<SearchResult> SearchGrids(const PlanInput& base, int world, int global_batch,
                                      double gpu_bytes) {
  auto divides = [](int64_t d, int64_t n) { return d > 0 && n % d == 0; };
  // The grids, one axis at a time: each grid so far becomes its variants along the next.
  std::vector<PlanInput> grids = {base};
  auto expand = [&grids](auto variants) {
    std::vector<PlanInput> next;
    for (const PlanInput& grid : grids) {
      for (const PlanInput& v : variants(grid)) next.push_back(v);
    }
    grids = std::move(next);
  };
  expand([&](PlanInput g) {  // tp: dividing the heads and the hidden size, within a node
    std::vector<PlanInput> v;
    for (g.tp = 1; g.tp <= world; ++g.tp) {
      if (!divides(g.tp, world) || !divides(g.tp, base.model.hidden)) continue;
      if (base.model.gpt && !divides(g.tp, base.model.config.n_head)) continue;
      if (base.gpus_per_node > 0 && g.tp > base.gpus_per_node) continue;
      g.sequence_parallel = base.sequence_parallel && g.tp > 1 && g.seq_len % g.tp == 0;
      v.push_back(g);
    }
    return v;
  });
  expand([&](PlanInput g) {  // pp, and dp the rest, splitting the global batch
    std::vector<PlanInput> v;
    for (g.pp = 1; g.pp <= world / g.tp && g.pp <= base.model.layers; ++g.pp) {
      g.dp = world / (g.tp * g.pp);
      if (!divides(g.pp, world / g.tp) || !divides(g.dp, global_batch)) continue;
      g.batch = global_batch / g.dp;
      g.virtual_stages = 1;
      v.push_back(g);
    }
    return v;
  });
  expand([&](PlanInput g) {  // micro-batches
    std::vector<PlanInput> v;
    for (g.micro_batches = 1; g.micro_batches <= std::min(g.batch, 64); ++g.micro_batches) {
      if (divides(g.micro_batches, g.batch)) v.push_back(g);
    }
    return v;
  });
  expand([&](PlanInput g) {  // ZeRO, over more than one rank
    std::vector<PlanInput> v;
    for (g.zero = 0; g.zero <= (g.dp > 1 ? 3 : 0); ++g.zero) v.push_back(g);
    return v;
  });
  expand([&](PlanInput g) {  // recompute: none, selective, or full on a pipeline
    std::vector<PlanInput> v = {g};
    g.recompute_attention = true;
    v.push_back(g);
    if (g.pp > 1) {
      g.recompute_attention = false;
      g.recompute = true;
      v.push_back(g);
    }
    return v;
  });
  expand([&](PlanInput g) {  // ep: dividing dp and E (1: each rank holds every expert)
    std::vector<PlanInput> v;
    for (g.ep = 1; g.ep <= g.dp; ++g.ep) {
      const bool experts_split = base.n_experts > 0 && divides(g.ep, base.n_experts);
      if (divides(g.ep, g.dp) && (g.ep == 1 || experts_split)) v.push_back(g);
    }
    return v;
  });
  const size_t precision_line = base.precision == DType::kF32 ? 0 : base.fp32_grad_accum ? 2 : 1;
  std::vector<SearchResult> out;
  for (const PlanInput& in : grids) {
    const double memory = PlanMemoryPerGpu(in)[precision_line].bytes_per_gpu +
                          double(std::max<int64_t>(0, PlanActivationsPerGpu(in).bytes_per_gpu));
    if (memory <= gpu_bytes) out.push_back({in, PredictStep(in), memory});
  }
  std::stable_sort(out.begin(), out.end(), [](const SearchResult& a, const SearchResult& b) {
    return a.time.step_s < b.time.step_s;
  });
  return out;
}

}  // namespace tally::train
