// The training loop of one rank: data, model, optimizer, schedule, evaluation, sampling,
// checkpoints, and the per-step log (trainer.cc; a pipeline stage's step in
// pipelined_step.cc; whole checkpoints from any grid in checkpoints.cc).
//
//   RETURN_IF_ERROR(Train(options, std::cout));        // every rank, and the report
//
//   ASSIGN_OR_RETURN(auto trainer, Trainer::Create(options, &world));   // one rank
//   RETURN_IF_ERROR(trainer->Run(std::cout));
//
// Step k trains on the global batch k of the documented batch order (core/data/dataset.h).
// With dp data-parallel ranks, rank r takes the r-th contiguous share of G/dp sequences
// of it, in micro-batches of micro_batch_size; every token's loss is weighted
// 1 / (G · seq_len), so the sum of the ranks' gradients (core/parallel/data_parallel.h) is the
// gradient of the mean loss over the global batch, as on one rank. Then the gradients are
// clipped to --grad_clip by their global norm and the optimizer steps with the scheduled
// learning rate (core/optim/schedule.h).
#pragma once

#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/data/dataset.h"
#include "core/model/checkpoint.h"
#include "core/model/gpt.h"
#include "core/optim/optimizer.h"
#include "core/parallel/context_parallel.h"
#include "core/parallel/data_parallel.h"
#include "core/parallel/expert_parallel.h"
#include "core/parallel/pipeline_parallel.h"
#include "core/parallel/pipeline_schedule.h"
#include "core/parallel/tensor_parallel.h"
#include "core/parallel/zero/zero.h"
#include "core/runtime/comm/communicator.h"
#include "core/train/evaluation.h"
#include "core/train/options.h"
#include "core/train/stop.h"

namespace tally::train {

struct StepStats {
  int64_t step = 0;  // 1-based: the number of optimizer steps done after it
  float loss = 0, lr = 0;
  double grad_norm = 0;  // before clipping
  double ms = 0, tokens_per_s = 0, gflops = 0;
  // With experts (core/model/moe.h), over the global batch: the auxiliary loss (summed over
  // the layers, the mean over the micro-batches; not in `loss`), the share of the
  // choices dropped at capacity, and the fewest, mean and most tokens an expert took
  // (summed over the layers).
  double aux_loss = 0, dropped = 0;
  double expert_tokens_min = 0, expert_tokens_mean = 0, expert_tokens_max = 0;
  // With compression (--zero_quantized_weights, --grad_compression): how far it moved what
  // the step sent, sqrt(Σ residual² / Σ value²) over every rank (core/parallel/
  // compression_error.h); 0 on a step that sent everything as it was.
  double compression_error = 0;
};

class Trainer {
 public:
  // `world` is this rank's communicator (null for a run of one rank); it must outlive the
  // trainer.
  static absl::StatusOr<std::unique_ptr<Trainer>> Create(const TrainOptions& options,
                                                         comm::Communicator* world = nullptr);

  // Trains from the loaded step to options.training.steps, logging one line per step, then saves
  // and samples as the options ask. A step whose loss or gradient norm is not finite
  // stops the run with an error naming it, before anything is saved. With a stop
  // agreement (set_stop), a SIGINT or SIGTERM stops the run before the step the ranks
  // agree on: it saves (with --save) the steps done and returns kCancelled.
  absl::Status Run(std::ostream& log);
  // Shared by the ranks of this process; must outlive Run.
  void set_stop(StopAgreement* stop) { stop_ = stop; }

  // One optimizer step on global batch `step` (0-based).
  absl::StatusOr<StepStats> TrainStep(int64_t step);
  // Mean loss over the first eval_batches micro-batches of the validation split.
  absl::StatusOr<float> Evaluate();
  // `bytes` bytes generated after the options' prompt (or a newline), with their
  // temperature and top-k.
  absl::StatusOr<std::string> Sample(int bytes);
  // Writes a whole checkpoint (rank 0 writes; with ZeRO every rank must call it).
  absl::Status Save(const std::string& path, int64_t step);
  // The whole parameters on rank 0 (empty elsewhere); with ZeRO every rank must call it.
  absl::StatusOr<Tensor> Parameters();

