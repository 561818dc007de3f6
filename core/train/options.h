// Everything a training run is told, validated in one place.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/model/activations.h"
#include "core/model/config.h"
#include "core/model/precision.h"
#include "core/parallel/context_parallel.h"
#include "core/parallel/pipeline_schedule.h"
#include "core/parallel/powersgd.h"
#include "core/parallel/topology.h"
#include "core/runtime/comm/nodes.h"
#include "core/runtime/comm/types.h"
#include "core/runtime/device.h"
#include "core/runtime/kernels/matmul_inputs.h"
#include "core/train/cluster.h"

namespace tally::train {

// The flags that name a choice are parsed once, into these (and comm::Algorithm,
// parallel::PipelineSchedule, DeviceType); each has its flag's words.
enum class Backend { kThreads, kMpi, kNccl };                // threads, mpi, nccl
enum class OptimizerKind { kAdamW, kSgd };                    // adamw, sgd
enum class ReportFormat { kText, kFull, kJson, kCsv };  // text (the summary), full, json, csv
const char* Name(Backend backend);
const char* Name(OptimizerKind optimizer);
const char* Name(ReportFormat report);
const char* Name(DeviceType device);
// "[flags] --backend must be threads, mpi or nccl, got 'x'", and so on.
absl::StatusOr<Backend> ParseBackend(const std::string& name);
absl::StatusOr<OptimizerKind> ParseOptimizer(const std::string& name);
absl::StatusOr<ReportFormat> ParseReport(const std::string& name);
absl::StatusOr<DeviceType> ParseDevice(const std::string& name);
// --allreduce: ring or naive.
absl::StatusOr<comm::Algorithm> ParseAllReduce(const std::string& name);
// --precision, --grad_comm_dtype (the flag named in the message): fp32 or bf16.
absl::StatusOr<DType> ParsePrecision(const char* flag, const std::string& name);
const char* PrecisionName(DType dtype);  // "fp32", "bf16"
struct TrainOptions;
// --slow_rank=R:MS into o.slow_rank and o.slow_ms (empty: none); the range is Validate's.
absl::Status ParseSlowRank(const std::string& text, TrainOptions& o);
// --recompute and --recompute_granularity ("", full or selective; a granularity alone
// turns recompute on, and --recompute alone is full): which of the two is on.
struct RecomputeChoice {
  bool full = false, selective = false;
};
absl::StatusOr<RecomputeChoice> ParseRecompute(bool recompute, const std::string& granularity);
// --recompute_method: stage (false) or layer (true).
absl::StatusOr<bool> ParseRecomputeMethod(const std::string& method);

// A run's options, in the sections of tally_train --help. Each section checks what it
// holds alone (its Validate: one clear message for the first wrong value); what needs two
// sections is TrainOptions::Validate's.

// How long the model trains and how: the batches, the learning-rate schedule, the
// optimizer.
struct TrainingOptions {
  int global_batch_size = 8;  // sequences per optimizer step
  int micro_batch_size = 0;   // sequences per forward/backward per rank (0: global / dp);
                              // the rest of each rank's share is gradient accumulation
  int64_t steps = 200;
  float lr = 1e-3f, min_lr = 1e-4f;
  int64_t warmup_steps = 20;
  float weight_decay = 0.1f;
  float grad_clip = 1.0f;     // 0: no clipping
  OptimizerKind optimizer = OptimizerKind::kAdamW;
  uint64_t seed = 1337;
  int threads = 0;  // intra-op threads per rank; 0: the cores shared out among ranks
  absl::Status Validate() const;
};

// What the model reads, and how often it is evaluated on the validation split.
struct DataOptions {
  std::string path;           // --data; empty: the embedded corpus
  int64_t eval_every = 50;    // 0: no evaluation
  int eval_batches = 8;       // micro-batches of the validation split per evaluation
  absl::Status Validate() const;
};

// The sample printed after training (or, with sample_only, instead of it).
struct SamplingOptions {
  int sample_bytes = 200;     // 0: no sample
  float temperature = 0.8f;
  int top_k = 40;             // 0: the whole vocabulary
  std::string prompt;         // the bytes a sample goes on from (empty: one newline)
  static constexpr int64_t kMaxPromptBytes = 1 << 20;
  // Sample from --load's parameters and stop: no data, no step, no optimizer state read
  // (a checkpoint of either optimizer serves), nothing written.
  bool sample_only = false;
  // `vocab_size`: the model's; top_k and the prompt's bytes are within it.
  absl::Status Validate(int vocab_size) const;
};

// Checkpoints written and read (core/model/checkpoint.h).
struct CheckpointOptions {
  std::string save, load;
  int64_t save_every = 0;     // also save every this many steps (0: only at the end)
  absl::Status Validate() const;
};

// The grid's four axes and what each does: data parallelism with ZeRO, tensor (and
// sequence) parallelism, experts, the pipeline and its recompute.
struct ParallelOptions {
  // Data parallelism (core/parallel/data_parallel.h).
  int dp = 1;                                          // data-parallel ranks
  comm::Algorithm allreduce = comm::Algorithm::kRing;  // or naive (reduce to one rank, then broadcast)
  double bucket_mb = 25;             // gradient bucket size, MiB
  // Each gradient bucket's all-reduce runs while backward goes on (DDP's overlap; the
  // threads backend's communication thread, core/runtime/comm/progress.h).
  bool overlap = false;
  int zero = 0;                      // ZeRO stage over the dp group (core/parallel/zero/zero.h): 0-3
  // HSDP (core/parallel/zero/zero.h): ZeRO shards over the dp group's ranks on each node and
  // keeps a replica a node (node, with --gpus_per_node), or over the whole dp group (dp).
  parallel::ZeroShard zero_shard = parallel::ZeroShard::kDp;
  // ZeRO-3: false keeps a unit's parameters gathered in forward until its backward
  // (FSDP's SHARD_GRAD_OP): one all-gather a unit and micro-batch instead of two.
  bool zero3_reshard_after_forward = true;
  // ZeRO++'s hpZ (core/parallel/zero/zero.h): ZeRO-3 keeps a secondary copy of each unit's
  // parameters cut over the dp ranks of its node, so that backward gathers inside it.
  bool zero_hpz = false;
  // ZeRO++'s qwZ (extensions/zero_pp/quantize.h): ZeRO-3's all-gathers over the dp group carry
  // the parameters as int8, with an fp32 scale each zero_quant_block values.
  bool zero_quantized_weights = false;
  int64_t zero_quant_block = 256;
  bool Qwz() const { return zero == 3 && zero_quantized_weights; }
  // ZeRO++'s qgZ (extensions/zero_pp/qgz.h): ZeRO-3's gradient reduce-scatters as all-to-alls
  // of int8 with an fp32 scale each zero_quant_block values, in two hops (inside the node,
  // then across) when the dp group spans the nodes of --gpus_per_node.
  bool zero_quantized_gradients = false;
  int zero_quant_grad_bits = 8;  // qgZ's: 8 (int8) or 4 (int4, two a byte)
  bool Qgz() const { return zero == 3 && zero_quantized_gradients; }
  bool ShardsByNode() const { return zero >= 1 && zero_shard == parallel::ZeroShard::kNode; }
  bool Hpz() const { return zero == 3 && zero_hpz; }
  // Gradient compression for data parallelism (core/parallel/grad_compression.h): PowerSGD of
  // rank powersgd_rank after powersgd_warmup_steps steps of the plain sum.
  parallel::GradCompression grad_compression = parallel::GradCompression::kNone;
  int powersgd_rank = 1;
  int64_t powersgd_warmup_steps = 10;
  bool PowerSgd() const { return grad_compression == parallel::GradCompression::kPowerSgd; }
  // 1-bit Adam (core/parallel/onebit_adam.h) after onebit_warmup_steps steps of AdamW on the
  // plain sum.
  int64_t onebit_warmup_steps = 10;
  bool OneBitAdam() const { return grad_compression == parallel::GradCompression::kOneBitAdam; }
  // The compressed steps' warm-up: PowerSGD's or 1-bit Adam's (0: no compression).
  int64_t CompressionWarmup() const {
    return PowerSgd() ? powersgd_warmup_steps : OneBitAdam() ? onebit_warmup_steps : 0;
  }
  // Whether what a step sends is compressed (qwZ, qgZ, PowerSGD, 1-bit Adam): the step's
  // error is then measured and reported (core/train/trainer.h).
  bool Compresses() const { return Qwz() || Qgz() || PowerSgd() || OneBitAdam(); }

