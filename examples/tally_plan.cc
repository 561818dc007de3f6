// tally_plan: the bytes each parallel strategy moves per training step, by the seed
// article's formula and by the exact one, with time and memory per GPU, for models far
// beyond this machine (lab/plan/plan.h).
//
//   tally_plan --model=llama-7b --dp=4                     the strategies for 4 GPUs
//   tally_plan --model=llama-70b --dp=8 --tp=8 --pp=2 --gpus_per_node=8   which bytes ride
//                                                            NVLink, which InfiniBand
//   tally_plan --model=llama-70b --dp=8 --tp=8 --pp=2 --json
//   tally_plan --model=llama-7b --sweep=dp:2,4,8,16       one CSV row per value
//   tally_plan --seed_examples                             the article's numbers, checked
#include <cmath>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "examples/example_main.h"
#include "examples/tally_plan_modes.h"
#include "lab/plan/plan.h"
#include "core/runtime/json_writer.h"
#include "core/runtime/status_macros.h"

ABSL_FLAG(std::string, model, "llama-7b",
          "preset: toy, gpt2-124m, llama-7b, llama-13b, llama-70b");
ABSL_FLAG(std::optional<int64_t>, params, std::nullopt, "parameters Φ (overrides the preset's)");
ABSL_FLAG(std::optional<int>, layers, std::nullopt, "transformer layers (overrides the preset's)");
ABSL_FLAG(std::optional<int>, hidden, std::nullopt, "hidden size h (overrides the preset's)");
ABSL_FLAG(std::optional<int>, n_layer, std::nullopt,
          "tally's GPT of this shape (with --n_embd --n_head --vocab_size --seq_len; each "
          "unset one from the preset): Φ and the activations derived exactly");
ABSL_FLAG(std::optional<int>, n_embd, std::nullopt, "tally's GPT: channels (see --n_layer)");
ABSL_FLAG(std::optional<int>, n_head, std::nullopt, "tally's GPT: attention heads (see --n_layer)");
ABSL_FLAG(std::optional<int>, vocab_size, std::nullopt,
          "tally's GPT: token embedding rows (see --n_layer)");
ABSL_FLAG(int, batch_size, 4, "b: sequences per data-parallel rank per step");
ABSL_FLAG(int, seq_len, 2048, "s: tokens per sequence");
ABSL_FLAG(std::string, precision, "bf16",
          "fp32 or bf16: bytes a value sent (4 or 2) and the memory line marked");
ABSL_FLAG(std::string, grad_accum, "bf16",
          "--precision=bf16: bf16 or fp32 gradients (Megatron's main_grad: 2 + 4 + 12)");
ABSL_FLAG(std::optional<int>, bytes_per_value, std::nullopt,
          "e: bytes a value sent (default: the precision's, 2 or 4)");
ABSL_FLAG(int, dp, 1, "data-parallel GPUs");
ABSL_FLAG(int, tp, 1, "tensor-parallel GPUs");
ABSL_FLAG(int, pp, 1, "pipeline stages");
ABSL_FLAG(int, zero, 0, "ZeRO stage, for the memory per GPU");
ABSL_FLAG(std::string, zero_shard, "dp",
          "dp, or node: HSDP, ZeRO over each node's share of the dp group (the memory, and "
          "the rows hsdp zero-1/2/3; with --gpus_per_node or --cluster)");
ABSL_FLAG(bool, zero3_reshard_after_forward, true,
          "false adds the row zero-3, no reshard (a unit kept from forward to backward)");
ABSL_FLAG(bool, zero_hpz, false,
          "adds the row zero-3 + hpz (ZeRO++'s secondary copy inside the node) and, with "
          "--zero=3, its memory; with --gpus_per_node or --cluster");
ABSL_FLAG(bool, zero_quantized_weights, false,
          "adds the row zero-3 + qwz (ZeRO++'s gathers as int8 with a scale a block)");
ABSL_FLAG(bool, zero_quantized_gradients, false,
          "adds the row zero-3 + qgz (ZeRO++'s reduce-scatter as int8 all-to-alls, inside the "
          "node then across with --gpus_per_node)");
