// The planner's compute (plan.h's StageWork): what each pipeline stage's kernels do in
// one step, counted by the same formulas the kernels count into a run's timeline
// (core/runtime/kernels/work.h), so that the planner and the replay of a dry run price the
// same work on the same GPU (cluster.h).
#include <algorithm>
#include <functional>
#include <vector>

#include "core/parallel/context_parallel.h"
#include "core/parallel/pipeline_schedule.h"
#include "lab/plan/plan.h"
#include "core/runtime/kernels/work.h"
#include "core/runtime/timeline.h"

namespace tally::plan {
namespace {

// The work that `kernels` counts (work.h's Count functions) while it runs.
ComputeWork Counted(const std::function<void()>& kernels) {
  Timeline timeline;
  timeline.set_recording(true);
  {
    ScopedTimeline scope(&timeline);
    kernels();
  }
  ComputeWork work;
  for (const TimelineEntry& e : timeline.entries()) work += e.compute;
  return work;
}

// One micro-batch of b sequences through one layer of tally's GPT on a tp rank
// (core/model/block.cc): forward, backward, and what recompute runs again in backward.
struct LayerWork {
  ComputeWork forward, backward, attention;  // attention: its core forward (selective)
};

// The cp rank whose attention computes the most (the last without zigzag's balance).
int BusiestCpRank(const PlanInput& in, int heads) {
  int busiest = 0;
  int64_t most = -1;
  for (int r = 0; r < in.cp; ++r) {
    const int64_t work = parallel::ContextAttentionWork(in.cp_comm, in.cp_load_balance, in.cp, r,
                                                        in.seq_len, heads);
    if (work > most) {
      most = work;
      busiest = r;
    }
  }
  return busiest;
}

// Attention's core on b sequences of this rank's c channels and heads: serial attention
// over t positions, or under context parallelism the busiest cp rank's blocks.
void CountAttention(const PlanInput& in, int b, int t, int c, int heads, bool forward) {
  if (in.cp > 1) {
    parallel::CountContextAttention(in.cp_comm, in.cp_load_balance, in.cp, BusiestCpRank(in, heads),
                                    b, in.seq_len, c, heads, forward);
  } else if (forward) {
    CountAttentionForward(b, t, c, heads);
  } else {
    CountAttentionBackward(b, t, c, heads);
  }
}

LayerWork OneLayer(const PlanInput& in, int b) {
  const model::GPTConfig& config = in.model.config;
  const int t = in.seq_len / in.cp, c = config.n_embd, n = b * t, tp = in.tp;
  const int rows = in.sequence_parallel ? n / tp : n;
  const int c_local = c / tp, heads = config.n_head / tp, hidden = 4 * c / tp;
  // A mixture of experts: the router, then each of this rank's E/ep experts on its even
  // share of the routed tokens (k of every token, from the ep ranks).
  const int experts = config.moe() ? config.n_experts / in.ep : 0;
  const int routed = config.moe() ? n * config.moe_top_k * in.ep / config.n_experts : 0;
  LayerWork w;
  w.forward = Counted([&] {
    CountLayerNormForward(rows, c);
    CountLinearForward(n, c, 3 * c_local);
    CountAttention(in, b, t, c_local, heads, /*forward=*/true);
    CountLinearForward(n, c_local, c);
    CountResidual(int64_t(rows) * c);
    CountLayerNormForward(rows, c);
    if (config.moe()) {
      CountLinearForward(n, c, config.n_experts);
      for (int e = 0; e < experts; ++e) {
        CountLinearForward(routed, c, 4 * c);
        CountGeluForward(int64_t(routed) * 4 * c);
        CountLinearForward(routed, 4 * c, c);
      }
    } else {
      CountLinearForward(n, c, hidden);
      CountGeluForward(int64_t(n) * hidden);
      CountLinearForward(n, hidden, c);
    }
    CountResidual(int64_t(rows) * c);
  });
  w.backward = Counted([&] {
    if (config.moe()) {
      for (int e = 0; e < experts; ++e) {
        CountLinearBackward(routed, 4 * c, c);
        CountGeluBackward(int64_t(routed) * 4 * c);
        CountLinearBackward(routed, c, 4 * c);
      }
      CountLinearBackward(n, c, config.n_experts);
    } else {
      CountLinearBackward(n, hidden, c);
      CountGeluBackward(int64_t(n) * hidden);
      CountLinearBackward(n, c, hidden);
    }
    CountLayerNormBackward(rows, c);
    CountLinearBackward(n, c_local, c);
    CountAttention(in, b, t, c_local, heads, /*forward=*/false);
    CountLinearBackward(n, c, 3 * c_local);
    CountLayerNormBackward(rows, c);
  });
  w.attention = Counted([&] { CountAttention(in, b, t, c_local, heads, /*forward=*/true); });
  return w;
}

// The last stage's end (core/model/gpt.cc): ln_f, the tied LM head over this rank's slice of
// the vocabulary, and the cross-entropy's passes; forward and backward.
std::pair<ComputeWork, ComputeWork> Head(const PlanInput& in, int b) {
  const model::GPTConfig& config = in.model.config;
  const int n = b * (in.seq_len / in.cp), c = config.n_embd;
  const int rows = in.sequence_parallel ? n / in.tp : n;
  const int vocab = (config.vocab_size + in.tp - 1) / in.tp;
  ComputeWork forward = Counted([&] {
    CountLayerNormForward(rows, c);
    CountLinearForward(n, c, vocab);
    CountLogitsPass(n, vocab, 1);
    CountLogitsPass(n, vocab, 2);
    CountLogitsPass(n, vocab, 2);
  });
  ComputeWork backward = Counted([&] {
    CountLogitsPass(n, vocab, 2);
    CountLinearBackward(n, c, vocab);
    CountLayerNormBackward(rows, c);
  });
  return {forward, backward};
}

}  // namespace

std::vector<ComputeWork> StageWork(const PlanInput& in) {
  const int m = std::max(1, in.micro_batches);
  if (!in.model.gpt) {
    // Another model: its FLOPs (6Φ + 12·L·h·s a token, a third more with full
    // recompute, 4·s·h a layer with selective) as matmuls of the curve's largest size; a
    // GPU computes s/cp of each sequence's tokens.
    const double h = double(in.model.hidden), s = in.seq_len;
    const double f = 6.0 * double(in.model.params) + 12.0 * in.model.layers * h * s;
    double again = 0;
    if (in.recompute) again = f / 3;
    if (in.recompute_attention) again = 4.0 * in.model.layers * h * s;
    ComputeWork w;
    w.AddMatmuls((f + again) * double(in.batch) * s / in.cp / in.tp / in.pp, 0, 1);
    return std::vector<ComputeWork>(size_t(in.pp), w);
  }
  const model::GPTConfig& config = in.model.config;
  const int b = std::max(1, in.batch / m);
  const LayerWork layer = OneLayer(in, b);
  const auto [head_forward, head_backward] = Head(in, b);
  const int v = std::max(1, in.virtual_stages);
  const std::vector<parallel::LayerRange> chunks =
      parallel::StageLayers(config.n_layer, in.pp * v, {}).value();
  // A layer's parameters on a tp rank (core/model/config.h's NumParams: 4h² + 8h for
  // attention and the LayerNorms, the MLP's 8h² + 5h over tp, or E/ep experts' and their
  // router's E·(8h² + 6h)/ep), and the ends': the embedding's slice and the positions on
  // the first stage, ln_f and (on a pipeline) the tied embedding's copy on the last.
  const double h = config.n_embd;
  const double local_layer = (4 * h * h + 8 * h) / in.tp +
                             (config.moe() ? double(config.MlpParams()) / in.ep
                                           : double(config.MlpParams()) / in.tp);
  std::vector<ComputeWork> stages;
  for (int stage = 0; stage < in.pp; ++stage) {
    int layers = 0;
    bool first = false, last = false;
    for (int c = 0; c < v; ++c) {
      const parallel::LayerRange& r = chunks[size_t(parallel::VirtualStage(c, in.pp, stage))];
      layers += r.end - r.begin;
      first = first || r.begin == 0;
      last = last || r.end == config.n_layer;
    }
    // One micro-batch through the stage: its layers forward and backward, recompute's
    // forward again (a stage's whole forward under stage recompute, the layers' under
    // layer recompute, attention's core under selective), and the LM head's on the last.
    ComputeWork micro = layer.forward.Times(layers);
    micro += layer.backward.Times(layers);
    if (in.recompute) micro += layer.forward.Times(layers);
    if (in.recompute_attention) micro += layer.attention.Times(layers);
    if (last) {
      micro += head_forward;
      micro += head_backward;
      if (in.StageRecompute()) micro += head_forward;
    }
    ComputeWork step = micro.Times(m);
    // AdamW over the stage's parameters on this rank (a dp-th of them under ZeRO).
    double params = layers * local_layer;
    if (first) params += double(config.vocab_size) * h / in.tp + double(config.seq_len) * h;
    if (last) params += 2 * h + (first ? 0 : double(config.vocab_size) * h / in.tp);
    if (in.zero >= 1) params /= double(in.dp) * in.cp;
    step += Counted([&] { CountAdamW(int64_t(params)); });
    stages.push_back(step);
  }
  return stages;
}

double RingExposedSeconds(const PlanInput& in, double send_s) {
  if (in.cp <= 1 || in.cp_comm != parallel::CpComm::kP2p || !in.gpu.given() || !in.model.gpt) {
    return -1;
  }
  const model::GPTConfig& config = in.model.config;
  const int b = std::max(1, in.batch / std::max(1, in.micro_batches));
  const int heads = config.n_head / in.tp, c = config.n_embd / in.tp;
  const int rank = BusiestCpRank(in, heads);
  double forward = 0;
  for (int step = 0; step + 1 < in.cp; ++step) {
    const double blocks = in.gpu.Seconds(Counted([&] {
      parallel::CountSourceBlocks(in.cp_load_balance, in.cp, rank,
                                  parallel::RingSource(rank, in.cp, step), b, in.seq_len, c, heads,
                                  /*forward=*/true);
    }));
    forward += std::max(0.0, send_s - blocks);
  }
  // Backward: each step's dK, dV send; full recompute runs the forward's ring once more.
  return forward * (in.recompute ? 2 : 1) + in.cp * send_s;
}

MicroBatchSeconds MicroBatchTimes(const PlanInput& in) {
  MicroBatchSeconds t;
  if (!in.model.gpt) return t;
  const int b = std::max(1, in.batch / std::max(1, in.micro_batches));
  const LayerWork layer = OneLayer(in, b);
  const auto [head_forward, head_backward] = Head(in, b);
  ComputeWork backward = layer.backward;
  if (in.recompute) backward += layer.forward;
  if (in.recompute_attention) backward += layer.attention;
  t.layer_forward = in.gpu.Seconds(layer.forward);
  t.layer_backward = in.gpu.Seconds(backward);
  t.head_forward = in.gpu.Seconds(head_forward);
  t.head_backward = in.gpu.Seconds(head_backward);
  return t;
}

}  // namespace tally::plan
