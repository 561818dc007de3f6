// The planner's rows of the strategies that split the model (lab/plan/rows.h): tensor
// parallelism's layers and ends, expert parallelism's all-to-alls, the pipeline's tied
// embedding, boundaries and gathers, each from the calls its strategy declares.
#include <map>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "core/model/parameters.h"
#include "core/parallel/context_parallel.h"
#include "core/parallel/expert_parallel.h"
#include "core/parallel/pipeline_schedule.h"
#include "core/parallel/tensor_parallel.h"
#include "lab/plan/rows.h"
#include "core/runtime/comm/algorithms/partition.h"
#include "core/runtime/comm/ledger/exact_traffic.h"
#include "core/runtime/comm/ledger/names.h"

namespace tally::plan {

using comm::Algorithm;
using comm::Primitive;

namespace {

// Tensor parallelism's shape for one tp group: no layers (the caller adds those), the
// embedding on the first stage, the LM head and its loss on the last.
parallel::TensorParallelShape TensorParallelShapeOf(const PlanRows& plan, bool embedding = false,
                                                    bool lm_head = false) {
  const PlanInput& in = plan.in;
  return {.ranks = in.tp,
          .experts = in.n_experts > 0,  // the experts' calls: routed rows, no closed form
          .embedding = embedding,
          .lm_head = lm_head,
          .sequence_parallel = in.sequence_parallel,
          .micro_batches = plan.m,
          .rows = int64_t(in.batch / plan.m) * (in.seq_len / in.cp),
          .n_embd = in.model.hidden,
          .recompute = in.StageRecompute(),
          .recompute_layers = in.recompute && !in.StageRecompute(),
          .activation_bytes = plan.e};
}

// Tensor parallelism's calls in the busiest stage's layers.
void LayersRow(PlanRows& plan) {
  const PlanInput& in = plan.in;
  const parallel::Topology& grid = plan.grid;
  const int e = plan.e;
  const double bsh = plan.bsh();
  const int layers_per_stage = plan.layers_per_stage();
  std::vector<PlanRow>& rows = plan.rows;
  // The busiest stage's layers' calls (core/parallel/tensor_parallel.h's list): four
  // all-reduces per layer and micro-batch of its (b·s, h) activations (or their
  // all-gathers and reduce-scatters: the same bytes), six with full recompute (the
  // forward's two again, a stage's or a layer's); all of one size.
  parallel::TensorParallelShape layers = TensorParallelShapeOf(plan);
  layers.layers.resize(size_t(layers_per_stage));
  std::iota(layers.layers.begin(), layers.layers.end(), 0);
  std::map<Primitive, double> calls;  // of each primitive
  int64_t micro = 0;                  // a call's values
  for (const comm::ExpectedCall& c : parallel::TensorParallelCalls(layers)) {
    calls[c.primitive] += double(c.calls);
    micro = c.count;
  }
  Traffic tp;
  for (const std::vector<int>& group : GroupsOf(grid, &parallel::Topology::TpGroup)) {
    const std::vector<int> where = plan.NodesOf(group);
    for (int i = 0; i < in.tp; ++i) {
      Split gpu;
      for (const auto& [p, n] : calls) {
        gpu.Add(comm::ExactSentByLink(p, Algorithm::kRing, where, i, -1, micro, size_t(e)), n);
      }
      tp.Add(gpu);
    }
    double time = 0;
    for (const auto& [p, n] : calls) {
      time += n * PassesTime(Algorithm::kRing, where, double(micro) * e,
                             p == Primitive::kAllReduce ? 2 : 1, in.cluster);
    }
    tp.time = std::max(tp.time, time);
  }
  plan.Add("tp (layers of a stage)", 8.0 * bsh * e * layers_per_stage, tp,
           "8bsh per layer; the embedding, LM head and cross-entropy add to it");
  rows.back().exact_bytes_per_layer = rows.back().exact_bytes_per_gpu / layers_per_stage;
  rows.back().seed_bytes_per_layer = 8.0 * bsh * e;
}

// Tensor parallelism's calls at the model's ends.
void EndsRow(PlanRows& plan) {
  const PlanInput& in = plan.in;
  const parallel::Topology& grid = plan.grid;
  // The model's ends, on the first and the last stage: the embedding's and the LM head's
  // b·s·h a micro-batch each way and cross-entropy's three all-reduces of a float a row,
  // by the calls core/parallel/tensor_parallel.h counts for the report (recomputed forwards
  // included).
  Traffic ends;
  for (const std::vector<int>& group : GroupsOf(grid, &parallel::Topology::TpGroup)) {
    const std::vector<int> where = plan.NodesOf(group);
    const int stage = grid.Of(group[0]).pp;
    const comm::ExpectedCalls ends_calls =
        parallel::TensorParallelCalls(TensorParallelShapeOf(plan, stage == 0, stage == in.pp - 1));
    // The list's calls of each scope, primitive and phase together.
    std::vector<std::pair<Primitive, comm::ExpectedCall>> group_calls;
    for (const char* scope :
         {comm::scope::kEmbedding, comm::scope::kLmHead, comm::scope::kCrossEntropy}) {
      for (const Primitive p :
           {Primitive::kAllReduce, Primitive::kAllGather, Primitive::kReduceScatter}) {
        for (const comm::Phase phase : {comm::Phase::kForward, comm::Phase::kBackward}) {
          comm::ExpectedCall sum;
          sum.calls = 0;
          for (const comm::ExpectedCall& c : ends_calls) {
            if (c.scope != scope || c.primitive != p || c.phase != phase) continue;
            sum = {.count = c.count, .element = c.element, .calls = sum.calls + c.calls};
          }
          if (sum.calls > 0) group_calls.push_back({p, sum});
        }
      }
    }
    double time = 0;
    for (const auto& [p, c] : group_calls) {
      time +=
          double(c.calls) * PassesTime(Algorithm::kRing, where, double(c.count) * double(c.element),
                                       p == Primitive::kAllReduce ? 2 : 1, in.cluster);
    }
    ends.time = std::max(ends.time, time);
    for (int i = 0; i < in.tp; ++i) {
      Split gpu;
      for (const auto& [p, c] : group_calls) {
        gpu.Add(
            comm::ExactSentByLink(p, Algorithm::kRing, where, i, -1, c.count, size_t(c.element)),
            double(c.calls));
      }
      ends.Add(gpu);
    }
  }
  plan.Add("tp (embedding, LM head, loss)", 0, ends,
           "not in the seed: b·s·h a micro-batch for the embedding and for the LM head, 3·b·s "
           "floats for the loss");
}

// The pipeline's tied embedding.
void TiedEmbeddingRow(PlanRows& plan) {
  const PlanInput& in = plan.in;
  const parallel::Topology& grid = plan.grid;
  const int e = plan.e;
  // The tied embedding: wte's gradient summed between the first and the last stage, by
  // every dp (and cp) and tp rank with its peer (under ZeRO-2/3 its dp group's chunk of it).
  const model::GPTConfig config = PlanAsTrainOptions(in).model;
  const int grad_bytes = in.fp32_grad_accum ? 4 : e;
  Traffic tied;
  for (int q = 0; q < grid.DpGroupSize(); ++q) {  // q = dp·cp + cp: the dp group's rank
    for (int t = 0; t < in.tp; ++t) {
      const int d = q / in.cp, piece = q % in.cp;
      const std::vector<int> pair = {grid.RankAt({d, t, 0, piece}),
                                     grid.RankAt({d, t, in.pp - 1, piece})};
      const std::vector<int> where = plan.NodesOf(pair);
      const int64_t wte =
          parallel::TiedEmbeddingValues(config, in.tp, t, in.zero, grid.DpGroupSize(), q);
      // The first stage's call and the last's (core/parallel/pipeline_schedule.h's list).
      for (const int stage : {0, in.pp - 1}) {
        for (const comm::ExpectedCall& c : parallel::PipelineCalls(
                 {.stages = in.pp, .stage = stage, .tied = wte, .grad_element = grad_bytes})) {
          if (c.group != comm::group::kEmbedding) continue;
          tied.Add(Split().Add(comm::ExactSentByLink(c.primitive, Algorithm::kRing, where, c.rank,
                                                     -1, c.count, size_t(c.element)),
                               double(c.calls)));
        }
      }
      tied.time = std::max(
          tied.time, PassesTime(Algorithm::kRing, where, double(wte) * grad_bytes, 2, in.cluster));
    }
  }
  plan.Add("pp (tied embedding)", 0, tied,
           "not in the seed: wte's gradient summed between the first and the last stage");
}

// The pipeline's calls of stage `s` (core/parallel/pipeline_schedule.h's list): each boundary
// a micro-batch's b·s·h per tensor-parallel rank (its part of the sequence under sequence
// parallelism; under scatter/gather the busiest tp rank's chunk, rank 0's by
// partition.h's rule, all-gathered on arrival).
comm::ExpectedCalls StageCalls(const PlanRows& plan, int s) {
  const PlanInput& in = plan.in;
  const int64_t micro = int64_t(plan.bsh() / plan.m);
  return parallel::PipelineCalls({.stages = in.pp,
                                  .stage = s,
                                  .virtual_stages = in.virtual_stages,
                                  .micro_batches = plan.m,
                                  .boundary = in.ScatterGather()
                                                  ? comm::ChunkOf(micro, in.tp, 0).count
                                                  : micro / (in.sequence_parallel ? in.tp : 1),
                                  .element = plan.e,
                                  .tp = in.tp,
                                  .gathered = in.ScatterGather() ? micro : 0});
}

// The pipeline's boundaries.
void BoundariesRow(PlanRows& plan) {
  const PlanInput& in = plan.in;
  const parallel::Topology& grid = plan.grid;
  const int e = plan.e;
  const double bsh = plan.bsh();
  // Each boundary (core/parallel/pipeline_schedule.h's list): a micro-batch's b·s·h forward
  // and back, per tensor-parallel rank (its part of the sequence under sequence
  // parallelism); a middle stage sends both ways. Interleaved, each of a stage's v
  // chunks sends on (but the model's last) to the next stage, the last stage's to the
  // first, and back (but the model's first). With scatter/gather, a tp rank's chunk of
  // each micro-batch's (the busiest: tp rank 0's, partition.h's rule), and each
  // received chunk all-gathered over the tp group.
  const int v = in.virtual_stages;
  Traffic pp;
  for (const std::vector<int>& group : GroupsOf(grid, &parallel::Topology::PpGroup)) {
    const std::vector<int> where = plan.NodesOf(group);
    for (int s = 0; s < in.pp; ++s) {
      const comm::ExpectedCalls calls = StageCalls(plan, s);
      Split gpu;
      double time = 0;
      // The sends of each way, to the next stage (forward) and the one before (backward).
      for (const comm::Phase phase : {comm::Phase::kForward, comm::Phase::kBackward}) {
        const int peer = phase == comm::Phase::kForward ? (s + 1) % in.pp : (s + in.pp - 1) % in.pp;
        const bool across = where[size_t(s)] != where[size_t(peer)];
        int64_t sends = 0, values = 0;
        for (const comm::ExpectedCall& c : calls) {
          if (c.group != comm::group::kPp || c.receive || c.phase != phase) continue;
          sends += c.calls;
          values = c.count;
        }
        (across ? gpu.inter : gpu.intra) += double(sends) * double(values * e);
        time += double(sends) *
                MessageSeconds(across ? in.cluster.inter : in.cluster.intra, double(values * e));
      }
      pp.Add(gpu);
      pp.time = std::max(pp.time, time);
    }
  }
  plan.Add("pp (boundaries)", 2.0 * (in.pp - 1) * bsh * e, pp,
           v > 1 ? "2(N-1)bsh for the pipeline (the seed's; interleaved moves 2(vN-1)bsh)"
                 : "2(N-1)bsh for the pipeline (the seed-formula column is that total)");
}

// Scatter/gather's gathers of the boundaries received.
void GathersRow(PlanRows& plan) {
  const PlanInput& in = plan.in;
  const parallel::Topology& grid = plan.grid;
  const int e = plan.e;
  const int64_t micro = int64_t(plan.bsh() / plan.m);  // a micro-batch's b·s·h
  // Every boundary a stage receives (as many as it sends), each micro-batch's
  // all-gathered over its tp group: (tp-1)/tp of b·s·h a rank.
  Traffic gathers;
  for (const std::vector<int>& group : GroupsOf(grid, &parallel::Topology::TpGroup)) {
    const std::vector<int> where = plan.NodesOf(group);
    double receives = 0;
    for (const comm::ExpectedCall& c : StageCalls(plan, grid.Of(group[0]).pp)) {
      if (c.group == comm::group::kTp) receives += double(c.calls);
    }
    for (int i = 0; i < in.tp; ++i) {
      gathers.Add(Split().Add(comm::ExactSentByLink(Primitive::kAllGather, Algorithm::kRing, where,
                                                    i, -1, micro, size_t(e)),
                              receives));
    }
    gathers.time = std::max(gathers.time, receives * PassesTime(Algorithm::kRing, where,
                                                                double(micro) * e, 1, in.cluster));
  }
  plan.Add("tp (pipeline gathers)", 0, gathers,
           "scatter/gather: each received boundary all-gathered, (tp-1)/tp of b·s·h a rank");
}

}  // namespace

void TensorParallelRows(PlanRows& plan) {
  if (plan.in.tp <= 1) return;
  LayersRow(plan);
  EndsRow(plan);
}

// Expert parallelism's all-to-alls, with balanced routing.
void ExpertParallelRows(PlanRows& plan) {
  const PlanInput& in = plan.in;
  if (in.n_experts == 0 || in.ep <= 1) return;
  const int e = plan.e, m = plan.m;
  const int layers_per_stage = plan.layers_per_stage();
  // Balanced routing: per layer and micro-batch four all-to-alls (dispatch and combine,
  // forward and backward), each of the micro-batch's b·s·k/m rows of h values, N−1 of N
  // parts leaving; and the counts, E int64 (core/parallel/expert_parallel.h's list). A
  // recomputed forward routes, counts and sends again. Under context parallelism a GPU
  // routes its s/cp positions of each sequence.
  const int64_t routed = int64_t(in.batch / m) * (in.seq_len / in.cp) * in.moe_top_k;
  const double forwards = in.recompute ? 2.0 : 1.0;
  const double calls = (2.0 * forwards + 2.0) * m * layers_per_stage;
  parallel::RoutingShape routing{.ranks = in.ep,
                                 .layers = std::vector<int>(size_t(layers_per_stage)),
                                 .n_experts = in.n_experts,
                                 .micro_batches = m,
                                 .recompute = in.recompute};
  std::iota(routing.layers.begin(), routing.layers.end(), 0);
  double counts = 0;  // the counts' calls
  for (const comm::ExpectedCall& c : parallel::RoutingCountCalls(routing))
    counts += double(c.calls);
  Traffic ep;
  for (const std::vector<int>& group : GroupsOf(plan.grid, &parallel::Topology::EpGroup)) {
    const std::vector<int> where = plan.NodesOf(group);
    for (int i = 0; i < in.ep; ++i) {
      Split gpu;
      gpu.Add(comm::ExactSentByLink(Primitive::kAllToAll, Algorithm::kRing, where, i, -1,
                                    routed * in.model.hidden, size_t(e)),
              calls);
      gpu.Add(comm::ExactSentByLink(Primitive::kAllToAll, Algorithm::kRing, where, i, -1,
                                    in.n_experts, 8),
              counts);
      ep.Add(gpu);
    }
    ep.time =
        std::max(ep.time, calls * PassesTime(Algorithm::kRing, where,
                                             double(routed) * in.model.hidden * e, 1, in.cluster));
  }
  plan.Add("ep all-to-all",
           4.0 * layers_per_stage * (in.ep - 1) / in.ep * plan.bsh() * in.moe_top_k * e, ep,
           "per layer 2 all-to-alls forward, 2 backward, each (N-1)/N of b·s·k·h");
}

std::vector<int> PlanRows::StageLayerList(int stage) const {
  const int v = std::max(1, in.virtual_stages);
  const std::vector<parallel::LayerRange> chunks =
      parallel::StageLayers(in.model.layers, in.pp * v, {}).value();
  std::vector<int> layers;
  for (int c = 0; c < v; ++c) {
    const parallel::LayerRange& r = chunks[size_t(parallel::VirtualStage(c, in.pp, stage))];
    for (int l = r.begin; l < r.end; ++l) layers.push_back(l);
  }
  return layers;
}

parallel::ContextParallelShape ContextParallelShapeOf(const PlanInput& in, int rank,
                                                      std::vector<int> layers) {
  const int m = std::max(1, in.micro_batches);
  return {.comm = in.cp_comm,
          .ranks = in.cp,
          .rank = rank,
          .batch = in.batch / m,
          .seq_len = in.seq_len,
          .channels = in.model.hidden / in.tp,
          .layers = std::move(layers),
          .micro_batches = m,
          .element = in.bytes_per_value,
          .recompute = in.recompute,
          .experts = in.n_experts};
}

// Context parallelism's attention calls over each cp group (core/parallel/context_parallel.h's
// list): per layer and micro-batch the ring's K, V sends forward and K, V and dK, dV
// sends backward, or the all-gather of K, V and the reduce-scatter of dK, dV, or
// Ulysses' eight all-to-alls; of the GPU's b·(s/cp) positions and its h/tp channels; and
// with experts the router's 2E statistics all-reduced. A ring's step waits for its slowest
// hop; the collectives' time is their passes'.
void ContextParallelRows(PlanRows& plan) {
  const PlanInput& in = plan.in;
  if (in.cp <= 1) return;
  Traffic cp;
  double exposed = -1;  // the ring's, where it hides sends behind its blocks
  for (const std::vector<int>& group : GroupsOf(plan.grid, &parallel::Topology::CpGroup)) {
    const std::vector<int> where = plan.NodesOf(group);
    const std::vector<int> layers = plan.StageLayerList(plan.grid.Of(group[0]).pp);
    bool crosses = false;
    for (size_t i = 0; i < where.size(); ++i) crosses |= where[i] != where[(i + 1) % where.size()];
    const double kv_bytes = 2.0 * (in.batch / plan.m) * (in.seq_len / in.cp) *
                            (in.model.hidden / in.tp) * plan.e;
    const double ring = RingExposedSeconds(
        in, MessageSeconds(crosses ? in.cluster.inter : in.cluster.intra, kv_bytes));
    if (ring >= 0) exposed = std::max(exposed, double(plan.m) * double(layers.size()) * ring);
    for (int i = 0; i < in.cp; ++i) {
      Split gpu;
      double time = 0;
      for (const comm::ExpectedCall& c :
           parallel::ContextParallelCalls(ContextParallelShapeOf(in, i, layers))) {
        if (c.receive) continue;
        const double bytes = double(c.count) * double(c.element);
        gpu.Add(comm::ExactSentByLink(c.primitive, Algorithm::kRing, where, i, -1, c.count,
                                      size_t(c.element)),
                double(c.calls));
        const double passes = c.primitive == Primitive::kAllReduce ? 2 : 1;
        time += double(c.calls) *
                (c.primitive == Primitive::kSendRecv
                     ? MessageSeconds(crosses ? in.cluster.inter : in.cluster.intra, bytes)
                     : PassesTime(Algorithm::kRing, where, bytes, passes, in.cluster));
      }
      cp.Add(gpu);
      cp.time = std::max(cp.time, time);
    }
  }
  const char* formula =
      in.cp_comm == parallel::CpComm::kP2p
          ? "not in the seed: per layer and micro-batch N-1 sends of K, V (2·b·(s/N)·h) "
            "forward, 2N-1 of K, V and dK, dV backward"
      : in.cp_comm == parallel::CpComm::kAllGather
          ? "not in the seed: per layer and micro-batch an all-gather of K, V forward and a "
            "reduce-scatter of dK, dV backward, (N-1)/N·2·b·s·h each"
          : "not in the seed: per layer and micro-batch 4 all-to-alls forward and 4 backward, "
            "(N-1)/N·b·(s/N)·h each (Ulysses)";
  plan.Add("cp (attention)", 0, cp, formula);
  plan.rows.back().exposed_s = exposed;
}

void PipelineRows(PlanRows& plan) {
  if (plan.in.pp <= 1) return;
  if (plan.in.model.gpt) TiedEmbeddingRow(plan);
  BoundariesRow(plan);
  if (plan.in.ScatterGather()) GathersRow(plan);
}

}  // namespace tally::plan
