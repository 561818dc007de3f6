// tally_plan's outputs: for one grid the table (PrintPlan) and the JSON object
// (PrintPlanJson), both from plan.h's functions; --search's grids (PrintSearch); the
// seed's examples (PrintSeedExamples).
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "lab/plan/plan.h"
#include "core/runtime/json_writer.h"

namespace tally::plan {
namespace {

// What a GPU holds at --precision: the model states, and the activations where the model
// has them (tally's GPT).
struct Held {
  double bytes = 0;
  bool activations = false;
};
Held HeldPerGpu(const PlanInput& in) {
  const size_t chosen = in.precision == DType::kF32 ? 0 : in.fp32_grad_accum ? 2 : 1;
  const PlanActivations act = PlanActivationsPerGpu(in);
  const bool known = in.model.gpt && act.bytes_per_gpu >= 0;
  return {PlanMemoryPerGpu(in)[chosen].bytes_per_gpu + (known ? double(act.bytes_per_gpu) : 0), known};
}

// The plan's first two lines: the model, the batch and the grid; the placement and links.
void PrintGrid(const PlanInput& in, std::ostream& out) {
  out << absl::StrFormat(
      "%s: Φ = %d parameters, %d layers, h = %d; b = %d, s = %d, e = %d bytes; dp %d%s x tp %d x "
      "pp %d, %s%d micro-batch(es), %s\n",
      in.model.name, in.model.params, in.model.layers, in.model.hidden, in.batch, in.seq_len,
      in.bytes_per_value, in.dp,
      in.cp > 1 ? absl::StrFormat(" x cp %d (%s, %s)", in.cp, parallel::Name(in.cp_comm),
                                  parallel::Name(in.cp_load_balance))
                : "",
      in.tp, in.pp,
      absl::StrCat(in.virtual_stages > 1
                       ? absl::StrCat("interleaved x ", in.virtual_stages, " chunks, ")
                       : "",
                   in.n_experts > 0 ? absl::StrCat(in.n_experts, " experts, top ", in.moe_top_k,
                                                   ", ep ", in.ep, ", ")
                                    : ""),
      in.micro_batches, comm::Name(in.allreduce));
  out << absl::StrFormat(
      "placement: order %s, %s; inside a node %s, across nodes %s\n\n", parallel::Name(in.order),
      in.gpus_per_node > 0 ? absl::StrCat(in.gpus_per_node, " GPUs a node") : "one node",
      comm::Describe(in.cluster.intra), comm::Describe(in.cluster.inter));
}

}  // namespace

void PrintPlan(const PlanInput& in, std::ostream& out) {
  PrintGrid(in, out);
  out << absl::StrFormat("%-24s %26s %26s %26s %26s %10s %-11s  %s\n", "strategy",
                               "seed formula", "exact, busiest GPU", "of it across nodes",
                               "exact, all GPUs", "time (s)", "links", "seed's form");
  for (const PlanRow& r : Plan(in)) {
    out << absl::StrFormat("%-24s %26s %26s %26s %26s %10.4f %-11s  %s\n", r.strategy,
                                 Bytes(r.seed_bytes_per_gpu), Bytes(r.exact_bytes_per_gpu),
                                 Bytes(r.inter_bytes_per_gpu), Bytes(r.total_bytes),
                                 r.time_s, r.links, r.formula);
  }
  out << absl::StrFormat(
      "\nmodel states per GPU with AdamW, zero=%d (bytes a parameter: params + grads + "
      "optimizer state; the seed's is bf16)\n",
      in.zero);
  const size_t chosen = in.precision == DType::kF32 ? 0 : in.fp32_grad_accum ? 2 : 1;
  const std::vector<PlanMemory> lines = PlanMemoryPerGpu(in);
  for (size_t i = 0; i < lines.size(); ++i) {
    out << absl::StrFormat("  %-44s %26s%s\n", lines[i].label, Bytes(lines[i].bytes_per_gpu),
                                 i == chosen ? "   <- --precision" : "");
  }
  const PlanActivations act = PlanActivationsPerGpu(in);
  if (in.model.gpt && act.bytes_per_gpu >= 0) {
    out << absl::StrFormat(
        "activations per GPU (tally's GPT at --precision, the busiest stage %d; a dry run's "
        "ledger to the byte)  %s\n",
        act.stage, Bytes(double(act.bytes_per_gpu)));
  }
  if (in.gpu.memory_gb > 0) {  // on a cluster whose GPUs' memory is known
    const Held held = HeldPerGpu(in);
    out << absl::StrFormat("memory per GPU at --precision: %s%s: %s\n", Bytes(held.bytes),
                           held.activations ? " (model states + activations)"
                                            : " (model states; activations not modelled)",
                           in.gpu.Fits(held.bytes, "the cluster"));
  }
  if (in.pp > 1) {
    out << absl::StrFormat("pipeline bubble (p-1)/(v·m+p-1) = %.4f of a step\n", act.bubble);
  }
  if (in.gpu.given()) {  // on a cluster: this grid's predicted step
    const StepTime t = PredictStep(in);
    std::string rows;
    for (const auto& [strategy, s] : t.comm_rows) absl::StrAppendFormat(&rows, ", %s %.4f s", strategy, s);
    out << absl::StrFormat(
        "predicted step (modelled, %s a GPU; %s): "
        "compute %.4f s + the pipeline's fill and drain %.4f s (bubble %.4f) + communication "
        "%.4f s%s = %.4f s; %.1f TFLOP/s a GPU by Narayanan et al.'s count (%.4g FLOPs a "
        "step)\n",
        in.gpu.Describe(),
        absl::StrCat(in.overlap && OverlappedDpSeconds(in) >= 0
                         ? "the data-parallel row as --overlap hides it, the rest not overlapped"
                         : "none of the communication overlapped",
                     RingExposedSeconds(in, 0) >= 0
                         ? " but cp's ring, whose K, V sends ride behind its blocks"
                         : ""),
        t.compute_s, t.fill_s, t.bubble, t.comm_s, rows, t.step_s, t.tflops_per_gpu, t.model_flops);
  }
}

void PrintPlanJson(const PlanInput& in, std::ostream& out) {
  JsonWriter w;
  w.BeginObject().Key("model").String(in.model.name).Key("params").Int(in.model.params);
  w.Key("dp").Int(in.dp).Key("tp").Int(in.tp).Key("pp").Int(in.pp);
  if (in.cp > 1) {  // only with context parallelism: other plans print the same keys as before
    w.Key("cp").Int(in.cp).Key("cp_comm").String(parallel::Name(in.cp_comm));
    w.Key("cp_load_balance").String(parallel::Name(in.cp_load_balance));
  }
  w.Key("virtual_stages").Int(in.virtual_stages);
  w.Key("n_experts").Int(in.n_experts).Key("moe_top_k").Int(in.moe_top_k).Key("ep").Int(in.ep);
  w.Key("order").String(parallel::Name(in.order)).Key("gpus_per_node").Int(in.gpus_per_node);
  w.Key("strategies").BeginArray();
  for (const PlanRow& r : Plan(in)) {
    w.BeginObject().Key("strategy").String(r.strategy);
    w.Key("seed_bytes_per_gpu").Double(r.seed_bytes_per_gpu);
    w.Key("exact_bytes_per_gpu").Double(r.exact_bytes_per_gpu);
    w.Key("total_bytes").Double(r.total_bytes).Key("time_s").Double(r.time_s);
    w.Key("inter_bytes_per_gpu").Double(r.inter_bytes_per_gpu);
    w.Key("inter_total_bytes").Double(r.inter_total_bytes).Key("links").String(r.links);
    if (r.exact_bytes_per_layer > 0) {
      w.Key("exact_bytes_per_layer").Double(r.exact_bytes_per_layer);
      w.Key("seed_bytes_per_layer").Double(r.seed_bytes_per_layer);
    }
    if (r.exposed_s >= 0) w.Key("exposed_s").Double(r.exposed_s);
    w.EndObject();
  }
  w.EndArray();
  const std::vector<PlanMemory> lines = PlanMemoryPerGpu(in);
  w.Key("memory_per_gpu").BeginObject().Key("zero").Int(in.zero);
  const char* keys[] = {"fp32", "bf16", "bf16_fp32_grad_accum"};
  for (size_t i = 0; i < lines.size(); ++i) w.Key(keys[i]).Double(lines[i].bytes_per_gpu);
  const PlanActivations act = PlanActivationsPerGpu(in);
  if (in.model.gpt && act.bytes_per_gpu >= 0) {
    w.Key("activations").Int(act.bytes_per_gpu).Key("activations_stage").Int(act.stage);
  }
  if (in.gpu.memory_gb > 0) {
    const Held held = HeldPerGpu(in);
    w.Key("held").Double(held.bytes).Key("gpu_memory_gb").Double(in.gpu.memory_gb);
    w.Key("fits").Bool(in.gpu.Holds(held.bytes));
  }
  w.EndObject();
  w.Key("bubble").Double(act.bubble);
  if (in.gpu.given()) {
    const StepTime t = PredictStep(in);
    w.Key("predicted_step").BeginObject().Key("clock").String("modelled");
    w.Key("compute_s").Double(t.compute_s).Key("fill_s").Double(t.fill_s);
    w.Key("bubble").Double(t.bubble);
    w.Key("comm_s").Double(t.comm_s).Key("comm").BeginObject();
    for (const auto& [strategy, s] : t.comm_rows) w.Key(strategy).Double(s);
    w.EndObject().Key("step_s").Double(t.step_s).Key("model_flops").Double(t.model_flops);
    w.Key("tflops_per_gpu").Double(t.tflops_per_gpu).EndObject();
  }
  w.EndObject();
  out << w.str() << "\n";
}

void PrintSearch(const PlanInput& base, int world, int global, double memory,
                 const std::vector<SearchResult>& found, bool json, std::ostream& out) {
  if (json) {
    JsonWriter w;
    w.BeginObject().Key("world").Int(world).Key("global_batch_size").Int(global);
    w.Key("grids").BeginArray();
    for (const SearchResult& r : found) {
      w.BeginObject().Key("dp").Int(r.in.dp).Key("tp").Int(r.in.tp).Key("pp").Int(r.in.pp);
      if (base.cp > 1) w.Key("cp").Int(r.in.cp);
      w.Key("virtual_stages").Int(r.in.virtual_stages);
      w.Key("zero").Int(r.in.zero).Key("micro_batches").Int(r.in.micro_batches);
      w.Key("recompute").Bool(r.in.recompute).Key("recompute_attention").Bool(r.in.recompute_attention);
      w.Key("recompute_layers").Bool(r.in.recompute && !r.in.StageRecompute());
      w.Key("ep").Int(r.in.ep);
      w.Key("memory_bytes").Double(r.memory_bytes).Key("compute_s").Double(r.time.compute_s);
      w.Key("comm_s").Double(r.time.comm_s).Key("bubble").Double(r.time.bubble);
      w.Key("step_s").Double(r.time.step_s).EndObject();
    }
    w.EndArray().EndObject();
    out << w.str() << "\n";
    return;
  }
  out << absl::StrFormat(
      "%s on %d GPUs, %d sequences of %d a step, at most %.0f GB a GPU, %s: %d grids fit "
      "(the 20 fastest; predicted: compute + the pipeline's fill and drain + communication, "
      "%s)\n%4s%s %4s %4s %3s %4s %5s %9s %13s %10s %10s %8s %10s\n",
      base.model.name, world, global, base.seq_len, memory,
      base.gpu.given() ? absl::StrCat(base.gpu.Describe(), " a GPU") : "no compute time",
      int(found.size()),
      base.overlap ? "the data-parallel row as --overlap hides it on grids without a pipeline"
                   : "none of it overlapped",
      "dp", base.cp > 1 ? "   cp" : "", "tp", "pp", "v", "zero", "m", "recompute", "memory/GPU",
      "compute s", "comm s", "bubble", "step s");
  for (size_t i = 0; i < found.size() && i < 20; ++i) {
    const SearchResult& r = found[i];
    out << absl::StrFormat("%4d%s %4d %4d %3d %4d %5d %9s %10.2f GB %10.4f %10.4f %8.3f %10.4f\n",
                                 r.in.dp, base.cp > 1 ? absl::StrFormat(" %4d", r.in.cp) : "",
                                 r.in.tp, r.in.pp, r.in.virtual_stages, r.in.zero,
                                 r.in.micro_batches,
                                 r.in.StageRecompute()      ? "stage"
                                 : r.in.recompute           ? "layers"
                                 : r.in.recompute_attention ? "selective"
                                                            : "no",
                                 r.memory_bytes / 1e9, r.time.compute_s, r.time.comm_s,
                                 r.time.bubble, r.time.step_s);
  }
}

void PrintSeedExamples(bool json, std::ostream& out) {
  if (json) {
    JsonWriter w;
    w.BeginObject().Key("seed_examples").BeginArray();
    for (const SeedExample& x : SeedExamples()) {
      w.BeginObject().Key("what").String(x.what).Key("seed_figure").String(x.seed_figure);
      w.Key("seed_bytes").Double(x.seed_bytes).Key("computed_bytes").Double(x.computed_bytes);
      w.Key("note").String(x.note).EndObject();
    }
    w.EndArray().EndObject();
    out << w.str() << "\n";
    return;
  }
  out << absl::StrFormat("%-62s %10s %26s  %s\n", "the seed's example", "its figure",
                         "by its formula, here", "note");
  for (const SeedExample& x : SeedExamples()) {
    out << absl::StrFormat("%-62s %10s %26s  %s\n", x.what, x.seed_figure, Bytes(x.computed_bytes),
                           x.note);
  }
}

}  // namespace tally::plan
