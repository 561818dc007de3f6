// The planner on a cluster (plan.h): one step's predicted time, and the search over every
// grid of a world of GPUs.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>
#include <map>
#include <ostream>
#include <tuple>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/parallel/pipeline_schedule.h"
#include "lab/plan/plan.h"
#include "core/runtime/files.h"
#include "core/runtime/json_reader.h"
#include "core/runtime/status_macros.h"

namespace tally::plan {

StepTime PredictStep(const PlanInput& in) {
  StepTime t;
  // The busiest stage computes all of its m·v micro-batch chunks; the pipeline's fill and
  // drain add each other stage's time of one (m·v of them make its step's compute). For
  // equal stages: compute · (v·m + p − 1)/(v·m) = compute / (1 − bubble).
  const double chunks = double(std::max(1, in.micro_batches)) * std::max(1, in.virtual_stages);
  double stretched = 0;
  if (in.gpu.given()) {
    std::vector<double> stages;
    for (const ComputeWork& w : StageWork(in)) stages.push_back(in.gpu.Seconds(w));
    const double busiest = *std::max_element(stages.begin(), stages.end());
    double others = -busiest;
    for (double s : stages) others += s;
    t.compute_s = busiest;
    stretched = busiest + others / chunks;
  }
  t.bubble = PlanActivationsPerGpu(in).bubble;
  const std::string dp_row = in.zero > 0 ? absl::StrCat("zero-", in.zero) : "dp all-reduce";
  const std::vector<PlanRow> rows = Plan(in);
  double tp_layers_s = 0;
  for (const PlanRow& row : rows) tp_layers_s += row.strategy == "tp (layers of a stage)" ? row.time_s : 0;
  for (const PlanRow& row : rows) {
    const bool in_effect = row.strategy.rfind("dp all-reduce", 0) == 0 || row.strategy.rfind("zero-", 0) == 0
                               ? row.strategy == dp_row
                               : true;
    if (!in_effect) continue;
    // The fill and drain stretch the calls inside the micro-batches as they stretch
    // compute (every stage's alike).
    const double own = row.exposed_s >= 0 ? row.exposed_s : row.time_s;
    double s = own * (row.in_micro_batches ? 1 + (in.pp - 1) / chunks : 1);
    if (row.strategy == dp_row) {  // under --overlap, what stays exposed of it
      const double exposed = OverlappedDpSeconds(in, tp_layers_s);
      if (exposed >= 0) s = exposed;
    }
    t.comm_s += s;
    t.comm_rows.push_back({row.strategy, s});
  }
  t.fill_s = stretched - t.compute_s;
  t.step_s = stretched + t.comm_s;
  t.model_flops = MegatronStepFlops(in);
  if (t.step_s > 0) {
    t.tflops_per_gpu = t.model_flops / t.step_s / double(in.world()) / 1e12;
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

absl::StatusOr<std::vector<SearchResult>> SearchGrids(const PlanInput& base, int world,
                                                      int global_batch, double gpu_bytes,
                                                      std::ostream* progress) {
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
  expand([&](PlanInput g) {  // cp: up to base.cp, splitting the sequence as tally_train can
    std::vector<PlanInput> v;
    for (g.cp = 1; g.cp <= std::max(1, base.cp); ++g.cp) {
      if (!divides(g.cp, world / g.tp)) continue;
      const int heads = base.model.gpt ? base.model.config.n_head / g.tp : g.cp;
      if (g.cp > 1 && !parallel::CheckContextParallel(g.cp, g.seq_len, heads, g.cp_comm,
                                                      g.cp_load_balance)
                           .ok()) {
        continue;
      }
      v.push_back(g);
    }
    return v;
  });
  expand([&](PlanInput g) {  // pp, and dp the rest, splitting the global batch
    std::vector<PlanInput> v;
    const int rest = world / (g.tp * g.cp);
    for (g.pp = 1; g.pp <= rest && g.pp <= base.model.layers; ++g.pp) {
      g.dp = rest / g.pp;
      if (!divides(g.pp, rest) || !divides(g.dp, global_batch)) continue;
      g.batch = global_batch / g.dp;
      v.push_back(g);
    }
    return v;
  });
  expand([&](PlanInput g) {  // v: 1, or chunks of equal layers (the interleaved schedule)
    std::vector<PlanInput> v;
    for (g.virtual_stages = 1; g.virtual_stages * g.pp <= base.model.layers; ++g.virtual_stages) {
      const bool interleaved = g.virtual_stages > 1;
      if (interleaved && (g.pp == 1 || !divides(g.pp * g.virtual_stages, base.model.layers))) continue;
      v.push_back(g);
    }
    return v;
  });
  expand([&](PlanInput g) {  // micro-batches (interleaved: in groups of pp)
    std::vector<PlanInput> v;
    for (g.micro_batches = 1; g.micro_batches <= std::min(g.batch, kSearchMicroBatches);
         ++g.micro_batches) {
      if (!divides(g.micro_batches, g.batch)) continue;
      if (g.virtual_stages > 1 && !divides(g.pp, g.micro_batches)) continue;
      v.push_back(g);
    }
    return v;
  });
  expand([&](PlanInput g) {  // ZeRO, over more than one rank
    std::vector<PlanInput> v;
    for (g.zero = 0; g.zero <= (g.dp > 1 ? 3 : 0); ++g.zero) v.push_back(g);
    return v;
  });
  expand([&](PlanInput g) {  // recompute: none, selective (not under cp), or full (on a
                             // pipeline, two ways)
    std::vector<PlanInput> v = {g};
    if (g.cp == 1) {
      g.recompute_attention = true;
      v.push_back(g);
      g.recompute_attention = false;
    }
    g.recompute = true;
    v.push_back(g);
    if (g.pp > 1) {
      g.recompute_layers = true;
      v.push_back(g);
    }
    return v;
  });
  expand([&](PlanInput g) {  // ep: dividing dp·cp and E (1: each rank holds every expert)
    std::vector<PlanInput> v;
    for (g.ep = 1; g.ep <= g.dp * g.cp; ++g.ep) {
      const bool experts_split = base.n_experts > 0 && divides(g.ep, base.n_experts);
      if (divides(g.ep, g.dp * g.cp) && (g.ep == 1 || experts_split)) v.push_back(g);
    }
    return v;
  });
  // What the memory of a grid depends on, computed once each: the model states by the
  // grid's shape and ZeRO stage, the activations by its shape, micro-batches and
  // recompute (not by ZeRO's stage).
  const size_t precision_line = base.precision == DType::kF32 ? 0 : base.fp32_grad_accum ? 2 : 1;
  using Shape = std::tuple<int, int, int, int, int>;  // tp, pp, v, ep, cp
  std::map<std::tuple<Shape, int>, double> states;
  std::map<std::tuple<Shape, int, int, bool, bool, bool>, double> activations;
  std::vector<SearchResult> out;
  for (const PlanInput& in : grids) {
    const Shape shape{in.tp, in.pp, in.virtual_stages, in.ep, in.cp};
    auto [s, new_states] = states.try_emplace({shape, in.zero}, 0.0);
    if (new_states) s->second = PlanMemoryLine(in, precision_line);
    if (s->second > gpu_bytes) continue;
    auto [a, new_activations] = activations.try_emplace(
        {shape, in.batch, in.micro_batches, in.recompute, in.recompute_layers,
         in.recompute_attention},
        0.0);
    if (new_activations) {
      a->second = double(std::max<int64_t>(0, PlanActivationsPerGpu(in).bytes_per_gpu));
    }
    const double memory = s->second + a->second;
    if (memory <= gpu_bytes) out.push_back({in, StepTime(), memory});
  }
  // The fitting grids are known before any is costed: refuse what would not answer soon.
  const double work = double(out.size()) * world;
  if (work > kMaxSearchWork) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "[flags] --search: %d grids of %d GPUs fit, %.3g grid-GPUs to cost (about %.0f s on a "
        "2-core host); it costs at most %.3g: ask for a smaller --world, --global_batch_size "
        "or --gpu_memory_gb",
        out.size(), world, work, work * 1.5e-6, kMaxSearchWork));
  }
  if (progress != nullptr && work > kSearchProgressWork) {
    *progress << absl::StrFormat("[plan] --search: costing %d grids of %d GPUs that fit (about %.0f s)\n",
                                 out.size(), world, work * 1.5e-6)
              << std::flush;
  }
  for (SearchResult& r : out) r.time = PredictStep(r.in);
  std::stable_sort(out.begin(), out.end(), [](const SearchResult& a, const SearchResult& b) {
    return a.time.step_s < b.time.step_s;
  });
  return out;
}

}  // namespace tally::plan
