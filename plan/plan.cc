// The planner's rows (plan.h): per strategy the seed's bytes, the exact bytes of the
// busiest GPU and of all, what crosses nodes, and the α-β time.
#include "plan/plan.h"

#include <algorithm>
#include <span>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "model/parameters.h"
#include "parallel/data_parallel.h"
#include "parallel/pipeline_schedule.h"
#include "parallel/tensor_parallel.h"
#include "parallel/zero/sharding.h"
#include "report/report.h"
#include "runtime/comm/algorithms/hierarchical.h"
#include "runtime/comm/ledger/exact_traffic.h"
#include "runtime/comm/ledger/names.h"
#include "runtime/comm/nodes.h"

namespace tally::train {
namespace {

using comm::Algorithm;
using comm::Primitive;

// The values one GPU holds: its tensor-parallel part of its stage (the largest), and of
// them its share of the experts (E/ep of each layer's).
struct Part {
  int64_t values = 0, experts = 0;
  int64_t dense() const { return values - experts; }
};
Part PartParams(const PlanInput& in) {
  if (!in.model.gpt) {
    const double stage = double(in.tp) * in.pp;
    const double experts = in.model.layers * ExpertValues(in);
    return {int64_t((double(in.model.params) - experts + experts / in.ep) / stage),
            int64_t(experts / in.ep / stage)};
  }
  const TrainOptions o = PlanAsTrainOptions(in);
  const std::vector<parallel::LayerRange> stages =
      parallel::StageLayers(o.model.n_layer, o.parallel.pp, {}).value();
  Part most;
  for (int s : CandidateStages(in.pp)) {  // on tp rank 0, which holds the most
    const model::ParameterLayout layout =
        model::ParameterLayout::ForGPT(o.model, in.tp, 0, {stages[size_t(s)]}, in.ep, 0);
    if (layout.total() <= most.values) continue;
    most = {layout.total(), 0};
    for (const comm::Chunk& c : parallel::ExpertRanges(layout, true)) most.experts += c.count;
  }
  return most;
}

// Bytes by link class, in double (a step's bytes at real scale).
struct Split {
  double intra = 0, inter = 0;
  double total() const { return intra + inter; }
  Split& Add(const comm::LinkBytes& b, double times = 1) {
    intra += times * double(b.intra);
    inter += times * double(b.inter);
    return *this;
  }
};

// One strategy's bytes over the GPUs looked at: the busiest GPU's (and its inter-node
// part), every GPU's, and the slowest group's α-β time.
struct Traffic {
  Split most, sum;
  double time = 0;
  int gpus = 0;
  // The busiest GPU: the most bytes, and of equals the most across nodes.
  void Add(const Split& gpu) {
    if (gpu.total() > most.total() || (gpu.total() == most.total() && gpu.inter > most.inter)) {
      most = gpu;
    }
    sum.intra += gpu.intra;
    sum.inter += gpu.inter;
    ++gpus;
  }
  // What a row shows: every GPU's bytes scaled from the GPUs looked at to all `world`.
  void Fill(PlanRow& row, int64_t world) const {
    const double scale = gpus > 0 ? double(world) / gpus : 0;
    row.exact_bytes_per_gpu = most.total();
    row.inter_bytes_per_gpu = most.inter;
    row.total_bytes = sum.total() * scale;
    row.inter_total_bytes = sum.inter * scale;
    row.time_s = time;
    row.links = sum.inter > 0 ? (sum.intra > 0 ? "intra+inter" : "inter") : "intra";
  }
};

// The GPUs whose groups the plan looks at.
constexpr int kLookedAt = 4096;

// The groups of one kind among the first kLookedAt GPUs, each once, members in group order.
std::vector<std::vector<int>> GroupsOf(const parallel::Topology& grid,
                                       std::vector<int> (parallel::Topology::*group)(int) const) {
  std::vector<std::vector<int>> groups;
  std::vector<bool> seen(size_t(std::min(grid.world(), kLookedAt)), false);
  for (int r = 0; r < int(seen.size()); ++r) {
    if (seen[size_t(r)]) continue;
    std::vector<int> members = (grid.*group)(r);
    for (int m : members) {
      if (m < int(seen.size())) seen[size_t(m)] = true;
    }
    groups.push_back(std::move(members));
  }
  return groups;
}

double Step(const comm::LinkModel& link, double bytes) {
  return link.latency_us * 1e-6 + bytes / (link.gbps * link.efficiency * 1e9);
}

}  // namespace

double PassesTime(comm::Algorithm asked, std::span<const int> nodes, double bytes, double passes,
                  const comm::Cluster& c) {
  const int n = int(nodes.size());
  if (n <= 1) return 0;
  const Algorithm a = comm::EffectiveAlgorithm(Primitive::kAllReduce, asked, nodes);
  if (a == Algorithm::kHierarchical) {
    const comm::hierarchical::Layout layout = *comm::hierarchical::LayoutOf(nodes);
    const double g = layout.per_node(), k = layout.nodes();
    return passes * ((g - 1) * Step(c.intra, bytes / g) + (k - 1) * Step(c.inter, bytes / (g * k)));
  }
  bool crosses = false;
  for (int i = 0; i < n; ++i) {
    crosses |= a == Algorithm::kNaive ? nodes[i] != nodes[0] : nodes[i] != nodes[(i + 1) % n];
  }
  const comm::LinkModel& link = crosses ? c.inter : c.intra;
  return passes * (n - 1) * Step(link, a == Algorithm::kNaive ? bytes : bytes / n);
}

namespace {

}  // namespace


// Long, and kept whole: one row per strategy, its seed form, exact form and time side by
// side, so that the table reads as the article's list.
std::vector<PlanRow> Plan(const PlanInput& in) {
  std::vector<PlanRow> rows;
  const int e = in.bytes_per_value, m = std::max(1, in.micro_batches);
  // Φ/(tp·pp), or the largest exact part; under expert parallelism the dp group sums the
  // non-expert part and the edp group the experts'.
  const Part parts = PartParams(in);
  const int64_t part = in.ep > 1 ? parts.dense() : parts.values;
  const parallel::Topology grid(in.dp, in.tp, in.pp, in.order, in.ep);
  const int64_t world = int64_t(in.dp) * in.tp * in.pp;
  // The node of every member of a group: blocks of gpus_per_node world ranks.
  auto nodes_of = [&](const std::vector<int>& members) {
    std::vector<int> out;
    for (int r : members) {
      out.push_back(in.gpus_per_node > 0 ? r / in.gpus_per_node : 0);
    }
    return out;
  };
  auto row = [&](const std::string& strategy, double seed, const Traffic& t,
                 const std::string& formula) {
    PlanRow r;
    r.strategy = strategy;
    r.in_micro_batches = strategy.rfind("tp (", 0) == 0;  // tp's calls are in each micro-batch's
    r.seed_bytes_per_gpu = seed;
    r.formula = formula;
    t.Fill(r, world);
    rows.push_back(r);
  };
  if (in.dp > 1) {
    const Algorithm a = in.allreduce;
    // ZeRO's reduce-scatters and all-gathers over the part, one pass each, for rank i of
    // the group at `where` (a tally GPT part is cut unit by unit under ZeRO-2/3:
    // parallel/zero/sharding.h's units and calls). Under expert parallelism the dp group passes over the dense part,
    // the edp group (`experts`) over the experts'.
    const model::ParameterLayout layout =
        in.model.gpt ? model::ParameterLayout::ForGPT(
                           PlanAsTrainOptions(in).model, in.tp, 0,
                           {parallel::StageLayers(in.model.layers, in.pp, {}).value()[0]}, in.ep, 0)
                     : model::ParameterLayout();
    using comm::Phase;
    auto zero_pass = [&](int stage, Primitive p, Phase phase, std::span<const int> where, int i,
                         bool experts) {
      Split bytes;
      if (!in.model.gpt) {
        return bytes.Add(comm::ExactSentByLink(p, a, where, i, -1, experts ? parts.experts : part,
                                               size_t(e)));
      }
      const int calls = parallel::ZeroCallsPerStep(stage, 1, p, phase);
      for (const comm::Chunk& unit :
           parallel::ChunksOf(parallel::ZeroUnits(layout, stage, in.ep > 1), experts)) {
        bytes.Add(comm::ExactSentByLink(p, a, where, i, -1, unit.count, size_t(e)), calls);
      }
      return bytes;
    };
    // One pass of ZeRO stage `stage` for world rank `gpu`, rank i of its dp group at
    // `where`: the dense part over the dp group, and the experts' over its edp group.
    auto zero_passes = [&](int stage, Primitive p, Phase phase, std::span<const int> where, int i,
                           int gpu) {
      Split bytes = zero_pass(stage, p, phase, where, i, false);
      if (in.ep > 1) {
        const std::vector<int> edp = grid.EdpGroup(gpu);
        const int j = int(std::find(edp.begin(), edp.end(), gpu) - edp.begin());
        const Split experts = zero_pass(stage, p, phase, nodes_of(edp), j, true);
        bytes.intra += experts.intra;
        bytes.inter += experts.inter;
      }
      return bytes;
    };
    Traffic ar, zero1, zero2, zero3;
    // ZeRO-3's gathers of a unit per micro-batch: forward, backward, and a pipeline's
    // recomputed forward (parallel/zero/sharding.h's ZeroCallsPerStep).
    const double gathers = in.StageRecompute() ? 3.0 : 2.0;
    for (const std::vector<int>& group : GroupsOf(grid, &parallel::Topology::DpGroup)) {
      const std::vector<int> where = nodes_of(group);
      const double bytes = double(part) * e;
      for (int i = 0; i < in.dp; ++i) {
        ar.Add(Split().Add(comm::ExactSentByLink(Primitive::kAllReduce, a, where, i, -1, part, size_t(e))));
        Split z1 = zero_passes(1, Primitive::kReduceScatter, Phase::kBackward, where, i, group[i]);
        const Split g1 = zero_passes(1, Primitive::kAllGather, Phase::kOptimizer, where, i, group[i]);
        z1.intra += g1.intra;
        z1.inter += g1.inter;
        zero1.Add(z1);
        // Per unit: the reduce-scatter (each micro-batch) and one or two all-gather passes.
        const Split rs = zero_passes(2, Primitive::kReduceScatter, Phase::kBackward, where, i, group[i]);
        const Split ag = zero_passes(3, Primitive::kAllGather, Phase::kForward, where, i, group[i]);
        zero2.Add(Split{m * rs.intra + ag.intra, m * rs.inter + ag.inter});
        zero3.Add(Split{m * rs.intra + gathers * m * ag.intra, m * rs.inter + gathers * m * ag.inter});
      }
      ar.time = std::max(ar.time, PassesTime(a, where, bytes, 2, in.cluster));
      zero1.time = ar.time;
      zero2.time = std::max(zero2.time, PassesTime(a, where, bytes, m + 1, in.cluster));
      zero3.time = std::max(zero3.time, PassesTime(a, where, bytes, (1 + gathers) * m, in.cluster));
    }
    if (in.ep > 1) {  // then the experts' passes over the edp groups
      double slowest = 0;
      for (const std::vector<int>& group : GroupsOf(grid, &parallel::Topology::EdpGroup)) {
        slowest = std::max(slowest, PassesTime(a, nodes_of(group), double(parts.experts) * e, 1,
                                               in.cluster));
      }
      zero1.time += 2 * slowest;
      zero2.time += (m + 1) * slowest;
      zero3.time += (1 + gathers) * m * slowest;
    }
    row("dp all-reduce", 2.0 * part * e, ar,
        a == Algorithm::kNaive ? "2NΦ in all" : "2Φ per GPU (2NΦ in all for naive)");
    // Under ep: the dense Φ over dp and a rank's experts over edp.
    const double sharded = double(part) + (in.ep > 1 ? double(parts.experts) : 0.0);
    row("zero-1", 2.0 * sharded * e, zero1, "2Φ per GPU: reduce-scatter + all-gather");
    row("zero-2", 2.0 * sharded * e, zero2, "2Φ per GPU (the reduce-scatter per micro-batch)");
    row("zero-3", 3.0 * sharded * e, zero3, "3Φ per GPU: two all-gathers and a reduce-scatter");
  }
  if (in.ep > 1 && in.dp > in.ep) {  // the experts' gradients over the ranks holding them
    Traffic edp;
    const int ranks = in.dp / in.ep;
    for (const std::vector<int>& group : GroupsOf(grid, &parallel::Topology::EdpGroup)) {
      const std::vector<int> where = nodes_of(group);
      for (int i = 0; i < ranks; ++i) {
        edp.Add(Split().Add(comm::ExactSentByLink(Primitive::kAllReduce, in.allreduce, where, i, -1,
                                                  parts.experts, size_t(e))));
      }
      edp.time = std::max(edp.time, PassesTime(in.allreduce, where, double(parts.experts) * e, 2,
                                               in.cluster));
    }
    row("edp all-reduce (experts)", 2.0 * parts.experts * e, edp,
        "2Φ_experts/ep per GPU over the dp/ep ranks holding the same experts");
  }
  const double bsh = double(in.batch) * in.seq_len * in.model.hidden;  // per dp rank, a step
  const int layers_per_stage = (in.model.layers + in.pp - 1) / in.pp;
  if (in.tp > 1) {
    const int64_t micro = int64_t(bsh / m);  // one micro-batch's activations
    // Four all-reduces per layer and micro-batch (or their all-gathers and reduce-scatters:
    // the same bytes), on the busiest stage's layers; six with full recompute (the
    // forward's two again, a stage's or a layer's).
    const double calls = (in.recompute ? 6.0 : 4.0) * m * layers_per_stage;
    Traffic tp;
    for (const std::vector<int>& group : GroupsOf(grid, &parallel::Topology::TpGroup)) {
      const std::vector<int> where = nodes_of(group);
      for (int i = 0; i < in.tp; ++i) {
        tp.Add(Split().Add(comm::ExactSentByLink(Primitive::kAllReduce, Algorithm::kRing, where, i,
                                                 -1, micro, size_t(e)),
                           calls));
      }
      tp.time = std::max(tp.time, calls * PassesTime(Algorithm::kRing, where, double(micro) * e, 2,
                                                       in.cluster));
    }
    row("tp (layers of a stage)", 8.0 * bsh * e * layers_per_stage, tp,
        "8bsh per layer; the embedding, LM head and cross-entropy add to it");
    rows.back().exact_bytes_per_layer = rows.back().exact_bytes_per_gpu / layers_per_stage;
    rows.back().seed_bytes_per_layer = 8.0 * bsh * e;
    // The model's ends, on the first and the last stage: the embedding's and the LM head's
    // b·s·h a micro-batch each way and cross-entropy's three all-reduces of a float a row,
    // by the calls parallel/tensor_parallel.h counts for the report (recomputed forwards
    // included).
    parallel::TensorParallelStep step;
    step.sequence_parallel = in.sequence_parallel;
    step.micro_batches = m;
    step.rows = int64_t(in.batch / m) * in.seq_len;
    step.n_embd = in.model.hidden;
    step.recompute = in.StageRecompute();
    step.recompute_layers = in.recompute && !in.StageRecompute();
    step.activation_bytes = step.grad_bytes = size_t(e);
    Traffic ends;
    for (const std::vector<int>& group : GroupsOf(grid, &parallel::Topology::TpGroup)) {
      const std::vector<int> where = nodes_of(group);
      const int stage = grid.Of(group[0]).pp;
      std::vector<std::string> scopes;
      if (stage == 0) scopes.push_back("embedding");
      if (stage == in.pp - 1) {
        scopes.insert(scopes.end(), {comm::scope::kLmHead, comm::scope::kCrossEntropy});
      }
      std::vector<std::pair<Primitive, parallel::TensorParallelCalls>> group_calls;
      for (const std::string& scope : scopes) {
        for (const Primitive p : {Primitive::kAllReduce, Primitive::kAllGather, Primitive::kReduceScatter}) {
          for (const comm::Phase phase : {comm::Phase::kForward, comm::Phase::kBackward}) {
            const auto c = parallel::TensorParallelCallsPerStep(step, scope, p, phase);
            if (c) group_calls.push_back({p, *c});
          }
        }
      }
      double time = 0;
      for (const auto& [p, c] : group_calls) {
        time += double(c.calls) * PassesTime(Algorithm::kRing, where, double(c.count) * double(c.element),
                                             p == Primitive::kAllReduce ? 2 : 1, in.cluster);
      }
      ends.time = std::max(ends.time, time);
      for (int i = 0; i < in.tp; ++i) {
        Split gpu;
        for (const auto& [p, c] : group_calls) {
          gpu.Add(comm::ExactSentByLink(p, Algorithm::kRing, where, i, -1, c.count, c.element),
                  double(c.calls));
        }
        ends.Add(gpu);
      }
    }
    row("tp (embedding, LM head, loss)", 0, ends,
        "not in the seed: b·s·h a micro-batch for the embedding and for the LM head, 3·b·s "
        "floats for the loss");
  }
  if (in.n_experts > 0 && in.ep > 1) {
    // Balanced routing: per layer and micro-batch four all-to-alls (dispatch and combine,
    // forward and backward), each of the micro-batch's b·s·k/m rows of h values, N−1 of N
    // parts leaving; and the counts, E int64.
    // A recomputed forward routes, counts and sends again.
    const int64_t routed = int64_t(in.batch / m) * in.seq_len * in.moe_top_k;
    const double forwards = in.recompute ? 2.0 : 1.0;
    const double calls = (2.0 * forwards + 2.0) * m * layers_per_stage;
    Traffic ep;
    for (const std::vector<int>& group : GroupsOf(grid, &parallel::Topology::EpGroup)) {
      const std::vector<int> where = nodes_of(group);
      for (int i = 0; i < in.ep; ++i) {
        Split gpu;
        gpu.Add(comm::ExactSentByLink(Primitive::kAllToAll, Algorithm::kRing, where, i, -1,
                                      routed * in.model.hidden, size_t(e)),
                calls);
        gpu.Add(comm::ExactSentByLink(Primitive::kAllToAll, Algorithm::kRing, where, i, -1,
                                      in.n_experts, 8),
                forwards * m * layers_per_stage);
        ep.Add(gpu);
      }
      ep.time = std::max(ep.time, calls * PassesTime(Algorithm::kRing, where,
                                                     double(routed) * in.model.hidden * e, 1,
                                                     in.cluster));
    }
    row("ep all-to-all", 4.0 * layers_per_stage * (in.ep - 1) / in.ep * bsh * in.moe_top_k * e, ep,
        "per layer 2 all-to-alls forward, 2 backward, each (N-1)/N of b·s·k·h");
  }
  if (in.pp > 1 && in.model.gpt) {
    // The tied embedding: wte's gradient summed between the first and the last stage, by
    // every dp and tp rank with its peer (under ZeRO-2/3 its dp chunk of it).
    const model::GPTConfig config = PlanAsTrainOptions(in).model;
    const int grad_bytes = in.fp32_grad_accum ? 4 : e;
    Traffic tied;
    std::vector<int64_t> wte_of;  // tp rank t's rows of wte, C values each
    for (int t = 0; t < in.tp; ++t) {
      wte_of.push_back(model::ParameterLayout::ForGPT(config, in.tp, t, {{0, 1}}).specs()[0].numel);
    }
    for (int d = 0; d < in.dp; ++d) {
      for (int t = 0; t < in.tp; ++t) {
        const std::vector<int> pair = {grid.RankAt({d, t, 0}), grid.RankAt({d, t, in.pp - 1})};
        const std::vector<int> where = nodes_of(pair);
        int64_t wte = wte_of[size_t(t)];
        if (in.zero >= 2) wte = comm::ChunkOf(wte, in.dp, d).count;
        for (int i = 0; i < 2; ++i) {
          tied.Add(Split().Add(comm::ExactSentByLink(Primitive::kAllReduce, Algorithm::kRing, where,
                                                     i, -1, wte, size_t(grad_bytes))));
        }
        tied.time = std::max(tied.time, PassesTime(Algorithm::kRing, where,
                                                   double(wte) * grad_bytes, 2, in.cluster));
      }
    }
    row("pp (tied embedding)", 0, tied,
        "not in the seed: wte's gradient summed between the first and the last stage");
  }
  if (in.pp > 1) {
    // Each boundary: b·s·h forward and back, per tensor-parallel rank (its part of the
    // sequence under sequence parallelism), in m messages; a middle stage sends both ways.
    // Interleaved, each of a stage's v chunks sends on (but the model's last) to the next
    // stage, the last stage's to the first, and back (but the model's first).
    // With scatter/gather, a tp rank's chunk of each micro-batch's (the busiest: tp rank
    // 0's, partition.h's rule).
    const int64_t micro = int64_t(bsh / m);
    const double boundary =
        in.ScatterGather() ? double(m) * double(comm::ChunkOf(micro, in.tp, 0).count) * e
                           : bsh * e / (in.sequence_parallel ? in.tp : 1);
    const int v = in.virtual_stages;
    Traffic pp;
    for (const std::vector<int>& group : GroupsOf(grid, &parallel::Topology::PpGroup)) {
      const std::vector<int> where = nodes_of(group);
      for (int s = 0; s < in.pp; ++s) {
        Split gpu;
        double time = 0;
        const int forward = v - (s == in.pp - 1 ? 1 : 0), backward = v - (s == 0 ? 1 : 0);
        for (auto [peer, sends] : {std::pair{(s + 1) % in.pp, forward},
                                   std::pair{(s + in.pp - 1) % in.pp, backward}}) {
          const bool across = where[size_t(s)] != where[size_t(peer)];
          (across ? gpu.inter : gpu.intra) += sends * boundary;
          time += sends * m * Step(across ? in.cluster.inter : in.cluster.intra, boundary / m);
        }
        pp.Add(gpu);
        pp.time = std::max(pp.time, time);
      }
    }
    row("pp (boundaries)", 2.0 * (in.pp - 1) * bsh * e, pp,
        v > 1 ? "2(N-1)bsh for the pipeline (the seed's; interleaved moves 2(vN-1)bsh)"
              : "2(N-1)bsh for the pipeline (the seed-formula column is that total)");
    if (in.ScatterGather()) {
      // Every boundary a stage receives (as many as it sends), each micro-batch's
      // all-gathered over its tp group: (tp-1)/tp of b·s·h a rank.
      Traffic gathers;
      for (const std::vector<int>& group : GroupsOf(grid, &parallel::Topology::TpGroup)) {
        const std::vector<int> where = nodes_of(group);
        const int s = grid.Of(group[0]).pp;
        const double receives = double(m) * (2 * v - (s == 0 ? 1 : 0) - (s == in.pp - 1 ? 1 : 0));
        for (int i = 0; i < in.tp; ++i) {
          gathers.Add(Split().Add(comm::ExactSentByLink(Primitive::kAllGather, Algorithm::kRing,
                                                        where, i, -1, micro, size_t(e)),
                                  receives));
        }
        gathers.time = std::max(gathers.time, receives * PassesTime(Algorithm::kRing, where,
                                                                    double(micro) * e, 1, in.cluster));
      }
      row("tp (pipeline gathers)", 0, gathers,
          "scatter/gather: each received boundary all-gathered, (tp-1)/tp of b·s·h");
    }
  }
  return rows;
}

}  // namespace tally::train