  // Tensor parallelism (core/parallel/tensor_parallel.h): every layer split over tp ranks;
  // with sequence_parallel, the activations between the split layers split by sequence.
  int tp = 1;
  bool sequence_parallel = false;

  // Context parallelism (core/parallel/context_parallel.h): each sequence cut into cp pieces,
  // one a rank, attention over the whole sequence by cp_comm; the weights replicated over
  // cp and their gradients summed over dp·cp (the dp group, core/parallel/topology.h).
  int cp = 1;
  parallel::CpComm cp_comm = parallel::CpComm::kP2p;
  parallel::CpLoadBalance cp_load_balance = parallel::CpLoadBalance::kZigzag;

  // Expert parallelism (core/model/moe.h, core/parallel/topology.h): each layer's experts split
  // over ep ranks carved out of the dp ranks (dp a multiple of ep).
  int ep = 1;

  // Pipeline parallelism (core/parallel/pipeline_schedule.h): the layers in pp stages, the
  // micro-batches run by `schedule` (gpipe, 1f1b, or interleaved with virtual_stages
  // chunks a stage).
  int pp = 1;
  std::vector<int> pp_layers;  // layers per stage (interleaved: per chunk); empty: balanced
  parallel::PipelineSchedule schedule = parallel::PipelineSchedule::k1F1B;
  int virtual_stages = 1;      // v: chunks of layers a stage holds (interleaved, >= 2)
  // Full recompute (--recompute): on a pipeline a stage keeps only its input per
  // micro-batch and runs its whole forward again before the backward (StageRecompute);
  // without one, or with --recompute_method=layer, a layer keeps only its input and runs
  // its forward again just before its backward (LayerRecompute; core/model/gpt.h SetRecompute).
  bool recompute = false;
  bool recompute_layers = false;  // --recompute_method=layer
  // Selective recompute (--recompute_granularity=selective, any pp): no layer keeps its
  // attention probabilities; backward makes them again (core/model/gpt.h SetRecompute).
  bool recompute_attention = false;
  bool StageRecompute() const { return recompute && pp > 1 && !recompute_layers; }
  bool LayerRecompute() const { return recompute && (pp == 1 || recompute_layers); }
  // What the model leaves to backward to make again (the stage's recompute is the
  // pipeline's, not the model's).
  model::Recompute ModelRecompute() const {
    return recompute_attention ? model::Recompute::kAttention
           : LayerRecompute()  ? model::Recompute::kLayers
                               : model::Recompute::kNone;
  }
  // Megatron's scatter/gather of the boundary (--pp_scatter_gather): each tp rank sends
  // its 1/tp of a boundary tensor, and the receiving stage's tp group all-gathers it.
  // Without sequence parallelism only (under it a rank's boundary is already its part).
  bool pp_scatter_gather = false;
  bool ScatterGather() const { return pp_scatter_gather && pp > 1 && tp > 1 && !sequence_parallel; }

