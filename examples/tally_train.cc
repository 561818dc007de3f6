// tally_train: train a GPT-2 style byte-level model.
//
//   tally_train --n_layer=4 --n_head=4 --n_embd=256 --seq_len=128 --global_batch_size=8 --steps=200
//
// With no --data it trains on the embedded corpus (core/data/corpus.h). One log line per step;
// --metrics_json writes the same as JSON lines; --save / --load read and write
// safetensors checkpoints (core/model/checkpoint.h).
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "examples/example_main.h"
#include "examples/job.h"
#include "lab/plan/plan.h"
#include "core/runtime/status_macros.h"
#include "core/train/trainer.h"

namespace {
const tally::train::TrainOptions kDefaults;
}  // namespace

ABSL_FLAG(int, n_layer, kDefaults.model.n_layer, "transformer blocks");
ABSL_FLAG(int, n_head, kDefaults.model.n_head, "attention heads (must divide n_embd)");
ABSL_FLAG(int, n_embd, kDefaults.model.n_embd, "channels");
ABSL_FLAG(int, seq_len, kDefaults.model.seq_len, "tokens per sequence (and positions in the table)");
ABSL_FLAG(int, vocab_size, kDefaults.model.vocab_size,
          "--dry_run only: the token embedding's rows (training is byte-level, 256)");
ABSL_FLAG(std::string, cluster, "",
          "a100, h100, or a JSON file: GPUs per node, links and the TFLOP/s a GPU achieves "
          "(replaces --link_intra --link_inter; --gpus_per_node unless given); the run is "
          "replayed on it");
ABSL_FLAG(std::string, slow_rank, "",
          "RANK:MS: that world rank computes MS milliseconds more at the start of every step "
          "(a busy loop on its thread's CPU clock; on the modelled clock too): the report names "
          "it as the peer the others waited for");
ABSL_FLAG(int, repeat, 1,
          "run the same configuration K times (from the same start) and print each clock's "
          "step and exposed share over them, min..median..max; the last run's report and files "
          "stay");
ABSL_FLAG(bool, dry_run, false,
          "run the real code on meta tensors (shapes, no values): every byte and every "
          "allocation counted at real size, no computation, no payload moved");
ABSL_FLAG(int, n_experts, kDefaults.model.n_experts,
          "experts in every block's MLP, behind a learned router (0: the dense MLP)");
ABSL_FLAG(int, moe_top_k, kDefaults.model.moe_top_k, "experts each token goes to");
ABSL_FLAG(double, capacity_factor, kDefaults.model.capacity_factor,
          "each expert takes at most ceil(c*k*tokens/E) tokens of a micro-batch (0: no limit)");
ABSL_FLAG(double, moe_aux_loss_coef, kDefaults.model.aux_loss_coef,
          "weight of the Switch load-balancing loss");
ABSL_FLAG(int, ep, kDefaults.parallel.ep,
          "expert parallelism: each layer's experts split over this many of the dp ranks "
          "(it divides --dp, or dp x cp, and --n_experts); tokens reach them by all-to-all");
ABSL_FLAG(int, global_batch_size, kDefaults.training.global_batch_size,
          "sequences per optimizer step");
ABSL_FLAG(int, micro_batch_size, kDefaults.training.micro_batch_size,
          "sequences per forward/backward per rank (0: global / dp); the rest of a rank's "
          "share is gradient accumulation");
ABSL_FLAG(int64_t, steps, kDefaults.training.steps,
          "optimizer steps (0 with --save writes the initial weights)");
ABSL_FLAG(double, lr, kDefaults.training.lr, "peak learning rate");
ABSL_FLAG(double, min_lr, kDefaults.training.min_lr,
          "learning rate at the end of the cosine decay");
ABSL_FLAG(int64_t, warmup_steps, kDefaults.training.warmup_steps, "linear warm-up steps");
ABSL_FLAG(double, weight_decay, kDefaults.training.weight_decay,
          "weight decay of 2-D weights: decoupled in AdamW, L2 (added to the gradient) in SGD");
ABSL_FLAG(double, grad_clip, kDefaults.training.grad_clip,
          "clip the global gradient norm to this (0: off)");
ABSL_FLAG(std::string, optimizer, tally::train::Name(kDefaults.training.optimizer),
          "adamw or sgd (momentum 0.9)");