ABSL_FLAG(int32_t, zero_quant_grad_bits, 8, "bits a gradient takes in the row zero-3 + qgz: 8 or 4");
ABSL_FLAG(int64_t, zero_quant_block, 256, "values a quantised block holds (one fp32 scale each)");
ABSL_FLAG(std::string, grad_compression, "none",
          "none; powersgd: the row dp powersgd (r=...), PowerSGD's step after its warm-up "
          "(tally's GPT shapes, --zero=0); or onebit_adam: the row dp 1-bit adam, 1-bit Adam's "
          "step after its warm-up (--zero=0)");
ABSL_FLAG(int, powersgd_rank, 1, "PowerSGD's rank r");
ABSL_FLAG(int, micro_batches, 1, "micro-batches per data-parallel rank and step");
ABSL_FLAG(int, n_experts, 0,
          "experts in every layer's MLP (tally's MLP shape, 8h^2 + 5h each; 0: dense); Φ "
          "includes them");
ABSL_FLAG(int, moe_top_k, 2, "experts each token goes to");
ABSL_FLAG(int, ep, 1,
          "expert parallelism: each layer's experts split over this many dp ranks (of the dp x "
          "cp GPUs under --cp)");
ABSL_FLAG(int, cp, 1,
          "context parallelism: each sequence cut into this many pieces, one a GPU (tally_train's "
          "--cp); the weights' replicas and ZeRO's shards span dp x cp");
ABSL_FLAG(std::string, cp_comm, "p2p",
          "attention over the cp group: p2p (ring attention), allgather (K, V gathered) or a2a "
          "(Ulysses' all-to-alls)");
ABSL_FLAG(std::string, cp_load_balance, "zigzag",
          "zigzag (rank r holds chunks r and 2cp-1-r, even causal work) or none (contiguous "
          "pieces: the last rank computes the most)");
ABSL_FLAG(int, virtual_stages, 1,
          "chunks of layers a pipeline stage holds (> 1: the interleaved schedule)");
ABSL_FLAG(std::string, allreduce, "ring",
          "ring, naive or hierarchical (rings inside each node, then across nodes)");
ABSL_FLAG(bool, sequence_parallel, false, "Megatron sequence parallelism");
ABSL_FLAG(bool, recompute, false,
          "recompute in backward, --recompute_granularity's way (full unless it says selective)");
ABSL_FLAG(std::string, recompute_granularity, "",
          "full: a pipeline stage's forward again in backward (pp > 1), or each layer's "
          "(pp = 1); selective: attention's probabilities made again; either turns --recompute "
          "on");
ABSL_FLAG(std::string, recompute_method, "stage",
          "full recompute on a pipeline: stage (its whole forward again) or layer (each "
          "layer's, from its kept input)");
ABSL_FLAG(bool, pp_scatter_gather, false,
          "Megatron's scatter/gather: a stage sends each tp rank's 1/tp of a boundary, the "
          "receiving tp group all-gathers it (pp > 1, tp > 1, no --sequence_parallel)");
ABSL_FLAG(bool, overlap, false,
          "tally_train's --overlap: the data-parallel calls posted while backward goes on; the "
          "predicted step hides them behind the compute they overlap (without a pipeline)");
ABSL_FLAG(double, bucket_mb, 25, "tally_train's --bucket_mb: DDP's gradient buckets, MiB");
ABSL_FLAG(std::string, schedule, "1f1b",
          "pipeline schedule for tally's GPT's activations: gpipe or 1f1b (interleaved: "
          "--virtual_stages)");
ABSL_FLAG(int, gpus_per_node, 0,
          "GPUs per node: GPUs r and r' share a node iff r/G == r'/G (0: every GPU on one node)");
ABSL_FLAG(std::string, order, "tp-dp-pp",
          "the grid's rank order, fastest-varying first (any permutation of tp, dp, pp)");
ABSL_FLAG(std::string, link_intra, "600,1",
          "the link inside a node, BANDWIDTH,LATENCY in GB/s and microseconds (NVLink)");
ABSL_FLAG(std::string, link_inter, "25,2",
          "the link across nodes, BANDWIDTH,LATENCY (one 200 Gb/s InfiniBand NIC per GPU)");
ABSL_FLAG(bool, seed_examples, false, "the seed article's examples, its figures next to ours");
ABSL_FLAG(std::string, sweep, "", "dim:v1,v2,... (dim: dp, tp, pp, cp, batch_size) -> CSV");
ABSL_FLAG(bool, json, false, "print one JSON object instead of the table");
ABSL_FLAG(std::string, cluster, "",
          "a100, h100, or a JSON file (lab/plan/plan.h): GPUs per node, links and the TFLOP/s a "
          "GPU achieves; replaces --link_intra --link_inter (and --gpus_per_node unless given) "
          "and times the step");
