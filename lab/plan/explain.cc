// --explain (plan.h): the seed's selection flow, its section 6.2, walked with the
// planner's numbers, then put beside --search's fastest grid.
#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "lab/plan/plan.h"
#include "core/runtime/json_writer.h"

namespace tally::plan {
namespace {

// What a GPU of a layout holds: its model states at the plan's precision and (tally's
// GPT) its activations.
struct Held {
  double states = 0, activations = 0;
  double total() const { return states + activations; }
};

// The flow's walk over one plan: the GPUs, the batch, the memory a GPU has.
class Flow {
 public:
  Flow(const PlanInput& base, int world, int global_batch, double gpu_bytes)
      : base_(base), world_(world), global_(global_batch), gpu_bytes_(gpu_bytes),
        line_(base.precision == DType::kF32 ? 0 : base.fp32_grad_accum ? 2 : 1) {}

  // `base` as dp × tp × pp (the rest of the GPUs data-parallel) with ZeRO `zero`, each
  // micro-batch one sequence; none where the GPUs, the layers or the heads do not divide.
  // Where the global batch does not split over the dp ranks, a dp rank takes the most
  // sequences one would (its memory), and `splits` is false.
  struct Grid {
    PlanInput in;
    bool splits = true;
  };
  std::optional<Grid> Layout(int tp, int pp, int zero) const {
    if (world_ % (tp * pp) != 0 || pp > base_.model.layers || base_.model.hidden % tp != 0) {
      return std::nullopt;
    }
    if (base_.model.gpt && base_.model.config.n_head % tp != 0) return std::nullopt;
    Grid grid;
    PlanInput& g = grid.in;
    g = base_;
    g.tp = tp;
    g.pp = pp;
    g.cp = 1;
    g.ep = 1;
    g.dp = world_ / (tp * pp);
    if (zero > 0 && g.dp == 1) return std::nullopt;
    g.zero = zero;
    grid.splits = global_ % g.dp == 0;
    g.batch = (global_ + g.dp - 1) / g.dp;
    g.micro_batches = g.batch;
    g.virtual_stages = 1;
    g.recompute = g.recompute_layers = g.recompute_attention = false;
    g.sequence_parallel = base_.sequence_parallel && tp > 1 && g.seq_len % tp == 0;
    return grid;
  }

  Held HeldBy(const PlanInput& g) const {
    Held h{.states = PlanMemoryLine(g, line_)};
    if (g.model.gpt) h.activations = double(std::max<int64_t>(0, PlanActivationsPerGpu(g).bytes_per_gpu));
    return h;
  }
  bool Fits(const PlanInput& g) const { return HeldBy(g).total() <= gpu_bytes_; }

  // "115.20 GB (model states 112.00 + activations 3.20)".
  std::string Describe(const PlanInput& g) const {
    const Held h = HeldBy(g);
    if (!g.model.gpt) return absl::StrFormat("%.2f GB of model states", h.states / 1e9);
    return absl::StrFormat("%.2f GB (model states %.2f + activations %.2f)", h.total() / 1e9,
                           h.states / 1e9, h.activations / 1e9);
  }
  std::string Against() const { return absl::StrFormat("%.0f GB", gpu_bytes_ / 1e9); }
  std::string Unsplit(int dp) const {
    return absl::StrCat(global_, " sequences do not split over ", dp, " dp ranks");
  }

  // The first layout of `tps` × `pps` (in that order, each with ZeRO 0 up to `most_zero`)
  // that fits and splits the batch, and what each one before it held at its last ZeRO.
  struct Found {
    std::optional<PlanInput> layout;
    std::vector<std::string> tried;  // "tp 8, pp 2: 92.10 GB with ZeRO-2"
  };
  Found FirstFit(const std::vector<int>& tps, const std::vector<int>& pps, int most_zero) const {
    Found found;
    for (int tp : tps) {
      for (int pp : pps) {
        std::string held;
        for (int zero = 0; zero <= most_zero; ++zero) {
          const std::optional<Grid> g = Layout(tp, pp, zero);
          if (!g) continue;
          const double bytes = HeldBy(g->in).total();
          if (bytes <= gpu_bytes_ && g->splits) {
            found.layout = g->in;
            return found;
          }
          held = absl::StrFormat("%.2f GB with ZeRO-%d", bytes / 1e9, zero);
          if (!g->splits) held = absl::StrCat(held, ", but ", Unsplit(g->in.dp));
        }
        if (!held.empty()) found.tried.push_back(absl::StrCat("tp ", tp, ", pp ", pp, ": ", held));
      }
    }
    return found;
  }