ABSL_FLAG(uint64_t, seed, kDefaults.training.seed, "initialisation and sampling seed");
ABSL_FLAG(std::string, data, "", "a file of bytes to train on (default: the embedded corpus)");
ABSL_FLAG(int64_t, eval_every, kDefaults.data.eval_every, "validation loss every N steps (0: off)");
ABSL_FLAG(int, eval_batches, kDefaults.data.eval_batches,
          "validation micro-batches per evaluation");
ABSL_FLAG(int, sample_bytes, kDefaults.sampling.sample_bytes,
          "bytes of text to generate after training (0: off)");
ABSL_FLAG(double, temperature, kDefaults.sampling.temperature, "sampling temperature");
ABSL_FLAG(int, top_k, kDefaults.sampling.top_k, "sample among the k likeliest bytes (0: all)");
ABSL_FLAG(std::string, prompt, "", "the text a sample goes on from (default: a newline)");
ABSL_FLAG(bool, sample_only, false,
          "sample from --load's model without training (no data read, nothing written)");
ABSL_FLAG(std::string, save, "", "write a safetensors checkpoint here at the end");
ABSL_FLAG(int64_t, save_every, 0, "also write it every N steps (0: only at the end)");
ABSL_FLAG(std::string, load, "", "start from this checkpoint (its step and optimizer state, if any)");
ABSL_FLAG(std::string, metrics_json, "", "write one JSON object per step (and per evaluation) here");
ABSL_FLAG(int, threads, 0, "intra-op threads per rank (0: the cores shared out among the ranks)");
ABSL_FLAG(int, dp, 1, "data-parallel ranks");
ABSL_FLAG(int, tp, 1,
          "tensor-parallel ranks: every layer split Megatron-style (world = dp x tp x pp ranks)");
ABSL_FLAG(bool, sequence_parallel, false,
          "Megatron sequence parallelism: between the split layers each tp rank keeps seq_len/tp "
          "positions (all-gather + reduce-scatter instead of all-reduce)");
ABSL_FLAG(int, cp, 1,
          "context-parallel ranks: each sequence cut into cp pieces, one a rank; attention runs "
          "over the whole sequence (world = dp x cp x tp x pp)");
ABSL_FLAG(std::string, cp_comm, "p2p",
          "how attention reaches the other pieces: p2p (ring attention), allgather (K, V "
          "gathered) or a2a (DeepSpeed-Ulysses all-to-all over heads)");
ABSL_FLAG(std::string, cp_load_balance, "zigzag",
          "a cp rank's pieces: zigzag (chunks r and 2cp-1-r of 2cp: even causal work) or none "
          "(one contiguous piece)");
ABSL_FLAG(int, pp, 1, "pipeline stages: the layers split into pp stages");
ABSL_FLAG(std::vector<std::string>, pp_layers, {},
          "layers per pipeline stage, e.g. 3,3,2 (default: balanced)");
ABSL_FLAG(std::string, schedule, "1f1b", "pipeline schedule: gpipe, 1f1b or interleaved");
ABSL_FLAG(int, virtual_stages, 1,
          "interleaved schedule: chunks of layers each stage holds (v >= 2; stage s holds "
          "chunks s, pp+s, ...)");
ABSL_FLAG(bool, pp_scatter_gather, false,
          "pipeline with tp: each tp rank sends its 1/tp of a boundary and the receiving tp "
          "group all-gathers it (Megatron's scatter/gather); not with --sequence_parallel");
ABSL_FLAG(bool, recompute, false,
          "recompute in backward, --recompute_granularity's way (full unless it says selective)");
ABSL_FLAG(std::string, recompute_granularity, "",
          "full: on a pipeline a stage keeps only its input per micro-batch and runs its "
          "forward again in backward, without one each layer keeps only its input and runs its "
          "forward again before its backward; selective: no layer keeps attention's "
          "probabilities, backward makes them again; either turns --recompute on");
ABSL_FLAG(std::string, recompute_method, "stage",
          "full recompute on a pipeline: stage (a stage keeps its input per micro-batch and runs "
          "its whole forward again) or layer (each layer keeps its input and runs its forward "
          "again before its backward, as without a pipeline; Megatron's uniform method, one "
          "layer a checkpoint)");