ABSL_FLAG(bool, search, false,
          "every grid of --world GPUs (dp x cp x tp x pp with cp up to --cp, ZeRO, "
          "micro-batches) whose memory fits "
          "--gpu_memory_gb, fastest predicted step first (--cluster)");
ABSL_FLAG(bool, explain, false,
          "the seed's selection flow (its 6.2) for --model on --world GPUs, each test with its "
          "numbers, beside --search's fastest grid, and the dry run that checks it (--cluster: "
          "a100 unless given)");
ABSL_FLAG(int, world, 0, "--search, --explain: the GPUs (0: dp x cp x tp x pp)");
ABSL_FLAG(int, global_batch_size, 0,
          "--search, --explain: sequences per step (0: --batch_size x --dp, or x --world for "
          "--explain)");
ABSL_FLAG(double, gpu_memory_gb, 80,
          "--search, --explain: memory per GPU, GB (1e9 bytes; --explain: the cluster's unless "
          "given)");

namespace tally {
namespace {

using plan::PlanInput;
using plan::PlanRow;

// Long, and kept whole: one flag after another, each checked where it is read.
absl::StatusOr<plan::PlanInput> InputFromFlags() {
  ASSIGN_OR_RETURN(plan::PlanModel model, plan::ModelPreset(absl::GetFlag(FLAGS_model)));
  // A size given overrides the preset's; the header then names both.
  std::string overrides;
  auto override_with = [&](const char* flag, auto given, auto& field) -> absl::Status {
    if (!given.has_value()) return absl::OkStatus();
    if (*given < 1) {
      return absl::InvalidArgumentError(absl::StrCat("[flags] --", flag, " must be >= 1, got ", *given));
    }
    field = *given;
    absl::StrAppend(&overrides, " --", flag, "=", *given);
    model.gpt = false;  // a shape of its own: the formulas over Φ
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(override_with("params", absl::GetFlag(FLAGS_params), model.params));
  RETURN_IF_ERROR(override_with("layers", absl::GetFlag(FLAGS_layers), model.layers));
  RETURN_IF_ERROR(override_with("hidden", absl::GetFlag(FLAGS_hidden), model.hidden));
  if (!overrides.empty()) model.name = absl::StrCat(model.name, " with", overrides);
  // tally's GPT of a given shape: the preset's (a GPT preset's config, or another's layers
  // and hidden size with heads of 128 and a 32000-token vocabulary) under the flags given.
  const auto n_layer = absl::GetFlag(FLAGS_n_layer), n_embd = absl::GetFlag(FLAGS_n_embd),
             n_head = absl::GetFlag(FLAGS_n_head), vocab = absl::GetFlag(FLAGS_vocab_size);
  if (n_layer || n_embd || n_head || vocab) {
    if (!overrides.empty()) {
      return absl::InvalidArgumentError(
          "[flags] --params, --layers or --hidden describe another model than tally's GPT: "
          "give them or --n_layer, --n_embd, --n_head, --vocab_size, not both");
    }
    model::GPTConfig config = model.config;
    if (!model.gpt) {
      config.n_layer = model.layers;
      config.n_embd = model.hidden;
      config.n_head = std::max(1, model.hidden / 128);
      config.vocab_size = 32000;
    }
    config.n_layer = n_layer.value_or(config.n_layer);
    config.n_embd = n_embd.value_or(config.n_embd);
    config.n_head = n_head.value_or(config.n_head);
    config.vocab_size = vocab.value_or(config.vocab_size);
    config.seq_len = absl::GetFlag(FLAGS_seq_len);
    RETURN_IF_ERROR(config.Validate());
    model = plan::GptShape(config);
  }
  const int experts = absl::GetFlag(FLAGS_n_experts), top_k = absl::GetFlag(FLAGS_moe_top_k);
  if (experts < 0 || (experts > 0 && (top_k < 1 || top_k > experts))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "[flags] --n_experts must be >= 0 and --moe_top_k in [1, n_experts], got ", experts,
        " and ", top_k));
  }
  plan::PlanInput in{plan::WithExperts(model, experts, top_k)};
  if (in.model.params < 0 || (in.model.gpt && !in.model.config.Validate().ok())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "[flags] --n_experts=", experts, " gives more than ", model::GPTConfig::kMaxParams,
        " parameters, the most tally counts"));
  }
  in.n_experts = experts;
  in.moe_top_k = top_k;
  in.ep = absl::GetFlag(FLAGS_ep);
  in.batch = absl::GetFlag(FLAGS_batch_size);
  in.seq_len = absl::GetFlag(FLAGS_seq_len);
  ASSIGN_OR_RETURN(in.precision, train::ParsePrecision("precision", absl::GetFlag(FLAGS_precision)));
  ASSIGN_OR_RETURN(const DType accum, train::ParsePrecision("grad_accum", absl::GetFlag(FLAGS_grad_accum)));
  in.fp32_grad_accum = in.precision == DType::kBF16 && accum == DType::kF32;
  in.bytes_per_value =
      absl::GetFlag(FLAGS_bytes_per_value).value_or(int(SizeOf(in.precision)));
  in.dp = absl::GetFlag(FLAGS_dp);
  in.tp = absl::GetFlag(FLAGS_tp);
  in.pp = absl::GetFlag(FLAGS_pp);
  in.zero = absl::GetFlag(FLAGS_zero);
  ASSIGN_OR_RETURN(in.zero_shard, parallel::ParseZeroShard(absl::GetFlag(FLAGS_zero_shard)));
  in.zero3_reshard_after_forward = absl::GetFlag(FLAGS_zero3_reshard_after_forward);
  in.zero_hpz = absl::GetFlag(FLAGS_zero_hpz);
  in.zero_quantized_weights = absl::GetFlag(FLAGS_zero_quantized_weights);
  in.zero_quantized_gradients = absl::GetFlag(FLAGS_zero_quantized_gradients);
  in.zero_quant_grad_bits = absl::GetFlag(FLAGS_zero_quant_grad_bits);
  in.zero_quant_block = absl::GetFlag(FLAGS_zero_quant_block);
  ASSIGN_OR_RETURN(in.grad_compression,
                   parallel::ParseGradCompression(absl::GetFlag(FLAGS_grad_compression)));
  in.powersgd_rank = absl::GetFlag(FLAGS_powersgd_rank);
  in.cp = absl::GetFlag(FLAGS_cp);
  ASSIGN_OR_RETURN(in.cp_comm, parallel::ParseCpComm(absl::GetFlag(FLAGS_cp_comm)));
  ASSIGN_OR_RETURN(in.cp_load_balance,
                   parallel::ParseCpLoadBalance(absl::GetFlag(FLAGS_cp_load_balance)));
  in.micro_batches = absl::GetFlag(FLAGS_micro_batches);
  in.virtual_stages = absl::GetFlag(FLAGS_virtual_stages);
  in.sequence_parallel = absl::GetFlag(FLAGS_sequence_parallel);
  ASSIGN_OR_RETURN(const train::RecomputeChoice recompute,
                   train::ParseRecompute(absl::GetFlag(FLAGS_recompute),
                                         absl::GetFlag(FLAGS_recompute_granularity)));
  in.recompute = recompute.full;
  in.recompute_attention = recompute.selective;
  ASSIGN_OR_RETURN(in.recompute_layers,
                   train::ParseRecomputeMethod(absl::GetFlag(FLAGS_recompute_method)));
  in.pp_scatter_gather = absl::GetFlag(FLAGS_pp_scatter_gather);
  in.overlap = absl::GetFlag(FLAGS_overlap);
  in.bucket_mb = absl::GetFlag(FLAGS_bucket_mb);
  if (!(in.bucket_mb > 0) || !(in.bucket_mb <= 1 << 20)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "[flags] --bucket_mb must be in (0, 2^20] MiB, got ", in.bucket_mb));
  }
  ASSIGN_OR_RETURN(const parallel::PipelineSchedule schedule,
                   parallel::ParsePipelineSchedule(absl::GetFlag(FLAGS_schedule)));
  if (schedule == parallel::PipelineSchedule::kInterleaved) {
    return absl::InvalidArgumentError(
        "[flags] tally_plan's interleaved schedule is --virtual_stages=v (v >= 2)");
  }
  in.gpipe = schedule == parallel::PipelineSchedule::kGPipe;
  ASSIGN_OR_RETURN(in.allreduce, train::ParseAllReduce(absl::GetFlag(FLAGS_allreduce)));
  in.gpus_per_node = absl::GetFlag(FLAGS_gpus_per_node);
  if (in.gpus_per_node < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "[flags] --gpus_per_node must be at least 1 (or 0: one node), got ", in.gpus_per_node));
  }
  ASSIGN_OR_RETURN(in.order, parallel::ParseOrder(absl::GetFlag(FLAGS_order)));
  ASSIGN_OR_RETURN(in.cluster.intra, comm::ParseLinkModel("link_intra", absl::GetFlag(FLAGS_link_intra)));
  ASSIGN_OR_RETURN(in.cluster.inter, comm::ParseLinkModel("link_inter", absl::GetFlag(FLAGS_link_inter)));
  if (!absl::GetFlag(FLAGS_cluster).empty()) {
    ASSIGN_OR_RETURN(const train::ClusterPreset cluster, train::LoadCluster(absl::GetFlag(FLAGS_cluster)));
    if (in.gpus_per_node == 0) in.gpus_per_node = cluster.gpus_per_node;  // as tally_train
    in.cluster = cluster.links;
    in.gpu = cluster.gpu;
  }
  auto positive = [](const char* flag, int64_t v) -> absl::Status {
    if (v >= 1) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrFormat("[flags] --%s must be >= 1, got %d", flag, v));
  };
  RETURN_IF_ERROR(positive("params", in.model.params));
  RETURN_IF_ERROR(positive("layers", in.model.layers));
  RETURN_IF_ERROR(positive("hidden", in.model.hidden));
  RETURN_IF_ERROR(positive("batch_size", in.batch));
  RETURN_IF_ERROR(positive("seq_len", in.seq_len));
  if (in.bytes_per_value != 1 && in.bytes_per_value != 2 && in.bytes_per_value != 4 &&
      in.bytes_per_value != 8) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "[flags] --bytes_per_value must be 1, 2, 4 or 8, got %d", in.bytes_per_value));
  }
  RETURN_IF_ERROR(positive("dp", in.dp));
  RETURN_IF_ERROR(positive("tp", in.tp));
  RETURN_IF_ERROR(positive("pp", in.pp));
  RETURN_IF_ERROR(positive("cp", in.cp));
  RETURN_IF_ERROR(positive("micro_batches", in.micro_batches));
  RETURN_IF_ERROR(plan::CheckGrid(in));
  RETURN_IF_ERROR(positive("virtual_stages", in.virtual_stages));
  RETURN_IF_ERROR(positive("ep", in.ep));
  if (in.ep > 1 && (in.n_experts == 0 || in.n_experts % in.ep != 0 || in.dp % in.ep != 0) &&
      in.cp == 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "[flags] --ep=%d needs --n_experts divisible by it and --dp divisible by it (got "
        "--n_experts=%d --dp=%d)",
        in.ep, in.n_experts, in.dp));
  }
  if (in.ep > 1 && (in.n_experts == 0 || in.n_experts % in.ep != 0 || (in.dp * in.cp) % in.ep != 0)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "[flags] --ep=%d needs --n_experts divisible by it and --dp x --cp divisible by it (got "
        "--n_experts=%d --dp=%d --cp=%d)",
        in.ep, in.n_experts, in.dp, in.cp));
  }
  if (int64_t(in.pp) * in.virtual_stages > in.model.layers) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "[flags] --pp=%d x --virtual_stages=%d is more stages than the %d layers", in.pp,
        in.virtual_stages, in.model.layers));
  }
  if (in.virtual_stages > 1 && in.micro_batches % in.pp != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "[flags] --virtual_stages > 1 (interleaved) runs micro-batches in groups of --pp: "
        "--micro_batches=%d is not a multiple of --pp=%d",
        in.micro_batches, in.pp));
  }
  if (in.zero < 0 || in.zero > 3) return absl::InvalidArgumentError("[flags] --zero must be 0, 1, 2 or 3");
  RETURN_IF_ERROR(plan::CheckZeroShard(in));
  RETURN_IF_ERROR(plan::CheckGradCompression(in));
  RETURN_IF_ERROR(plan::CheckQuantization(in));
  if (in.batch % in.micro_batches != 0) {
    return absl::InvalidArgumentError("[flags] --batch_size must be a multiple of --micro_batches");
  }
  return in;
}