  const PlanInput& base() const { return base_; }
  int world() const { return world_; }
  double gpu_bytes() const { return gpu_bytes_; }
  size_t line() const { return line_; }
  // The GPUs of a node (all of them without nodes).
  int node() const { return base_.gpus_per_node > 0 ? base_.gpus_per_node : world_; }
  // 1, 2, ... up to `most`, those dividing the GPUs.
  std::vector<int> Divisors(int most) const {
    std::vector<int> d;
    for (int k = 1; k <= std::min(most, world_); ++k) {
      if (world_ % k == 0) d.push_back(k);
    }
    return d;
  }

 private:
  const PlanInput base_;
  const int world_, global_;
  const double gpu_bytes_;
  const size_t line_;  // PlanMemoryPerGpu's line of the plan's precision
};

std::string LayoutName(const PlanInput& g) {
  std::string s = absl::StrCat("dp ", g.dp, ", tp ", g.tp, ", pp ", g.pp);
  if (g.cp > 1) absl::StrAppend(&s, ", cp ", g.cp);
  if (g.virtual_stages > 1) absl::StrAppend(&s, " x ", g.virtual_stages, " chunks");
  absl::StrAppend(&s, ", ZeRO-", g.zero, ", ", g.micro_batches, " micro-batch",
                  g.micro_batches == 1 ? "" : "es");
  if (g.recompute || g.recompute_attention) {
    absl::StrAppend(&s, g.StageRecompute() ? ", stage recompute"
                        : g.recompute      ? ", layer recompute"
                                           : ", selective recompute");
  }
  return s;
}

// The values of the largest layer: a transformer block of tally's GPT (12h² + 13h), or
// Φ/L; the embedding where it is larger.
double LargestLayer(const PlanModel& m) {
  const double h = m.hidden;
  if (!m.gpt) return double(m.params) / m.layers;
  return std::max(12 * h * h + 13 * h, double(m.config.vocab_size) * h);
}

// The one line beside the search: where most of the step's predicted difference is. The
// rows of data parallelism (the all-reduce, a ZeRO stage's) count as one.
std::string WhyTheyDiffer(const StepTime& flow, const StepTime& fastest) {
  std::map<std::string, std::pair<double, double>> parts = {
      {"compute", {flow.compute_s, fastest.compute_s}},
      {"the pipeline's fill and drain", {flow.fill_s, fastest.fill_s}}};
  auto part = [](const std::string& row) {
    const bool dp = row.rfind("zero-", 0) == 0 || row.rfind("dp", 0) == 0 || row.rfind("hsdp", 0) == 0;
    return dp ? std::string("data parallelism's rows") : absl::StrCat("the ", row, " row");
  };
  for (const auto& [row, s] : flow.comm_rows) parts[part(row)].first += s;
  for (const auto& [row, s] : fastest.comm_rows) parts[part(row)].second += s;
  std::string most;
  double gap = -1;
  for (const auto& [what, s] : parts) {
    if (s.first - s.second > gap) {
      gap = s.first - s.second;
      most = absl::StrFormat("%s (%.4f s against %.4f s)", what, s.first, s.second);
    }
  }
  return absl::StrCat("most of the difference is ", most);
}

// The tally_train dry run of layout `g` (tally's GPT), at real scale.
std::string DryRunCommand(const PlanInput& g, const std::string& cluster) {
  const model::GPTConfig& c = g.model.config;
  std::string s = absl::StrCat(
      "tally_train --dry_run --steps=1 --n_layer=", c.n_layer, " --n_embd=", c.n_embd,
      " --n_head=", c.n_head, " --vocab_size=", c.vocab_size, " --seq_len=", g.seq_len,
      " --dp=", g.dp, " --tp=", g.tp, " --pp=", g.pp, " --zero=", g.zero,
      " --global_batch_size=", g.batch * g.dp, " --micro_batch_size=", g.batch / g.micro_batches);
  if (g.virtual_stages > 1) {
    absl::StrAppend(&s, " --schedule=interleaved --virtual_stages=", g.virtual_stages);
  }
  if (g.cp > 1) absl::StrAppend(&s, " --cp=", g.cp);
  if (g.sequence_parallel) absl::StrAppend(&s, " --sequence_parallel");
  if (g.recompute_attention) absl::StrAppend(&s, " --recompute_granularity=selective");
  if (g.recompute) {
    absl::StrAppend(&s, " --recompute", g.recompute_layers ? " --recompute_method=layer" : "");
  }
  if (g.precision == DType::kBF16) absl::StrAppend(&s, " --precision=bf16");
  if (g.fp32_grad_accum) absl::StrAppend(&s, " --fp32_grad_accum");
  if (g.gpus_per_node > 0) absl::StrAppend(&s, " --gpus_per_node=", g.gpus_per_node);
  if (!cluster.empty()) absl::StrAppend(&s, " --cluster=", cluster);
  return s;
}

}  // namespace

absl::StatusOr<Explanation> Explain(const PlanInput& base, int world, int global_batch,
                                    double gpu_bytes, const std::string& cluster, bool search) {
  if (world < 1 || global_batch < 1 || !(gpu_bytes > 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "[flags] --explain wants --world >= 1, --global_batch_size >= 1 and --gpu_memory_gb > 0, "
        "got ", world, ", ", global_batch, " and ", gpu_bytes / 1e9));
  }
  const Flow flow(base, world, global_batch, gpu_bytes);
  Explanation e;
  const PlanMemory bytes = PlanMemoryPerGpu(base)[flow.line()];
  const double per_value = bytes.params + bytes.grads + bytes.optimizer;
  std::optional<PlanInput> pick;