  // The most ranks a run may have (dp x cp x tp x pp).
  static constexpr int64_t kMaxRanks = 4096;
  int world() const { return dp * cp * tp * pp; }
  // `model`: the one the grid splits (its heads, layers, experts and positions).
  absl::Status Validate(const model::GPTConfig& model) const;
  absl::Status ValidateContextParallel(const model::GPTConfig& model) const;
};

// Mixed precision (core/model/precision.h): fp32, or bf16 parameters, gradients, activations
// sent and everything reduced, with fp32 master weights and optimizer state.
// fp32_grad_accum: a bf16 run's gradients accumulate in fp32 (Megatron's main_grad).
// grad_comm_dtype: the type the DP/ZeRO gradient reduction moves (unset: the
// precision's), e.g. bf16 in an fp32 run, DDP's bf16 compression hook. tf32: let cuBLAS
// use TF32 tensor cores for fp32 matmuls (CUDA only).
struct PrecisionOptions {
  DType dtype = DType::kF32;  // --precision
  bool fp32_grad_accum = false;
  std::optional<DType> grad_comm_dtype;
  bool tf32 = false;
  absl::Status Validate() const;
};

// Where the ranks run and how they are placed.
struct PlacementOptions {
  // "threads" (of this process), "mpi" (one process per rank, started by mpirun;
  // core/runtime/comm/transport/mpi) or "nccl" (a GPU per rank, the bytes over NCCL; the ranks are
  // threads of this process, or processes under mpirun; core/runtime/comm/transport/nccl). With
  // native_collectives (mpi, nccl) every collective is the library's own and its bytes
  // are modelled.
  Backend backend = Backend::kThreads;
  bool native_collectives = false;
  // Where the model computes: "cpu", or "cuda" (parameters, gradients, optimizer state
  // and activations in GPU memory, core/runtime/kernels/cuda). On the threads backend every
  // rank uses GPU 0, and the collectives move GPU memory
  // (core/runtime/comm/transport/device_memory.h); on nccl rank r uses GPU r (of its machine,
  // under mpirun); every strategy runs on both; MPI moving GPU memory is not built.
  DeviceType device = DeviceType::kCPU;
  double timeout_s = 60;  // the longest any wait for a peer may take
  // The grid's rank order (core/parallel/topology.h), and ranks per node
  // (core/runtime/comm/nodes.h; 0: one node on threads, the real nodes under mpirun).
  parallel::Order order = parallel::kMegatronOrder;
  int gpus_per_node = 0;
  absl::Status Validate() const;
};

// The modelled cluster the report times a run on, and a rank made slow on purpose.
struct ClusterOptions {
  // The links the report times the ledger's messages on (α-β per link class).
  comm::Cluster links;
  // --cluster=a100|h100|FILE (core/train/cluster.h's ClusterPreset): its name, and its GPU
  // (the roofline compute is timed on); it also sets `links` and (unless given)
  // gpus_per_node. The run (dry or real) is then replayed on it (lab/report/replay.h).
  std::string name;
  GpuModel gpu = {};
  // The cluster the report's modelled clock runs on: --cluster's, else the default
  // kDefaultCluster's GPU with the run's own links and nodes (--link_intra, --link_inter,
  // --gpus_per_node). The seed's 30% verdict is read on this clock.
  static constexpr const char* kDefaultCluster = "a100";
  bool given() const { return gpu.given(); }
  // --slow_rank=R:MS: world rank R computes MS milliseconds more at the start of every
  // step (a busy loop until its thread's CPU clock has advanced MS ms), and its modelled
  // timeline gains MS ms of compute; -1: none.
  int slow_rank = -1;
  double slow_ms = 0;
};

// What a run prints and writes besides its checkpoints, and the checks it runs.
struct OutputOptions {
  ReportFormat report = ReportFormat::kText;  // the end-of-run report
  std::string metrics_json;     // every step's loss, learning rate and grad norm, as JSON lines
  std::string traffic_json;     // every rank's traffic and memory, as JSON
  std::string report_html;      // the report as one self-contained page (lab/report/page.h)
  std::string trace;            // a Chrome Trace Event file of every rank's run
  bool peer_matrix = false;     // print the bytes from every rank to every rank
  bool print_topology = false;  // every rank's coordinates, node and groups, before the run
  bool show_schedule = false;   // print the pipeline schedule's chart
  bool check_against_serial = false;  // also train one rank on the same batches, compare
  // --repeat=K: the same run K times (from the same start), the last one's report and
  // outputs kept, then each clock's step and exposed share over the K: min, median, max.
  int repeat = 1;
  static constexpr int kMaxRepeat = 100;
  absl::Status Validate() const;
};

struct TrainOptions {
  model::GPTConfig model;
  TrainingOptions training;
  DataOptions data;
  SamplingOptions sampling;
  CheckpointOptions checkpoint;
  ParallelOptions parallel;
  PrecisionOptions precision;
  PlacementOptions placement;
  ClusterOptions cluster;
  OutputOptions output;
  // A dry run (--dry_run): the model, its weight store, every strategy and the report run
  // as always, on meta tensors (core/runtime/device.h): each allocation is booked at its real
  // size and none taken, kernels do nothing, and the threads transport matches and counts
  // every message without moving payload (one message a transfer). The losses are not
  // computed; evaluation, sampling and checkpoints are off. model.vocab_size may then be
  // other than 256, for real models' shapes.
  bool dry_run = false;