  model::GPT& model() { return *gpt_; }
  MemoryLedger& memory() { return *alloc_.ledger(); }
  // This rank's optimizer: over the whole buffer, or (ZeRO) over its shard.
  optim::Optimizer& optimizer() { return weights_->optimizer(); }
  // This rank's traffic: the world's ledger, or this trainer's own.
  comm::TrafficLedger& traffic() { return world_ != nullptr ? world_->ledger() : own_traffic_; }
  int64_t start_step() const { return start_step_; }
  // The loss of every step Run made, and the validation loss of each evaluation (on a
  // rank that evaluates) with its step.
  const std::vector<float>& losses() const { return losses_; }
  const std::vector<std::pair<int64_t, float>>& val_losses() const { return val_losses_; }
  // Each step's StepStats::compression_error (empty without compression).
  const std::vector<double>& compression_errors() const { return compression_errors_; }
  // With experts: the choices each expert of each layer received over the steps so far,
  // summed over the world's ranks, [l·E + e] (the report's routing table).
  const std::vector<double>& expert_tokens() const { return expert_tokens_; }
  // With --trace: every forward and backward of a micro-batch this rank ran.
  struct Span {
    std::string name;  // "forward 3", "backward 3"
    int64_t start_nanos, end_nanos;
  };
  const std::vector<Span>& spans() const { return spans_; }
  const data::Dataset& dataset() const { return data_; }

 private:
  Trainer(const TrainOptions& options, data::Dataset data, comm::Communicator* world);
  bool logs() const { return world_ == nullptr || world_->rank() == 0; }
  // The run's first lines: the model, the data, the batch, the pipeline (and its chart).
  void LogHeader(std::ostream& log);
  // --sample_only: the model, the checkpoint, then the sample.
  absl::Status SampleOnly(std::ostream& log);
  // The sample's lines (rank 0 alone writes them; every sampling rank must call it).
  absl::Status LogSample(std::ostream& log);
  absl::Status Load(const std::string& path);
  // The whole model's parameters and (if asked) optimizer state on rank 0, in memory no
  // ledger counts; empty elsewhere. Every rank must call it.
  using Whole = parallel::TrainableWeights::Part;
  absl::StatusOr<Whole> GatherWhole(bool with_optimizer);
  // Every rank's compression state (its error feedback) on rank 0, empty elsewhere. Every
  // rank must call it.
  absl::StatusOr<model::CompressionState> GatherCompressionState();
  // This rank's compression state from `loaded` when the checkpoint's is this run's (the
  // same method, flags and grid); otherwise it starts afresh, with a warning past the
  // warm-up.
  absl::Status RestoreCompressionState(const model::LoadedCheckpoint& loaded);
  // The first sequence of this rank's share of global batch `step` (0-based).
  int64_t FirstSequence(int64_t step) const;
  // The mean of the ranks' losses (every rank's share of the batch is the same size).
  absl::StatusOr<float> GlobalMean(float local);
  // Whether this rank runs the evaluation and sampling forwards. Rank 0 does, on its
  // replica; a replica split by tensor parallelism needs its whole tp group; ZeRO-3 ranks
  // hold shards of the parameters, so every rank must take part.
  bool Evaluates() const;
  // This rank's model for evaluation and sampling (evaluation.h).
  EvalModel Eval();