  // 1. Does the model fit one GPU (the whole model, one sequence)? Then data parallelism
  // over all of them.
  PlanInput one = base;
  one.dp = one.tp = one.pp = one.cp = one.ep = one.virtual_stages = 1;
  one.batch = one.micro_batches = 1;
  one.zero = 0;
  one.recompute = one.recompute_layers = one.recompute_attention = one.sequence_parallel = false;
  const bool fits_one = flow.Fits(one);
  const std::optional<Flow::Grid> plain = flow.Layout(1, 1, 0);
  std::string answer = "no";
  if (fits_one && plain->splits) {
    pick = plain->in;
    answer = absl::StrCat("yes: data parallelism over the ", world, " GPUs");
  } else if (fits_one) {
    answer = absl::StrCat("yes, but ", flow.Unsplit(world));
  }
  e.steps.push_back({1, "Does the model fit one GPU?",
                     absl::StrCat("the whole model holds ", flow.Describe(one), ", at ",
                                  bytes.label, " bytes a parameter and one sequence, against ",
                                  flow.Against()),
                     answer});

  // 2. Is it the optimizer's state that does not fit? Then ZeRO-1 or ZeRO-2 over all.
  if (!pick && world > 1) {
    std::string numbers = absl::StrFormat(
        "the optimizer's states are %d of the %.0f bytes a parameter (%.0f%%); sharded over the "
        "%d GPUs",
        bytes.optimizer, per_value, 100.0 * bytes.optimizer / per_value, world);
    answer = "no: neither fits";
    for (int zero : {1, 2}) {
      const Flow::Grid g = *flow.Layout(1, 1, zero);
      absl::StrAppend(&numbers, zero == 1 ? ", ZeRO-1 leaves " : ", ZeRO-2 ",
                      flow.Describe(g.in));
      if (answer.rfind("no", 0) == 0 && flow.Fits(g.in)) {
        answer = g.splits ? absl::StrCat("yes: ZeRO-", zero)
                          : absl::StrCat("yes, ZeRO-", zero, " fits, but ", flow.Unsplit(world));
        if (g.splits) pick = g.in;
      }
    }
    absl::StrAppend(&numbers, ", against ", flow.Against());
    e.steps.push_back({2, "Is it the optimizer's state that does not fit?", numbers, answer});
  }