ABSL_FLAG(bool, show_schedule, false, "print the pipeline schedule as a chart, stage by stage");
ABSL_FLAG(bool, print_topology, false,
          "print every rank's (dp, pp, tp) coordinates, its node and the members of its groups");
ABSL_FLAG(std::string, order, "tp-dp-pp",
          "the grid's rank order, fastest-varying first: tp-dp-pp (Megatron's) or any other "
          "permutation of tp, dp and pp");
ABSL_FLAG(std::string, link_intra, "600,1",
          "the modelled link inside a node, BANDWIDTH,LATENCY in GB/s and microseconds per "
          "message (NVLink: 600 GB/s)");
ABSL_FLAG(std::string, link_inter, "25,2",
          "the modelled link across nodes, BANDWIDTH,LATENCY (one 200 Gb/s InfiniBand NIC per "
          "GPU: 25 GB/s)");
ABSL_FLAG(int, gpus_per_node, 0,
          "ranks per node: ranks r and r' share a node iff r/G == r'/G, and the report splits "
          "every byte into intra- and inter-node (0: one node on threads, the real nodes under "
          "mpirun)");
ABSL_FLAG(bool, check_against_serial, false,
          "after the run, train the single-rank model on the same batches and print both "
          "losses per step with their relative difference");
ABSL_FLAG(std::string, report, "text",
          "the end-of-run report: text (a step's traffic, a layer's rows folded, and a summary), full "
          "(every table), json (as --traffic_json) or csv (traffic rows)");
ABSL_FLAG(bool, peer_matrix, false, "print the bytes every rank sent to every rank");
ABSL_FLAG(std::string, trace, "",
          "write a Chrome Trace Event file of every rank's run here (Perfetto, chrome://tracing)");
ABSL_FLAG(int, zero, 0,
          "ZeRO stage over the dp group: 0 (none), 1 (optimizer state sharded), 2 (and "
          "gradients), 3 (and parameters)");
ABSL_FLAG(std::string, zero_shard, "dp",
          "what ZeRO shards over: dp (the whole dp group) or node (HSDP: the dp group's ranks "
          "on each node, a replica a node, the gradient shard all-reduced across nodes; "
          "with --gpus_per_node)");
ABSL_FLAG(bool, zero3_reshard_after_forward, true,
          "--zero=3: free a unit's gathered parameters after its forward (false: keep them "
          "for its backward, FSDP's SHARD_GRAD_OP: one all-gather less a micro-batch)");
ABSL_FLAG(bool, zero_hpz, false,
          "--zero=3: ZeRO++'s hpZ, a secondary copy of the parameters cut over each node's dp "
          "ranks, so that backward's all-gathers stay inside the node (with --gpus_per_node)");
ABSL_FLAG(bool, zero_quantized_weights, false,
          "--zero=3: ZeRO++'s qwZ, the parameters all-gathered over the dp group as int8 with "
          "an fp32 scale a block (--zero_quant_block)");
ABSL_FLAG(bool, zero_quantized_gradients, false,
          "--zero=3: ZeRO++'s qgZ, the gradients reduce-scattered as int8 all-to-alls with an fp32 "
          "scale a block, inside the node and then across it (with --gpus_per_node)");
ABSL_FLAG(int32_t, zero_quant_grad_bits, 8,
          "bits a gradient takes under --zero_quantized_gradients: 8 (int8, scale max|x|/127) or 4 "
          "(int4, max|x|/7, two values a byte; ZeRO++'s)");
ABSL_FLAG(int64_t, zero_quant_block, 256,
          "values a quantised block holds (each block: one fp32 scale, max|x|/127)");
ABSL_FLAG(std::string, grad_compression, "none",
          "none; powersgd: --zero=0's gradient sum as PowerSGD's low-rank P and Q (each 2-D "
          "gradient M ~ P Q^T, error feedback kept on each rank) after the warm-up steps; or "
          "onebit_adam: 1-bit Adam (AdamW's momentum averaged as one sign bit a value and one "
          "scale a rank, with worker and server error feedback; the variance frozen) after them");
ABSL_FLAG(int, powersgd_rank, 1, "PowerSGD's rank r: P is m x r and Q n x r for an m x n gradient");
ABSL_FLAG(int64_t, powersgd_warmup_steps, 10,
          "steps of the plain all-reduce before PowerSGD starts (PyTorch's start_powerSGD_iter)");