// Flags that would be ignored are refused: --seed_examples takes none but --json, --sweep
// prints CSV of one grid at a time, and --search's own flags need --search.
absl::Status CheckModes() {
  auto refuse = [](auto... parts) { return absl::InvalidArgumentError(absl::StrCat("[flags] ", parts...)); };
  if (absl::GetFlag(FLAGS_seed_examples)) {
    const std::vector<std::string> others = FlagsGivenBut({"seed_examples", "json"});
    if (!others.empty()) {
      return refuse("--seed_examples prints the seed's own examples and takes no flag but --json; "
                    "got ", absl::StrJoin(others, " "));
    }
  }
  if (!absl::GetFlag(FLAGS_sweep).empty() && (absl::GetFlag(FLAGS_search) || absl::GetFlag(FLAGS_json))) {
    return refuse("--sweep prints CSV rows of the plan; it takes neither --search nor --json");
  }
  if (absl::GetFlag(FLAGS_explain)) {
    if (absl::GetFlag(FLAGS_search) || absl::GetFlag(FLAGS_seed_examples) ||
        !absl::GetFlag(FLAGS_sweep).empty()) {
      return refuse("--explain puts the search's fastest grid beside the flow's; it takes none of "
                    "--search, --seed_examples and --sweep");
    }
    bool model = false;
    for (const char* flag : {"model", "params", "n_layer", "n_embd", "n_head"}) model |= FlagGiven(flag);
    if (!model) {
      return refuse("--explain walks the seed's flow for a model: give --model (toy, gpt2-124m, "
                    "llama-7b, llama-13b, llama-70b) or a GPT shape (--n_layer ...)");
    }
  } else if (!absl::GetFlag(FLAGS_search)) {
    for (const char* flag : {"world", "global_batch_size", "gpu_memory_gb"}) {
      if (FlagGiven(flag)) return refuse("--", flag, " is --search's: give --search too");
    }
  }
  if (FlagGiven("cluster") && (FlagGiven("link_intra") || FlagGiven("link_inter"))) {
    return refuse("--cluster names its links: give it or --link_intra and --link_inter, not both");
  }
  return absl::OkStatus();
}