  // 3. Does the largest layer fit one GPU? Pipeline parallelism if it does, tensor
  // parallelism (inside a node) if not: the fewest stages or tp ranks that fit.
  bool big = false;  // nothing simpler fits: on to 3D whatever the size
  if (!pick) {
    const double layer = LargestLayer(base.model) * per_value;
    const bool layer_fits = layer <= gpu_bytes;
    const Flow::Found found = layer_fits
                                  ? flow.FirstFit({1}, flow.Divisors(base.model.layers), 1)
                                  : flow.FirstFit(flow.Divisors(flow.node()), {1}, 1);
    answer = layer_fits ? "yes: pipeline parallelism" : "no: tensor parallelism";
    if (found.layout) {
      absl::StrAppend(&answer, ", ", LayoutName(*found.layout), ": ",
                      flow.Describe(*found.layout));
      pick = found.layout;
    } else {
      absl::StrAppend(&answer, layer_fits ? ", but no pipeline of these GPUs fits"
                                          : ", but no tp inside a node fits", ": on to 3D");
      big = true;
    }
    std::string numbers = absl::StrFormat(
        "the largest layer's %.0f values hold %.2f GB of model states, against %s",
        LargestLayer(base.model), layer / 1e9, flow.Against());
    if (!found.tried.empty()) absl::StrAppend(&numbers, "; ", absl::StrJoin(found.tried, "; "));
    e.steps.push_back({3, "Does the largest layer fit one GPU?", numbers, answer});
  }

  // 4. Is the model very large: its model states more than a node's GPUs hold? Then 3D:
  // tp inside the node, pp over adjacent nodes, dp across the nodes (the seed's 6.2 and
  // its Q15), with ZeRO where it is needed to fit.
  {
    const double states = per_value * double(base.model.params);
    const bool very = states > flow.node() * gpu_bytes;
    answer = very ? "yes" : big ? "no, but nothing simpler fits" : "no: the layout stands";
    std::string numbers = absl::StrFormat("%.2f GB of model states against %d GPUs of %s a node",
                                          states / 1e9, flow.node(), flow.Against());
    if (very || big) {
      int tp = 1;
      for (int d : flow.Divisors(flow.node())) {
        if (flow.Layout(d, 1, 0)) tp = d;  // the largest that splits the heads
      }
      const Flow::Found found = flow.FirstFit({tp}, flow.Divisors(base.model.layers), 2);
      if (found.layout) {
        absl::StrAppend(&answer, ": 3D, tp inside a node, pp over adjacent nodes, dp across them: ",
                        LayoutName(*found.layout), ": ", flow.Describe(*found.layout));
      } else {
        absl::StrAppend(&answer, ": 3D, but with tp ", tp, " no pipeline and ZeRO stage fits");
      }
      if (!found.tried.empty()) absl::StrAppend(&numbers, "; ", absl::StrJoin(found.tried, "; "));
      pick = found.layout;
    }
    e.steps.push_back({4, "Is the model very large (more model states than a node holds)?",
                       numbers, answer});
  }