ABSL_FLAG(int64_t, onebit_warmup_steps, 10,
          "steps of AdamW on the plain all-reduce before 1-bit Adam freezes the variance and "
          "compresses the momentum (DeepSpeed's freeze_step); at least 1");
ABSL_FLAG(std::string, allreduce, "ring",
          "algorithm of the dp collectives: ring; naive (through rank 0: reduce, then broadcast); "
          "or hierarchical (rings inside each node, then across nodes; with --gpus_per_node)");
ABSL_FLAG(std::string, overlap, "off",
          "on: each gradient bucket's all-reduce runs on a communication thread while backward "
          "goes on (PyTorch DDP's overlap; the threads backend), off: inside backward");
ABSL_FLAG(double, bucket_mb, 25, "gradient bucket size in MiB (buckets are reduced as backward finishes them)");
ABSL_FLAG(std::string, traffic_json, "", "write every rank's traffic and memory as JSON here (the report's JSON)");
ABSL_FLAG(std::string, report_html, "",
          "write the report as one self-contained HTML page here (charts of the bytes, memory, "
          "time, peers and pipeline)");
ABSL_FLAG(std::string, backend, tally::train::Name(kDefaults.placement.backend),
          "threads (every rank a thread of this process), mpi (one process per rank: "
          "mpirun -np WORLD tally_train --backend=mpi ...) or nccl (--device=cuda, a GPU per "
          "rank, the bytes over NCCL; threads, or processes under mpirun)");
ABSL_FLAG(bool, native_collectives, false,
          "--backend=mpi or nccl: call the library's own collectives (MPI_Allreduce, "
          "ncclAllReduce, ...) instead of ring or naive; their bytes are booked as the ring's");
ABSL_FLAG(std::string, device, tally::train::Name(kDefaults.placement.device),
          "cpu, or cuda (--backend=threads: every rank on GPU 0; nccl: rank r on GPU r; says "
          "why when there is no GPU)");
ABSL_FLAG(bool, tf32, kDefaults.precision.tf32, "--device=cuda: let cuBLAS use TF32 tensor cores");
ABSL_FLAG(std::string, precision, "fp32",
          "fp32, or bf16: bf16 parameters, gradients and everything sent, fp32 master weights "
          "and optimizer state (2 + 2 + 12 bytes a parameter with AdamW)");
ABSL_FLAG(bool, fp32_grad_accum, false,
          "--precision=bf16: accumulate the gradients in fp32 (Megatron's main_grad, 2 + 4 + 12)");
ABSL_FLAG(std::optional<std::string>, grad_comm_dtype, std::nullopt,
          "fp32 or bf16: the type the data-parallel / ZeRO gradient reduction moves (default: "
          "the precision's); bf16 in an fp32 run halves those bytes");
ABSL_FLAG(double, timeout_s, kDefaults.placement.timeout_s,
          "the longest any wait for a peer may take, in seconds (then the run stops, naming it)");

