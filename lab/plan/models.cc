// The planner's models (plan.h): the presets, tally's GPT of a shape, experts, the
// options a plan describes, and the memory a GPU holds (model states and activations).
#include "lab/plan/plan.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/parallel/pipeline_schedule.h"
#include "lab/report/report.h"

namespace tally::plan {

// One layer's experts' values (0: dense).
double ExpertValues(const PlanInput& in) {
  const double h = in.model.hidden;
  return double(in.n_experts) * (8 * h * h + 5 * h);
}

// The stages that can hold the most of anything per GPU under balanced layers
// (StageLayers gives the first stages, and the first virtual stages, the extra layers):
// the first (the most layers, the position embedding, the most micro-batches in flight),
// the second (as many layers as the first, without its embeddings) and the last (wte, ln_f
// and the LM head's logits). Any other stage holds no more than the second.
std::vector<int> CandidateStages(int pp) {
  std::vector<int> stages = {0};
  if (pp > 2) stages.push_back(1);
  if (pp > 1) stages.push_back(pp - 1);
  return stages;
}

absl::StatusOr<PlanModel> ModelPreset(const std::string& name) {
  PlanModel m;
  m.name = name;
  if (name == "toy" || name == "gpt2-124m") {
    m.gpt = true;
    if (name == "gpt2-124m") {
      m.config.n_layer = 12;
      m.config.n_head = 12;
      m.config.n_embd = 768;
      m.config.seq_len = 1024;
      m.config.vocab_size = 256;  // tally's byte vocabulary (GPT-2's 50257 in its own)
    }
    m.params = m.config.NumParams();
    m.layers = m.config.n_layer;
    m.hidden = m.config.n_embd;
    return m;
  }
  struct Shape {
    const char* name;
    int64_t params;
    int layers, hidden;
  };
  for (const Shape& s : {Shape{"llama-7b", 7'000'000'000, 32, 4096},
                         Shape{"llama-13b", 13'000'000'000, 40, 5120},
                         Shape{"llama-70b", 70'000'000'000, 80, 8192}}) {
    if (name == s.name) {
      m.params = s.params;
      m.layers = s.layers;
      m.hidden = s.hidden;
      return m;
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "[flags] --model must be toy, gpt2-124m, llama-7b, llama-13b or llama-70b, got '", name, "'"));
}

PlanModel GptShape(const model::GPTConfig& config) {
  PlanModel m;
  m.gpt = true;
  m.config = config;
  m.name = absl::StrCat("gpt (n_layer ", config.n_layer, ", n_head ", config.n_head, ", n_embd ",
                        config.n_embd, ", vocab_size ", config.vocab_size, ")");
  m.params = config.NumParams();
  m.layers = config.n_layer;
  m.hidden = config.n_embd;
  return m;
}

PlanModel WithExperts(PlanModel model, int experts, int top_k) {
  if (experts <= 0) return model;
  if (model.gpt) {
    model.config.n_experts = experts;
    model.config.moe_top_k = top_k;
    model.params = model.config.NumParams();
    return model;
  }
  const double h = model.hidden, mlp = 8 * h * h + 5 * h;
  // Past GPTConfig's ceiling the count is not kept (tally_plan refuses it).
  const double params = double(model.params) + model.layers * ((experts - 1) * mlp + experts * h);
  model.params = params > model::GPTConfig::kMaxParams ? -1 : int64_t(params);
  return model;
}

train::TrainOptions PlanAsTrainOptions(const PlanInput& in) {
  train::TrainOptions o;
  o.model = in.model.config;
  o.model.seq_len = in.seq_len;
  o.parallel.dp = in.dp;
  o.parallel.tp = in.tp;
  o.parallel.pp = in.pp;
  if (in.virtual_stages > 1) {
    o.parallel.schedule = parallel::PipelineSchedule::kInterleaved;
    o.parallel.virtual_stages = in.virtual_stages;
  } else if (in.gpipe) {
    o.parallel.schedule = parallel::PipelineSchedule::kGPipe;
  }
  o.parallel.zero = in.zero;
  o.parallel.zero_shard = in.zero_shard;
  o.parallel.zero3_reshard_after_forward = in.zero3_reshard_after_forward;
  o.parallel.zero_hpz = in.zero_hpz;
  o.parallel.zero_quantized_weights = in.zero_quantized_weights;
  o.parallel.zero_quantized_gradients = in.zero_quantized_gradients;
  o.parallel.zero_quant_grad_bits = in.zero_quant_grad_bits;
  o.parallel.zero_quant_block = in.zero_quant_block;
  o.parallel.grad_compression = in.grad_compression;
  o.parallel.powersgd_rank = in.powersgd_rank;
  o.parallel.powersgd_warmup_steps = 0;  // the plan prices a compressed step
  o.parallel.ep = in.ep;
  o.parallel.cp = in.cp;
  o.parallel.cp_comm = in.cp_comm;
  o.parallel.cp_load_balance = in.cp_load_balance;
  o.parallel.sequence_parallel = in.sequence_parallel;
  o.parallel.recompute = in.recompute;
  o.parallel.recompute_layers = in.recompute_layers;
  o.parallel.recompute_attention = in.recompute_attention;
  o.parallel.pp_scatter_gather = in.pp_scatter_gather;
  o.parallel.overlap = in.overlap;
  o.parallel.bucket_mb = in.bucket_mb;
  o.training.global_batch_size = in.batch * in.dp;
  o.training.micro_batch_size = in.batch / std::max(1, in.micro_batches);
  o.parallel.allreduce = in.allreduce;
  o.precision.dtype = in.precision;
  o.precision.fp32_grad_accum = in.fp32_grad_accum;
  o.placement.order = in.order;
  o.placement.gpus_per_node = in.gpus_per_node;
  o.cluster.links = in.cluster;
  // Another vocabulary than the bytes' is a dry run's (options.h).
  o.dry_run = o.model.vocab_size != 256;
  return o;
}

namespace {

// The world ranks of dp rank 0 and tp rank 0 of those stages: the stages' first ranks,
// which hold their stage's largest ZeRO chunks (ChunkOf gives the first ranks the larger
// ones, of the vocabulary too).
std::vector<int> StageFirstRanks(const train::TrainOptions& o) {
  std::vector<int> ranks;
  const parallel::Topology grid = o.topology();
  for (int stage : CandidateStages(o.parallel.pp)) ranks.push_back(grid.RankAt({0, 0, stage}));
  return ranks;
}

}  // namespace

PlanActivations PlanActivationsPerGpu(const PlanInput& in) {
  PlanActivations out;
  out.bubble = in.pp > 1 ? parallel::TheoreticalBubble(in.pp, in.micro_batches, in.virtual_stages)
                         : 0.0;
  if (!in.model.gpt) return out;
  const train::TrainOptions o = PlanAsTrainOptions(in);
  for (int r : StageFirstRanks(o)) {
    const int64_t bytes = report::PredictedMemory(o, r).activations;
    const int stage = o.topology().Of(r).pp;
    if (bytes < 0) return {-1, stage, out.bubble};
    if (bytes > out.bytes_per_gpu) out = {bytes, stage, out.bubble};
  }
  return out;
}

std::vector<PlanMemory> PlanMemoryPerGpu(const PlanInput& in) {
  // Under expert parallelism a GPU holds E/ep of each layer's experts, which ZeRO shards
  // over the dp/ep ranks of the edp group; the rest over the dp group.
  const double stage = double(in.tp) * in.pp;
  const double experts = in.model.layers * ExpertValues(in) / in.ep / stage;
  const double dense = (double(in.model.params) - in.model.layers * ExpertValues(in)) / stage;
  // The dp group: dp·cp GPUs; under HSDP its share on a node.
  const double replicas = in.zero_shard == parallel::ZeroShard::kNode && in.zero >= 1
                              ? double(plan::ShardGpus(in))
                              : double(in.dp) * in.cp;
  auto sharded = [&](bool sharding) {
    return sharding ? dense / replicas + experts / (replicas / in.ep) : dense + experts;
  };
  std::vector<PlanMemory> lines = {{"fp32: 4 + 4 + 8", 4, 4, 8},
                                   {"bf16: 2 + 2 + 12", 2, 2, 12},
                                   {"bf16, fp32 grad accumulation: 2 + 4 + 12", 2, 4, 12}};
  for (PlanMemory& m : lines) {
    m.bytes_per_gpu = m.params * sharded(in.zero >= 3) + m.grads * sharded(in.zero >= 2) +
                      m.optimizer * sharded(in.zero >= 1);
    // hpZ's secondary copy of the parameters, over a node's share of the dp group.
    if (in.zero_hpz && in.zero == 3) m.bytes_per_gpu += m.params * (dense + experts) / ShardGpus(in);
  }
  if (!in.model.gpt) return lines;
  for (size_t i = 0; i < lines.size(); ++i) lines[i].bytes_per_gpu = PlanMemoryLine(in, i);
  return lines;
}

double PlanMemoryLine(const PlanInput& in, size_t line) {
  if (!in.model.gpt) return PlanMemoryPerGpu(in)[line].bytes_per_gpu;
  // tally's GPT: exactly what the busiest stage's dp rank 0 holds (report::PredictedMemory; the
  // first ranks take the larger chunks of ZeRO's uneven cuts).
  const std::pair<DType, bool> precisions[] = {
      {DType::kF32, false}, {DType::kBF16, false}, {DType::kBF16, true}};
  train::TrainOptions o = PlanAsTrainOptions(in);
  o.precision.dtype = precisions[line].first;
  o.precision.fp32_grad_accum = precisions[line].second;
  double most = 0;
  for (int r : StageFirstRanks(o)) {
    const report::MemoryFormula f = report::PredictedMemory(o, r);
    most = std::max(most, double(f.params + f.grads + f.optimizer));
  }
  return most;
}

}  // namespace tally::plan