  e.flow_fits = pick.has_value();
  if (pick) {
    e.flow = *pick;
    e.flow_memory = flow.HeldBy(*pick).total();
    e.flow_time = PredictStep(*pick);
  }
  if (search) {
    ASSIGN_OR_RETURN(std::vector<SearchResult> found,
                     SearchGrids(base, world, global_batch, gpu_bytes));
    if (!found.empty()) e.fastest = found.front();
  }
  if (e.fastest && e.flow_fits) {
    const PlanInput& f = e.fastest->in;
    const bool same = f.dp == e.flow.dp && f.tp == e.flow.tp && f.pp == e.flow.pp &&
                      f.cp == e.flow.cp && f.zero == e.flow.zero;
    e.verdict = same ? absl::StrFormat("the search's fastest has the flow's grid, %s: %.4f s a "
                                       "step (modelled cluster) against the flow's %.4f s",
                                       LayoutName(f), e.fastest->time.step_s, e.flow_time.step_s)
                     : absl::StrFormat("the search finds %s faster: %.4f s a step (modelled "
                                       "cluster) against the flow's %.4f s; %s",
                                       LayoutName(f), e.fastest->time.step_s, e.flow_time.step_s,
                                       WhyTheyDiffer(e.flow_time, e.fastest->time));
  } else if (search) {
    e.verdict = e.fastest ? "the flow reaches no layout that fits; the search does"
                          : "no grid of these GPUs fits: neither the flow nor the search has one";
  }
  const std::optional<PlanInput> checked = e.flow_fits ? std::optional(e.flow)
                                           : e.fastest ? std::optional(e.fastest->in)
                                                       : std::nullopt;
  if (checked && base.model.gpt) {
    e.check = DryRunCommand(*checked, cluster);
  } else if (checked) {
    e.check = absl::StrCat("a dry run needs tally's GPT shape: give --n_head (the preset becomes "
                           "a GPT of its ", base.model.layers, " layers and width ",
                           base.model.hidden, ")");
  }
  return e;
}

void PrintExplanation(const PlanInput& base, int world, const Explanation& e, bool json,
                      std::ostream& out) {
  if (json) {
    JsonWriter w;
    w.BeginObject().Key("model").String(base.model.name).Key("world").Int(world);
    w.Key("steps").BeginArray();
    for (const FlowStep& s : e.steps) {
      w.BeginObject().Key("number").Int(s.number).Key("question").String(s.question);
      w.Key("numbers").String(s.numbers);
      w.Key("answer").String(s.answer).EndObject();
    }
    w.EndArray();
    auto layout = [&](const PlanInput& g, double memory, const StepTime& t) {
      w.BeginObject().Key("dp").Int(g.dp).Key("tp").Int(g.tp).Key("pp").Int(g.pp);
      w.Key("cp").Int(g.cp).Key("virtual_stages").Int(g.virtual_stages).Key("zero").Int(g.zero);
      w.Key("micro_batches").Int(g.micro_batches).Key("memory_bytes").Double(memory);
      w.Key("step_s").Double(t.step_s).EndObject();
    };
    w.Key("flow");
    if (e.flow_fits) layout(e.flow, e.flow_memory, e.flow_time);
    else w.String("none");
    w.Key("search");
    if (e.fastest) layout(e.fastest->in, e.fastest->memory_bytes, e.fastest->time);
    else w.String("none");
    w.Key("verdict").String(e.verdict).Key("check").String(e.check).EndObject();
    out << w.str() << "\n";
    return;
  }
  out << absl::StrFormat("the seed's selection flow (its 6.2) for %s on %d GPUs:\n",
                         base.model.name, world);
  for (size_t i = 0; i < e.steps.size(); ++i) {
    out << absl::StrFormat("%d. %s\n   %s\n   -> %s\n", e.steps[i].number, e.steps[i].question,
                           e.steps[i].numbers, e.steps[i].answer);
  }
  if (e.flow_fits) {
    out << absl::StrFormat("the flow's layout: %s, %.2f GB a GPU, %.4f s a step on the "
                           "modelled cluster\n",
                           LayoutName(e.flow), e.flow_memory / 1e9, e.flow_time.step_s);
  }
  if (!e.verdict.empty()) out << "beside --search: " << e.verdict << "\n";
  if (!e.check.empty()) out << "check it at real scale: " << e.check << "\n";
}

}  // namespace tally::plan