namespace tally {
namespace {

// The flags into TrainOptions, a section at a time (core/train/options.h); a flag that names a
// choice is parsed here, and TrainOptions::Validate checks the values.
model::GPTConfig ModelFromFlags() {
  model::GPTConfig m;
  m.n_layer = absl::GetFlag(FLAGS_n_layer);
  m.n_head = absl::GetFlag(FLAGS_n_head);
  m.n_embd = absl::GetFlag(FLAGS_n_embd);
  m.vocab_size = absl::GetFlag(FLAGS_vocab_size);
  m.seq_len = absl::GetFlag(FLAGS_seq_len);
  m.n_experts = absl::GetFlag(FLAGS_n_experts);
  m.moe_top_k = absl::GetFlag(FLAGS_moe_top_k);
  m.capacity_factor = absl::GetFlag(FLAGS_capacity_factor);
  m.aux_loss_coef = absl::GetFlag(FLAGS_moe_aux_loss_coef);
  return m;
}

absl::StatusOr<train::TrainingOptions> TrainingFromFlags() {
  train::TrainingOptions t;
  t.global_batch_size = absl::GetFlag(FLAGS_global_batch_size);
  t.micro_batch_size = absl::GetFlag(FLAGS_micro_batch_size);
  t.steps = absl::GetFlag(FLAGS_steps);
  t.lr = float(absl::GetFlag(FLAGS_lr));
  t.min_lr = float(absl::GetFlag(FLAGS_min_lr));
  t.warmup_steps = absl::GetFlag(FLAGS_warmup_steps);
  t.weight_decay = float(absl::GetFlag(FLAGS_weight_decay));
  t.grad_clip = float(absl::GetFlag(FLAGS_grad_clip));
  ASSIGN_OR_RETURN(t.optimizer, train::ParseOptimizer(absl::GetFlag(FLAGS_optimizer)));
  t.seed = absl::GetFlag(FLAGS_seed);
  t.threads = absl::GetFlag(FLAGS_threads);
  return t;
}

absl::StatusOr<train::SamplingOptions> SamplingFromFlags() {
  train::SamplingOptions s;
  s.sample_bytes = absl::GetFlag(FLAGS_sample_bytes);
  s.temperature = float(absl::GetFlag(FLAGS_temperature));
  s.top_k = absl::GetFlag(FLAGS_top_k);
  s.prompt = absl::GetFlag(FLAGS_prompt);
  if (s.prompt.empty() && FlagGiven("prompt")) {
    return absl::InvalidArgumentError(
        "[flags] --prompt is empty: leave it out to sample after a newline");
  }
  s.sample_only = absl::GetFlag(FLAGS_sample_only);
  return s;
}

absl::StatusOr<train::ParallelOptions> ParallelFromFlags() {
  train::ParallelOptions p;
  p.dp = absl::GetFlag(FLAGS_dp);
  p.zero = absl::GetFlag(FLAGS_zero);
  ASSIGN_OR_RETURN(p.zero_shard, parallel::ParseZeroShard(absl::GetFlag(FLAGS_zero_shard)));
  p.zero3_reshard_after_forward = absl::GetFlag(FLAGS_zero3_reshard_after_forward);
  p.zero_hpz = absl::GetFlag(FLAGS_zero_hpz);
  p.zero_quantized_weights = absl::GetFlag(FLAGS_zero_quantized_weights);
  p.zero_quantized_gradients = absl::GetFlag(FLAGS_zero_quantized_gradients);
  p.zero_quant_grad_bits = absl::GetFlag(FLAGS_zero_quant_grad_bits);
  p.zero_quant_block = absl::GetFlag(FLAGS_zero_quant_block);
  ASSIGN_OR_RETURN(p.grad_compression,
                   parallel::ParseGradCompression(absl::GetFlag(FLAGS_grad_compression)));
  p.powersgd_rank = absl::GetFlag(FLAGS_powersgd_rank);
  p.powersgd_warmup_steps = absl::GetFlag(FLAGS_powersgd_warmup_steps);
  p.onebit_warmup_steps = absl::GetFlag(FLAGS_onebit_warmup_steps);
  ASSIGN_OR_RETURN(p.allreduce, train::ParseAllReduce(absl::GetFlag(FLAGS_allreduce)));
  p.bucket_mb = absl::GetFlag(FLAGS_bucket_mb);
  const std::string overlap = absl::GetFlag(FLAGS_overlap);
  if (overlap != "on" && overlap != "off") {
    return absl::InvalidArgumentError("[flags] --overlap must be on or off, got '" + overlap + "'");
  }
  p.overlap = overlap == "on";
  p.tp = absl::GetFlag(FLAGS_tp);
  p.sequence_parallel = absl::GetFlag(FLAGS_sequence_parallel);
  p.ep = absl::GetFlag(FLAGS_ep);
  p.cp = absl::GetFlag(FLAGS_cp);
  ASSIGN_OR_RETURN(p.cp_comm, parallel::ParseCpComm(absl::GetFlag(FLAGS_cp_comm)));
  ASSIGN_OR_RETURN(p.cp_load_balance,
                   parallel::ParseCpLoadBalance(absl::GetFlag(FLAGS_cp_load_balance)));
  p.pp = absl::GetFlag(FLAGS_pp);
  for (const std::string& n : absl::GetFlag(FLAGS_pp_layers)) {
    int layers = 0;
    if (!absl::SimpleAtoi(n, &layers)) {
      return absl::InvalidArgumentError("[flags] --pp_layers wants integers, got '" + n + "'");
    }
    p.pp_layers.push_back(layers);
  }
  ASSIGN_OR_RETURN(p.schedule, parallel::ParsePipelineSchedule(absl::GetFlag(FLAGS_schedule)));
  p.virtual_stages = absl::GetFlag(FLAGS_virtual_stages);
  p.pp_scatter_gather = absl::GetFlag(FLAGS_pp_scatter_gather);
  ASSIGN_OR_RETURN(const train::RecomputeChoice recompute,
                   train::ParseRecompute(absl::GetFlag(FLAGS_recompute),
                                         absl::GetFlag(FLAGS_recompute_granularity)));
  p.recompute = recompute.full;
  p.recompute_attention = recompute.selective;
  ASSIGN_OR_RETURN(p.recompute_layers,
                   train::ParseRecomputeMethod(absl::GetFlag(FLAGS_recompute_method)));
  return p;
}

absl::StatusOr<train::PrecisionOptions> PrecisionFromFlags() {
  train::PrecisionOptions p;
  ASSIGN_OR_RETURN(p.dtype, train::ParsePrecision("precision", absl::GetFlag(FLAGS_precision)));
  p.fp32_grad_accum = absl::GetFlag(FLAGS_fp32_grad_accum);
  // absl reads an empty optional flag as not given: given empty, it is a bad value.
  const std::optional<std::string> comm = absl::GetFlag(FLAGS_grad_comm_dtype);
  if (comm.has_value() || FlagGiven("grad_comm_dtype")) {
    ASSIGN_OR_RETURN(p.grad_comm_dtype,
                     train::ParsePrecision("grad_comm_dtype", comm.value_or("")));
  }
  p.tf32 = absl::GetFlag(FLAGS_tf32);
  return p;
}

absl::StatusOr<train::PlacementOptions> PlacementFromFlags() {
  train::PlacementOptions p;
  ASSIGN_OR_RETURN(p.backend, train::ParseBackend(absl::GetFlag(FLAGS_backend)));
  p.native_collectives = absl::GetFlag(FLAGS_native_collectives);
  ASSIGN_OR_RETURN(p.device, train::ParseDevice(absl::GetFlag(FLAGS_device)));
  p.timeout_s = absl::GetFlag(FLAGS_timeout_s);
  ASSIGN_OR_RETURN(p.order, parallel::ParseOrder(absl::GetFlag(FLAGS_order)));
  p.gpus_per_node = absl::GetFlag(FLAGS_gpus_per_node);
  return p;
}

// The links (--link_intra, --link_inter, or --cluster's with its GPU, and its nodes
// unless --gpus_per_node gives them) and --slow_rank, into `o`.
absl::Status ClusterFromFlags(train::TrainOptions& o) {
  ASSIGN_OR_RETURN(o.cluster.links.intra,
                   comm::ParseLinkModel("link_intra", absl::GetFlag(FLAGS_link_intra)));
  ASSIGN_OR_RETURN(o.cluster.links.inter,
                   comm::ParseLinkModel("link_inter", absl::GetFlag(FLAGS_link_inter)));
  if (!absl::GetFlag(FLAGS_cluster).empty()) {
    if (FlagGiven("link_intra") || FlagGiven("link_inter")) {
      return absl::InvalidArgumentError(
          "[flags] --cluster names its links: give it or --link_intra and --link_inter, not both");
    }
    ASSIGN_OR_RETURN(const train::ClusterPreset cluster,
                     train::LoadCluster(absl::GetFlag(FLAGS_cluster)));
    o.cluster.name = cluster.name;
    o.cluster.links = cluster.links;
    o.cluster.gpu = cluster.gpu;
    if (o.placement.gpus_per_node == 0) o.placement.gpus_per_node = cluster.gpus_per_node;
  }
  return train::ParseSlowRank(absl::GetFlag(FLAGS_slow_rank), o);
}

absl::StatusOr<train::OutputOptions> OutputFromFlags() {
  train::OutputOptions out;
  ASSIGN_OR_RETURN(out.report, train::ParseReport(absl::GetFlag(FLAGS_report)));
  out.metrics_json = absl::GetFlag(FLAGS_metrics_json);
  out.traffic_json = absl::GetFlag(FLAGS_traffic_json);
  out.report_html = absl::GetFlag(FLAGS_report_html);
  out.trace = absl::GetFlag(FLAGS_trace);
  out.peer_matrix = absl::GetFlag(FLAGS_peer_matrix);
  out.print_topology = absl::GetFlag(FLAGS_print_topology);
  out.show_schedule = absl::GetFlag(FLAGS_show_schedule);
  out.check_against_serial = absl::GetFlag(FLAGS_check_against_serial);
  out.repeat = absl::GetFlag(FLAGS_repeat);
  return out;
}

absl::StatusOr<train::TrainOptions> OptionsFromFlags() {
  train::TrainOptions o;
  o.model = ModelFromFlags();
  ASSIGN_OR_RETURN(o.training, TrainingFromFlags());
  o.data = {.path = absl::GetFlag(FLAGS_data),
            .eval_every = absl::GetFlag(FLAGS_eval_every),
            .eval_batches = absl::GetFlag(FLAGS_eval_batches)};
  ASSIGN_OR_RETURN(o.sampling, SamplingFromFlags());
  o.checkpoint = {.save = absl::GetFlag(FLAGS_save),
                  .load = absl::GetFlag(FLAGS_load),
                  .save_every = absl::GetFlag(FLAGS_save_every)};
  ASSIGN_OR_RETURN(o.parallel, ParallelFromFlags());
  ASSIGN_OR_RETURN(o.precision, PrecisionFromFlags());
  ASSIGN_OR_RETURN(o.placement, PlacementFromFlags());
  RETURN_IF_ERROR(ClusterFromFlags(o));
  ASSIGN_OR_RETURN(o.output, OutputFromFlags());
  o.dry_run = absl::GetFlag(FLAGS_dry_run);
  return o;
}

absl::Status Main() {
  ASSIGN_OR_RETURN(train::TrainOptions options, OptionsFromFlags());
  return train::Train(options, std::cout);
}

}  // namespace
}  // namespace tally

