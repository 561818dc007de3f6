// The analytic planner (tally_plan): bytes per GPU per training step for each parallel
// strategy, by the seed article's formula and by the exact one, an α-β time estimate, and
// memory per GPU — for models far beyond this machine.
//
// The exact formulas are the ones the traffic report checks against the ledger
// (exact_traffic.h per collective call): for a model of tally's GPT shape they are the
// bytes a tally_train run with the same flags measures, to the byte; for a preset of
// another shape (LLaMA) they are the same collectives over Φ values.
//
// plan.cc: the strategies' rows; lab/plan/models.cc: the models, the options a plan
// describes, and memory; lab/plan/seed.cc: the seed's examples; lab/plan/search.cc: clusters, a
// step's predicted time and the search over grids; lab/plan/explain.cc: the seed's selection
// flow (--explain).
//
//   ASSIGN_OR_RETURN(PlanModel model, ModelPreset("llama-7b"));
//   PlanInput in{model};
//   in.dp = 4;
//   for (const PlanRow& row : Plan(in)) ...
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "core/model/config.h"
#include "core/parallel/context_parallel.h"
#include "core/runtime/comm/types.h"
#include "core/train/options.h"

namespace tally::plan {

struct PlanModel {
  std::string name;
  int64_t params = 0;  // Φ
  int layers = 0, hidden = 0;
  // A model of tally's GPT shape (its parameter layout gives the exact counts).
  bool gpt = false;
  model::GPTConfig config;
};

// gpt2-124m, llama-7b, llama-13b, llama-70b, and "toy" (tally_train's default model).
absl::StatusOr<PlanModel> ModelPreset(const std::string& name);

// tally's GPT of the given shape (GPTConfig: layers, heads, hidden size, vocabulary,
// sequence length): Φ is derived from it (NumParams), and every figure of the plan is
// exact for it, activations included.
PlanModel GptShape(const model::GPTConfig& config);

// The model with `experts` experts of top-k routing in every layer: tally's GPT shape
// exactly (its config); another's Φ with each layer's MLP, taken as 8h² + 5h, made E of
// them plus the router (E·h). Φ is -1 past GPTConfig::kMaxParams.
PlanModel WithExperts(PlanModel model, int experts, int top_k);


struct PlanInput {
  PlanModel model;
  int batch = 4;            // b: sequences per data-parallel rank per step
  int seq_len = 2048;       // s
  int bytes_per_value = 2;  // e: fp16/bf16 (the precision's, unless asked otherwise)
  DType precision = DType::kBF16;  // of the memory line tally_plan marks
  bool fp32_grad_accum = false;
  int dp = 1, tp = 1, pp = 1, zero = 0;
  // HSDP (tally_train --zero_shard=node; core/parallel/zero/zero.h): ZeRO over each node's
  // share of the dp group, a replica a node; the rows "hsdp zero-1/2/3" and the memory
  // sharded over that share. With reshard false ZeRO-3 keeps a unit from forward to
  // backward: the row "zero-3, no reshard".
  parallel::ZeroShard zero_shard = parallel::ZeroShard::kDp;
  bool zero3_reshard_after_forward = true;
  bool zero_hpz = false;  // ZeRO++'s hpZ: the row "zero-3 + hpz"
  // ZeRO++'s qwZ (extensions/zero_pp/quantize.h): the row "zero-3 + qwz", the gathers as int8
  // with an fp32 scale each zero_quant_block values.
  bool zero_quantized_weights = false;
  // ZeRO++'s qgZ (extensions/zero_pp/qgz.h): the row "zero-3 + qgz", the reduce-scatter as
  // int8 all-to-alls, in two hops where a dp group spans nodes (with --gpus_per_node).
  bool zero_quantized_gradients = false;
  int zero_quant_grad_bits = 8;  // 8 or 4
  int64_t zero_quant_block = 256;
  // PowerSGD of rank powersgd_rank (tally_train --grad_compression=powersgd;
  // core/parallel/powersgd.h), of tally's GPT shapes: the row "dp powersgd (r=...)", a step
  // after its warm-up, in fp32 as tally_train sends it. Or 1-bit Adam (onebit_adam;
  // core/parallel/onebit_adam.h): the row "dp 1-bit adam", a step after its warm-up.
  parallel::GradCompression grad_compression = parallel::GradCompression::kNone;
  int powersgd_rank = 1;
  // Context parallelism (tally_train --cp, core/parallel/context_parallel.h): each of a dp
  // rank's sequences cut into cp pieces, one a GPU, so that a GPU holds b·s/cp positions;
  // attention's calls by cp_comm over the cp group (the row "cp (attention)"); the
  // weights' replicas summed, and ZeRO's shards, over the dp·cp GPUs of the dp group. The
  // balance decides which pieces, so the busiest GPU's attention work.
  int cp = 1;
  parallel::CpComm cp_comm = parallel::CpComm::kP2p;
  parallel::CpLoadBalance cp_load_balance = parallel::CpLoadBalance::kZigzag;
  // GPUs in all: dp × cp × tp × pp.
  int64_t world() const { return int64_t(dp) * cp * tp * pp; }
  int micro_batches = 1;    // per data-parallel rank and step
  int virtual_stages = 1;   // chunks a pipeline stage holds (> 1: the interleaved schedule)
  // Gpipe keeps every micro-batch's activations until its backward (the activations line;
  // the bytes and the bubble are 1f1b's).
  bool gpipe = false;
  // A mixture of experts (core/model/moe.h): E experts of tally's MLP shape (8h² + 5h) in every
  // layer, top-k routing, split over ep of the dp ranks. Φ (model.params) includes them:
  // WithExperts sets it.
  int n_experts = 0, moe_top_k = 2, ep = 1;
  comm::Algorithm allreduce = comm::Algorithm::kRing;
  bool sequence_parallel = false;
  // Full recompute (tally_train --recompute): a pipeline stage keeps only its input per
  // micro-batch and recomputes its forward in backward, or without a pipeline (or with
  // recompute_layers: --recompute_method=layer) each layer its own just before its
  // backward: less activation memory, a forward more.
  bool recompute = false;
  bool recompute_layers = false;
  bool StageRecompute() const { return recompute && pp > 1 && !recompute_layers; }
  // Selective recompute (tally_train --recompute_granularity=selective, any pp): no layer
  // keeps attention's probabilities; backward runs attention's core forward again
  // (4·s·h FLOPs a token a layer, no communication).
  bool recompute_attention = false;
  // Megatron's scatter/gather of the boundary (tally_train --pp_scatter_gather): a stage
  // sends each tp rank's 1/tp of it, and the receiving tp group all-gathers it (the row
  // "tp (pipeline gathers)"). With pp > 1, tp > 1 and no sequence parallelism only.
  bool pp_scatter_gather = false;
  bool ScatterGather() const { return pp_scatter_gather && pp > 1 && tp > 1 && !sequence_parallel; }
  // --overlap (tally_train's): the data-parallel calls posted while backward goes on
  // (DDP's buckets of bucket_mb MiB; ZeRO-2/3's unit reduce-scatters, ZeRO-3's prefetched
  // gathers). The step model hides them behind the compute they overlap
  // (OverlappedDpSeconds) without a pipeline and expert parallelism; elsewhere, as the
  // run, nothing more.
  bool overlap = false;
  double bucket_mb = 25;
  // Placement (core/parallel/topology.h, core/runtime/comm/nodes.h): the grid's order and GPUs per
  // node (0: every GPU on one node), and the links the α-β times use (the defaults:
  // NVLink 600 GB/s inside a node, 25 GB/s InfiniBand across nodes).
  parallel::Order order = parallel::kMegatronOrder;
  int gpus_per_node = 0;
  comm::Cluster cluster = {};
  // The GPU the predicted step's compute is timed on (cluster.h's roofline; none given:
  // no compute time).
  train::GpuModel gpu = {};
};


// One pipeline stage's work on a GPU of it in one step (StageWork, lab/plan/compute.cc): its
// kernels' matmuls and memory-bound passes, counted by the kernels' own formulas
// (core/runtime/kernels/work.h) for tally's GPT, micro-batch by micro-batch: its layers (their
// experts on an even share of the routed tokens), the last stage's ln_f, LM head and
// cross-entropy, what recompute runs again (a stage's whole forward under stage
// recompute, the layers' under layer recompute, attention's core under selective), and
// AdamW over the stage's parameters on the rank (a dp-th under ZeRO). Another model: its
// FLOPs (6Φ + 12·L·h·s a token; a third more with full recompute, 4·s·h a layer with
// selective) as one matmul evenly over the stages.
std::vector<ComputeWork> StageWork(const PlanInput& in);
// Context parallelism's ring (cp_comm p2p) of tally's GPT on in.gpu: the seconds of one
// layer's and micro-batch's sends that stay exposed when each takes `send_s`, as the
// replay plays the run's posted sends: forward, each step's K, V send behind that step's
// blocks (max(0, send − the blocks), every step but the last); backward, each of the N
// steps' dK, dV send whole (posted once the step's blocks are done, while the K, V send
// rides behind them), and under full recompute the forward's once more. The busiest cp
// rank's blocks; -1 for the collectives or no GPU.
double RingExposedSeconds(const PlanInput& in, double send_s);
// One micro-batch's compute seconds on in.gpu, without a pipeline: a layer's forward and
// backward (with what recompute runs again in it), and the end's (ln_f, the LM head and
// the cross-entropy).
struct MicroBatchSeconds {
  double layer_forward = 0, layer_backward = 0, head_forward = 0, head_backward = 0;
};
MicroBatchSeconds MicroBatchTimes(const PlanInput& in);

// Under --overlap, the seconds of the data-parallel row in effect that stay exposed, as
// the replay of a run plays its posted calls (each on its own from its post; the rank
// waits where the run waits); -1 where the model does not apply (a pipeline, experts,
// ZeRO-1, no overlap, one dp rank). Per unit of the layout (embeddings, each layer, ln_f):
//   DDP      the last micro-batch's buckets, each posted when backward closes the unit
//            of its first element: max(0, max over buckets of (close + its time) − the
//            end of backward)
//   ZeRO-2/3 each micro-batch, a unit's reduce-scatter from its close to the next unit's
//            close: Σ max(0, its time − the compute between); the embeddings' waits for
//            the next micro-batch's first close (its forward and the end's backward), the
//            last micro-batch's is exposed whole
//   ZeRO-3   each micro-batch's gathers, forward and backward, one unit ahead: the first
//            of each pass exposed whole, the next ones max(0, its time − the unit's
//            compute before it)
// A layer's compute includes its blocking tp calls (tp_layers_s: the step's "tp (layers
// of a stage)" row).
double OverlappedDpSeconds(const PlanInput& in, double tp_layers_s = 0);

// One step of `in` on its cluster, predicted: the busiest stage's StageWork timed on
// in.gpu (the roofline, cluster.h), stretched by the pipeline's fill and drain (compute +
// the other stages' computes / (v·m): compute / (1 − bubble) when the stages are
// equal), and every strategy's α-β time (Plan's rows: the dp all-reduce or the ZeRO
// stage's passes, tp, pp, ep), taken as exposed (under in.overlap the dp row's exposed
// part, OverlappedDpSeconds, where it applies); tp's stretched by the fill and drain as
// compute is (its calls are inside the micro-batches').
struct StepTime {
  // compute_s: the busiest stage's; fill_s: what the fill and drain add to it; bubble:
  // the schedule's theory, (p−1)/(v·m + p−1).
  double compute_s = 0, fill_s = 0, comm_s = 0, bubble = 0, step_s = 0;
  // comm_s by strategy row (Plan's names), in Plan's order.
  std::vector<std::pair<std::string, double>> comm_rows;
  // The step's model FLOPs by Narayanan et al. 2021's count (MegatronStepFlops), and
  // per GPU per second over step_s: the paper's "achieved teraFLOP/s per GPU".
  double model_flops = 0, tflops_per_gpu = 0;
};
StepTime PredictStep(const PlanInput& in);

// One step's FLOPs as Narayanan et al. 2021 count them (their eq. 3, B the global batch,
// s the sequence, l layers, h the hidden size, V the vocabulary; tally's GPT's V, 0 for a
// model of another shape): 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)) with recompute (a
// forward more), 72·B·s·l·h²·(1 + s/(6h) + V/(12·l·h)) without, and 4·B·s²·l·h more
// with selective recompute (attention's Q·Kᵀ and probabilities times V again).
double MegatronStepFlops(const PlanInput& in);

// --search: every grid of `world` GPUs — dp × cp × tp × pp (tp dividing the heads and the
// hidden size, within a node when nodes are set; cp up to base.cp, by base's cp_comm and
// balance, where the sequence splits; pp at most the layers), the interleaved
// schedule's v chunks of equal layers (v·pp dividing the layers, m a multiple of pp), ZeRO
// 0–3 when dp > 1, up to kSearchMicroBatches micro-batches dividing a dp rank's share of
// `global_batch` sequences, recompute none, selective or full (on a pipeline by stage
// or by layer), and with experts every ep dividing dp·cp and E — whose
// model states (at in.precision) and activations (tally's GPT; none counted otherwise) fit
// in `gpu_bytes`, fastest predicted step first.
constexpr int kSearchMicroBatches = 1024;
struct SearchResult {
  PlanInput in;
  StepTime time;
  double memory_bytes = 0;
};
// Costing a grid walks its ranks (each rank's exact bytes by link), about 1.5 µs a
// rank of a grid on this project's 2-core hosts: the search refuses, before costing any,
// more than kMaxSearchWork grids × GPUs that fit (about 25 s here), naming both figures.
// Work of more than kSearchProgressWork (about 1.5 s) says so first, on `progress`.
constexpr double kMaxSearchWork = 16e6, kSearchProgressWork = 1e6;
absl::StatusOr<std::vector<SearchResult>> SearchGrids(const PlanInput& base, int world,
                                                      int global_batch, double gpu_bytes,
                                                      std::ostream* progress = nullptr);

struct PlanRow {
  std::string strategy;
  double seed_bytes_per_gpu = 0;   // the seed's formula
  double exact_bytes_per_gpu = 0;  // sent by the busiest GPU
  double total_bytes = 0;          // sent by all GPUs
  double time_s = 0;               // α-β estimate for the busiest GPU
  std::string formula;             // the seed's, in words
  double inter_bytes_per_gpu = 0;  // of the busiest GPU's bytes, those that cross a node
  double inter_total_bytes = 0;    // of all GPUs' bytes, those that cross a node
  std::string links;               // "intra", "inter" or "intra+inter": what the bytes ride
  // Tensor parallelism: the busiest GPU's bytes for one layer (the row is its stage's
  // layers'), and the seed's 8bsh; 0 for the other rows.
  double exact_bytes_per_layer = 0, seed_bytes_per_layer = 0;
  // Its calls sit inside each micro-batch's forward and backward (tp's and cp's rows): the
  // pipeline's fill and drain stretch them as they stretch compute (PredictStep).
  bool in_micro_batches = false;
  // Of time_s, what stays exposed where the strategy hides calls behind its own compute
  // (cp's ring: RingExposedSeconds); -1: all of it.
  double exposed_s = -1;
};

// α-β time of `passes` passes (a reduce-scatter or an all-gather: an all-reduce is two)
// over M bytes on a group whose rank i is on node nodes[i], by the algorithm that runs:
// the ring's N-1 steps of M/N each wait for its slowest hop; the naive root's N-1
// messages of M; the hierarchical node ring's G-1 steps of M/G and the cross ring's K-1
// steps of M/(G·K). The seed's Q11: T = 2(N-1)·(α + M/(N·β)) for the ring all-reduce.
double PassesTime(comm::Algorithm asked, std::span<const int> nodes, double bytes, double passes,
                  const comm::Cluster& c);

// One row per strategy the input's dp, tp and pp switch on (dp rows for each ZeRO stage
// when dp > 1). Each group's ranks are placed by the grid's order on nodes of
// gpus_per_node GPUs: a ring whose neighbours are on different nodes runs at the
// inter-node link's speed (every step waits for its slowest hop); the hierarchical
// all-reduce times its node rings and its cross-node ring apart. The busiest GPU is
// looked for among the groups of the first 4096 GPUs.
std::vector<PlanRow> Plan(const PlanInput& in);

// What tally_plan refuses (lab/plan/checks.cc), one clear line each. A grid of at most 2^20
// GPUs whose tp ranks split the hidden size and the heads, and whose cp ranks split the
// sequence as tally_train would (parallel::CheckContextParallel).
absl::Status CheckGrid(const PlanInput& in);
// Whether --zero_shard and --zero3_reshard_after_forward fit the rest of `in`: HSDP needs
// the nodes, no experts, and dp groups that put as many GPUs on each of their nodes; and
// whether --grad_compression does (PowerSGD: a tally GPT shape, --zero=0, no experts;
// 1-bit Adam: --zero=0, no experts).
absl::Status CheckZeroShard(const PlanInput& in);
absl::Status CheckGradCompression(const PlanInput& in);
// --zero_quant_block below 1; qgZ with experts, or (with --gpus_per_node) on dp groups
// that do not put as many GPUs on each of their nodes.
absl::Status CheckQuantization(const PlanInput& in);
// The GPUs ZeRO shards over under HSDP: a dp group's on one node (its whole dp group
// without nodes).
int ShardGpus(const PlanInput& in);

// The model states a GPU holds with AdamW, bytes a parameter by precision (the ZeRO
// paper's 2 + 2 + K): fp32 4 + 4 + 8; bf16 2 + 2 + 12 (K = 12: fp32 master weights and
// the two moments; the seed's form); bf16 with fp32 gradient accumulation 2 + 4 + 12
// (Megatron's main_grad). Each part divided by tp·pp, and by dp where the ZeRO stage
// shards it: ZeRO-1 the optimizer state (P_os), ZeRO-2 also the gradients (P_os+g),
// ZeRO-3 also the parameters (P_os+g+p).
struct PlanMemory {
  std::string label;  // "bf16: 2 + 2 + 12"
  int params = 0, grads = 0, optimizer = 0;  // bytes a parameter
  double bytes_per_gpu = 0;
};
// Every precision's line, in the order fp32, bf16, bf16 with fp32 accumulation.
std::vector<PlanMemory> PlanMemoryPerGpu(const PlanInput& in);
// One of them (0, 1 or 2), bytes per GPU.
double PlanMemoryLine(const PlanInput& in, size_t line);

// Of tally's GPT shape (model.gpt): the activation bytes of the busiest GPU (the most over
// the pipeline stages; PredictedMemory's closed forms, which a dry run's ledger equals),
// the stage that holds them, and the schedule's bubble (parallel::TheoreticalBubble:
// (p−1)/(v·m + p−1); 0 without a pipeline). Negative activations: no closed form (see
// PredictedMemory).
struct PlanActivations {
  int64_t bytes_per_gpu = 0;
  int stage = 0;
  double bubble = 0;
};
PlanActivations PlanActivationsPerGpu(const PlanInput& in);

// The seed's numeric examples, each with the figure it prints and the value the planner
// computes for the example's parameters (Plan's seed or exact column, PlanMemoryPerGpu):
// no figure is written in, so a change to the planner shows here.
struct SeedExample {
  std::string what;
  std::string seed_figure;  // as the seed writes it
  double seed_bytes;        // that figure in bytes, in the unit the seed meant
  double computed_bytes;
  std::string note;
};
std::vector<SeedExample> SeedExamples();

// The training options of a tally_train run that the planner's exact numbers describe.
train::TrainOptions PlanAsTrainOptions(const PlanInput& in);

// One layer's experts' values, E·(8h² + 5h) (0: dense).
double ExpertValues(const PlanInput& in);
// The pipeline stages that can hold the most of anything per GPU under balanced layers
// (0, 1 and pp − 1, those there are).
std::vector<int> CandidateStages(int pp);

// Units made explicit: "21.00 GB (19.56 GiB)".
std::string Bytes(double bytes);

// --explain (lab/plan/explain.cc): the seed's selection flow (its section 6.2) on `world` GPUs
// of `gpu_bytes` each, `global_batch` sequences a step, each micro-batch one sequence,
// every test with its numbers (what a GPU holds, at the plan's precision, against its
// memory):
//   1. does the model fit one GPU?                 yes: data parallelism over all
//   2. is it the optimizer's state that does not?  yes: ZeRO-1, else ZeRO-2, if one fits
//   3. does the largest layer fit one GPU?         yes: the fewest pipeline stages that
//                                                  fit; no: the fewest tp ranks of a node
//                                                  (each with ZeRO-1 if it needs it)
//   4. very large (model states past a node's GPUs, or nothing above fits)?  3D: the
//      largest tp of a node, the fewest stages, ZeRO up to 2, dp the rest
// then (with `search`) SearchGrids' fastest beside it, and the dry run that checks it.
struct FlowStep {
  int number = 0;  // the test's, 1-4 above
  std::string question, numbers, answer;
};
struct Explanation {
  std::vector<FlowStep> steps;
  bool flow_fits = false;  // the flow reached a layout that fits
  PlanInput flow;          // that layout
  double flow_memory = 0;
  StepTime flow_time;
  std::optional<SearchResult> fastest;  // the search's (none fits, or no search: empty)
  std::string verdict;  // the two side by side in one line: the same grid, or why not
  std::string check;    // the tally_train --dry_run of the flow's layout (tally's GPT)
};
absl::StatusOr<Explanation> Explain(const PlanInput& base, int world, int global_batch,
                                    double gpu_bytes, const std::string& cluster,
                                    bool search = true);
void PrintExplanation(const PlanInput& base, int world, const Explanation& e, bool json,
                      std::ostream& out);

// tally_plan's table for one grid (lab/plan/print.cc): the strategies' rows, memory per GPU,
// activations, the bubble and, on a cluster, the predicted step.
void PrintPlan(const PlanInput& in, std::ostream& out);
// The same as one JSON object on a line.
void PrintPlanJson(const PlanInput& in, std::ostream& out);
// --search's answer: the 20 fastest of `found` as a table, or every one as JSON.
void PrintSearch(const PlanInput& base, int world, int global, double memory_gb,
                 const std::vector<SearchResult>& found, bool json, std::ostream& out);
// --seed_examples: the seed's figures beside the planner's, a table or JSON.
void PrintSeedExamples(bool json, std::ostream& out);

}  // namespace tally::plan