  GpuModel ModelledGpu() const;
  // "a100, the default (--cluster to choose)", or --cluster's name.
  std::string ModelledClusterName() const;
  // The element types of every buffer, from the three above.
  model::Precision Precision() const;
  // What the matmuls take: bf16 operands with --precision=bf16, else TF32 with --tf32, else
  // fp32.
  MatmulInputs matmul_inputs() const;

  // Where the model's tensors live: the CPU, GPU `gpu` (--device=cuda) or, in a dry run,
  // the meta device.
  Device ModelDevice(int gpu) const;

  int world() const { return parallel.world(); }
  // " x cp=N (p2p, zigzag)" with context parallelism, else "": the grid's words in logs.
  std::string CpWords() const;
  // The grid: every rank's (dp, tp, pp) coordinates and groups (core/parallel/topology.h).
  parallel::Topology topology() const {
    return parallel::Topology(parallel.dp, parallel.tp, parallel.pp, placement.order, parallel.ep,
                              parallel.cp);
  }
  // World rank `rank`'s part of the model: its tp part of its stage's layers, with its ep
  // rank's experts.
  model::ParameterLayout RankLayout(int rank) const;
  // The layers pipeline rank `pp_rank` holds (parallel::StageModelChunks); valid options only.
  model::ModelChunks StageModelChunks(int pp_rank) const;
  // The nodes --gpus_per_node places the world on; null without it.
  std::shared_ptr<const comm::Nodes> PlacedNodes() const;
  // The nodes the dp group is also split by (its groups dp_shard and dp_repl,
  // core/parallel/topology.h): HSDP's shard and replicate groups, hpZ's node group, qgZ's two
  // hops on placed nodes; null when nothing needs them.
  std::shared_ptr<const comm::Nodes> DpSplitNodes() const;