int main(int argc, char** argv) {
  // The sections of TrainOptions (core/train/options.h), in its order.
  tally::SetHelpSections({
      {"model", {"n_layer", "n_head", "n_embd", "seq_len", "vocab_size", "n_experts", "moe_top_k",
                 "capacity_factor", "moe_aux_loss_coef"}},
      {"training", {"steps", "global_batch_size", "micro_batch_size", "optimizer", "lr", "min_lr",
                    "warmup_steps", "weight_decay", "grad_clip", "seed", "threads"}},
      {"data and evaluation", {"data", "eval_every", "eval_batches"}},
      {"sampling", {"sample_bytes", "temperature", "top_k", "prompt", "sample_only"}},
      {"checkpoints", {"save", "save_every", "load"}},
      {"data parallelism and ZeRO",
       {"dp", "zero", "zero_shard", "zero3_reshard_after_forward", "zero_hpz", "zero_quantized_weights",
        "zero_quantized_gradients", "zero_quant_grad_bits", "zero_quant_block", "grad_compression", "powersgd_rank", "powersgd_warmup_steps",
        "onebit_warmup_steps", "allreduce", "overlap", "bucket_mb"}},
      {"tensor and expert parallelism", {"tp", "sequence_parallel", "ep"}},
      {"context parallelism", {"cp", "cp_comm", "cp_load_balance"}},
      {"pipeline parallelism and recompute",
       {"pp", "pp_layers", "schedule", "virtual_stages", "pp_scatter_gather", "recompute",
        "recompute_granularity", "recompute_method"}},
      {"precision", {"precision", "fp32_grad_accum", "grad_comm_dtype", "tf32"}},
      {"where the ranks run",
       {"backend", "native_collectives", "device", "timeout_s", "order", "gpus_per_node"}},
      {"the modelled cluster", {"cluster", "link_intra", "link_inter", "slow_rank"}},
      {"reports and checks", {"report", "metrics_json", "traffic_json", "report_html", "trace",
                              "peer_matrix", "print_topology", "show_schedule",
                              "check_against_serial", "repeat", "dry_run"}},
  });
  return tally::RunExample(argc, argv, "train a byte-level GPT: tally_train --steps=200",
                           tally::Main);
}