absl::Status Main() {
  RETURN_IF_ERROR(CheckModes());
  if (absl::GetFlag(FLAGS_seed_examples)) {
    plan::PrintSeedExamples(absl::GetFlag(FLAGS_json), std::cout);
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(plan::PlanInput in, InputFromFlags());
  if (!absl::GetFlag(FLAGS_sweep).empty()) return Sweep(in, absl::GetFlag(FLAGS_sweep));
  if (absl::GetFlag(FLAGS_search)) return Search(in);
  if (absl::GetFlag(FLAGS_explain)) return Explain(in);
  if (absl::GetFlag(FLAGS_json)) {
    plan::PrintPlanJson(in, std::cout);
  } else {
    plan::PrintPlan(in, std::cout);
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace tally

int main(int argc, char** argv) {
  tally::SetHelpSections({
      {"model", {"model", "params", "layers", "hidden", "n_layer", "n_embd", "n_head", "vocab_size",
                 "seq_len", "n_experts", "moe_top_k"}},
      {"batch and precision",
       {"batch_size", "micro_batches", "precision", "grad_accum", "bytes_per_value"}},
      {"data parallelism and ZeRO",
       {"dp", "zero", "zero_shard", "zero3_reshard_after_forward", "zero_hpz",
        "zero_quantized_weights", "zero_quantized_gradients", "zero_quant_grad_bits", "zero_quant_block", "grad_compression",
        "powersgd_rank", "allreduce", "overlap", "bucket_mb"}},
      {"tensor and expert parallelism", {"tp", "sequence_parallel", "ep"}},
      {"context parallelism", {"cp", "cp_comm", "cp_load_balance"}},
      {"pipeline parallelism and recompute",
       {"pp", "schedule", "virtual_stages", "pp_scatter_gather", "recompute",
        "recompute_granularity", "recompute_method"}},
      {"the cluster", {"cluster", "gpus_per_node", "order", "link_intra", "link_inter"}},
      {"what to print", {"json", "sweep", "seed_examples"}},
      {"--search and --explain: the fastest grids that fit, the seed's flow",
       {"search", "explain", "world", "global_batch_size", "gpu_memory_gb"}},
  });
  return tally::RunExample(argc, argv, "bytes per GPU per step by strategy: tally_plan --model=llama-7b --dp=4",
                           tally::Main);
}