  TrainOptions options_;
  comm::Communicator* world_;
  // Allocations are charged to the rank's memory ledger: the world's, or this one.
  MemoryLedger own_memory_;
  Allocator own_alloc_{&own_memory_};
  comm::TrafficLedger own_traffic_{0};
  // This rank's groups of the grid (core/parallel/topology.h): dp when dp > 1 or ZeRO, tp
  // when tp > 1, pp (the stages, in order) and embedding (the first and the last stage,
  // which both hold the tied embedding) when pp > 1; null otherwise.
  parallel::Topology::Groups groups_;
  // The model's layers over the tp group (one rank when there is none): its LayerSplit.
  parallel::TensorParallel tensor_parallel_;
  // Expert parallelism: the experts' place (over the ep group).
  std::unique_ptr<parallel::ExpertParallel> experts_;
  // Context parallelism: each sequence's pieces over the cp group (the model's
  // SequenceSplit); null without it.
  std::unique_ptr<parallel::ContextParallel> sequence_;
  data::Dataset data_;
  Allocator& alloc_;       // host memory: what the trainer reads itself, scalars to reduce
  Allocator model_alloc_;  // the model's device (--device): weights, activations, optimizer
  // The model's weights, gradients and optimizer, and the end of its step: a replica
  // (with data parallelism's sync), or with ZeRO a stage's shards.
  std::unique_ptr<parallel::TrainableWeights> weights_;
  std::unique_ptr<model::GPT> gpt_;
  std::vector<int32_t> inputs_, targets_;  // one micro-batch
  // Micro-batch `j` of this rank's share of the batch from sequence `first`: b sequences,
  // or under context parallelism this rank's positions of them (ContextParallel::Cut);
  // returns the tokens and targets the model takes.
  std::pair<const int32_t*, const int32_t*> FillMicroBatch(int64_t first, int j, int b);
  int64_t start_step_ = 0;
  model::TrainedOn loaded_from_;  // what the --load checkpoint says its run was
  StopAgreement* stop_ = nullptr;
  std::vector<float> losses_;
  std::vector<std::pair<int64_t, float>> val_losses_;
  std::vector<double> compression_errors_;
  std::vector<double> expert_tokens_;
  std::vector<Span> spans_;
  // Records a span from `start` to now (with --trace).
  void RecordSpan(const char* what, int micro_batch, int64_t start);

  // Pipeline parallelism (core/parallel/pipeline_parallel.h runs the stage).
  absl::Status SetUpPipeline();
  absl::StatusOr<StepStats> PipelinedTrainStep(int64_t step);
  absl::StatusOr<StepStats> Update(int64_t step, float local_loss, int64_t start);
  // The step's MoE figures into `s`, summed over the world's ranks.
  absl::Status MoeFigures(StepStats& s);
  // The step's compression error, its two sums all-reduced over the world (phase other,
  // label compression_error).
  absl::Status CompressionError(StepStats& s);
  // `sums` (fp64) all-reduced over the world's ranks in place, phase other, under `label`
  // (nothing for a run of one rank).
  absl::Status SumOverWorld(const char* label, std::vector<double>& sums);
  std::unique_ptr<parallel::PipelineParallel> pipeline_;  // when pp > 1
  int64_t train_nanos_ = 0;  // whole steps, over the run
  int64_t cpu_nanos_ = 0;    // the rank's thread's CPU time in those steps
  // --slow_rank: this rank computes slow_ms more at the start of the step (a busy loop on
  // its thread's CPU clock), and its timeline says so.
  void SlowDown();

 public:
  // Over the run: nanoseconds this stage computed, and its schedules took (each step's
  // forwards, backwards and transfers, without the optimizer).
  int64_t busy_nanos() const { return pipeline_ != nullptr ? pipeline_->busy_nanos() : 0; }
  int64_t step_nanos() const { return pipeline_ != nullptr ? pipeline_->step_nanos() : 0; }
  // Over the run: nanoseconds the training steps took, whole (any grid).
  int64_t train_nanos() const { return train_nanos_; }
  // Over the run: the CPU time the rank's own thread ran in its training steps.
  int64_t cpu_nanos() const { return cpu_nanos_; }
};

// OpenBLAS threads per rank: --threads, or the cores shared out among the dp ranks.
// Process-wide; call before the ranks start.
void SetIntraOpThreads(const TrainOptions& options, int ranks_here);

// An AdamW or SGD (options.training.optimizer) over `size` elements.
absl::StatusOr<std::unique_ptr<optim::Optimizer>> MakeOptimizer(const TrainOptions& options,
                                                                int64_t size, Allocator& alloc);

}  // namespace tally::train