  // A copy with the defaults that depend on other fields filled in (micro_batch_size).
  TrainOptions Resolved() const;
  // One clear message for the first thing wrong (of the resolved options): each
  // section's own checks, then those across sections (core/train/options_validate.cc).
  absl::Status Validate() const;
  absl::Status ValidateBatch() const;  // the batch against the grid
  absl::Status ValidateZeroShard() const;  // HSDP's nodes, ZeRO-3's resharding
  absl::Status ValidateGradCompression() const;  // PowerSGD, 1-bit Adam
  absl::Status ValidateJobs() const;   // what a sampling job and --repeat cannot do
  // One line for each flag that has no effect in this configuration (e.g.
  // --sequence_parallel with tp = 1), naming it. Ask the options as given, before
  // Resolved() (a dry run turns evaluation and sampling off itself).
  std::vector<std::string> Warnings() const;
  // A lower bound on the host memory `ranks_here` ranks of this run take, in bytes (in
  // double, so that no size wraps): per rank its share of the parameters, gradients and
  // optimizer state (by the ZeRO stage), the activations of one micro-batch on its
  // layers, and its copy of the data (`data_bytes` bytes of text, held as text and as
  // 4-byte tokens).
  double EstimatedBytes(int ranks_here, int64_t data_bytes) const;
  // An upper estimate of a dry run's own host memory, in bytes: what its thread ranks
  // keep of the run they model (ranks, layers, micro-batches and collective calls, not
  // the model's values, which it has none of); core/train/options_memory.cc gives the terms.
  double DryRunHostBytes() const;
  // Micro-batches per rank per step.
  int accumulation_steps() const {
    return training.global_batch_size / (parallel.dp * training.micro_batch_size);
  }
};

}  // namespace tally::train
