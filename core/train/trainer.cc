#include "core/train/trainer.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/optim/schedule.h"
#include "core/runtime/clock.h"
#include "core/runtime/comm/ledger/names.h"
#include "core/runtime/json_writer.h"
#include "core/runtime/kernels/cpu/gemm.h"
#include "core/runtime/signals.h"
#include "core/runtime/status_macros.h"
#include "core/train/parallelize.h"

namespace tally::train {

void SetIntraOpThreads(const TrainOptions& options, int ranks_here) {
  // The ranks on this machine share its cores: each gets its part, so that ranks x BLAS
  // threads <= cores.
  int cores = int(std::max(1u, std::thread::hardware_concurrency()));
  cpu::SetBlasThreads(options.training.threads > 0 ? options.training.threads
                                                   : std::max(1, cores / ranks_here));
}

absl::StatusOr<std::unique_ptr<optim::Optimizer>> MakeOptimizer(const TrainOptions& options,
                                                                int64_t size, Allocator& alloc) {
  if (options.training.optimizer == OptimizerKind::kAdamW) {
    optim::AdamWOptions adam;
    adam.weight_decay = options.training.weight_decay;
    ASSIGN_OR_RETURN(auto opt, optim::AdamW::Create(adam, size, alloc));
    return std::unique_ptr<optim::Optimizer>(std::move(opt));
  }
  optim::SGDOptions sgd;
  sgd.weight_decay = options.training.weight_decay;
  ASSIGN_OR_RETURN(auto opt, optim::SGD::Create(sgd, size, alloc));
  return std::unique_ptr<optim::Optimizer>(std::move(opt));
}

Trainer::Trainer(const TrainOptions& options, data::Dataset data, comm::Communicator* world)
    : options_(options),
      world_(world),
      data_(std::move(data)),
      alloc_(world != nullptr ? world->allocator() : own_alloc_),
      // On the GPU of the rank's transport (NCCL: one per rank); every rank of the threads
      // backend on GPU 0, which they share.
      model_alloc_(alloc_.ledger(),
                   options.ModelDevice(world != nullptr ? std::max(0, world->gpu()) : 0)) {}

// A rank's set-up in the order its parts depend on each other: its parallelism
// (parallelize.h: the grid's groups, the layer split, the weights' store and its
// optimizer), the model on them, the pipeline, the checkpoint.
absl::StatusOr<std::unique_ptr<Trainer>> Trainer::Create(const TrainOptions& requested,
                                                         comm::Communicator* world) {
  const TrainOptions options = requested.Resolved();
  RETURN_IF_ERROR(options.Validate());
  const int world_size = world != nullptr ? world->size() : 1;
  if (world_size != options.world()) {
    return absl::InvalidArgumentError(
        absl::StrCat("[train] ", world_size, " ranks cannot run --dp=", options.parallel.dp,
                     " x --tp=", options.parallel.tp, " x --pp=", options.parallel.pp));
  }
  data::Dataset data;
  if (options.dry_run || options.sampling.sample_only) {  // nothing to train on
    data = data::Placeholder(options.model.seq_len);
  } else {
    ASSIGN_OR_RETURN(data, data::LoadDataset(options.data.path, options.model.seq_len));
  }
  std::unique_ptr<Trainer> t(new Trainer(options, std::move(data), world));
  // The BLAS thread count is process-wide: set here for one rank, by Train() before it
  // starts the ranks of a multi-rank run.
  if (world == nullptr) SetIntraOpThreads(options, 1);

  ASSIGN_OR_RETURN(Parallelized parallel, Parallelize(options, world, t->model_alloc_));
  t->groups_ = std::move(parallel.groups);
  t->tensor_parallel_ = parallel.tensor_parallel;
  t->experts_ = std::move(parallel.experts);
  t->sequence_ = std::move(parallel.sequence);
  t->weights_ = std::move(parallel.weights);
  const parallel::TensorParallel& tp = t->tensor_parallel_;
  const model::ModelChunks& stage = parallel.stage;
  ASSIGN_OR_RETURN(t->gpt_, model::GPT::Create(options.model, t->model_alloc_, t->weights_.get(),
                                               &tp, stage, t->experts_.get()));
  if (options.matmul_inputs() != MatmulInputs::kF32) {
    ASSIGN_OR_RETURN(std::unique_ptr<Kernels> kernels,
                     Kernels::Create(t->model_alloc_.device(), options.matmul_inputs()));
    RETURN_IF_ERROR(t->gpt_->UseKernels(std::move(kernels)));
  }
  t->gpt_->SetRecompute(options.parallel.ModelRecompute());
  RETURN_IF_ERROR(t->gpt_->SetSequenceSplit(t->sequence_.get()));
  if (t->groups_.pp != nullptr) RETURN_IF_ERROR(t->SetUpPipeline());
  if (!options.checkpoint.load.empty()) {
    RETURN_IF_ERROR(t->Load(options.checkpoint.load));
    if (t->start_step_ > options.training.steps && !options.sampling.sample_only) {
      return absl::InvalidArgumentError(absl::StrCat(
          "[train] '", options.checkpoint.load, "' is at step ", t->start_step_,
          ": --steps=", options.training.steps,
          " is before it (--steps counts from the first step: --steps=", t->start_step_,
          " trains no more steps, --steps=", t->start_step_ + 1, " one more)"));
    }
  }
  size_t tokens = size_t(options.training.micro_batch_size) * options.model.seq_len;
  t->inputs_.resize(tokens);
  t->targets_.resize(tokens);
  return t;
}

void Trainer::RecordSpan(const char* what, int micro_batch, int64_t start) {
  if (options_.output.trace.empty() && options_.output.report_html.empty()) return;
  spans_.push_back({absl::StrCat(what, " ", micro_batch), start, MonotonicNanos()});
}

absl::StatusOr<float> Trainer::GlobalMean(float local) {
  if (groups_.dp == nullptr) return local;
  comm::PhaseScope phase(world_->ledger(), comm::Phase::kOther);
  comm::LabelScope label(world_->ledger(), comm::scope::kLoss);
  ASSIGN_OR_RETURN(double mean, groups_.dp->AllReduceValue(local, DType::kF32, comm::ReduceOp::kAvg));
  return float(mean);
}

int64_t Trainer::FirstSequence(int64_t step) const {
  // The dp_rank-th run of G / dp sequences of global batch `step` (core/data/dataset.h); the
  // ranks of a cp group take the same sequences.
  const int64_t g = options_.training.global_batch_size;
  const int dp_rank = world_ != nullptr ? options_.topology().Of(world_->rank()).dp : 0;
  return step * g + int64_t(dp_rank) * (g / options_.parallel.dp);
}

std::pair<const int32_t*, const int32_t*> Trainer::FillMicroBatch(int64_t first, int j, int b) {
  data_.train.Fill(first + int64_t(j) * b, b, inputs_.data(), targets_.data());
  if (sequence_ == nullptr) return {inputs_.data(), targets_.data()};
  return sequence_->Cut(inputs_.data(), targets_.data(), b);
}

void Trainer::SlowDown() {
  if (world_ == nullptr || world_->rank() != options_.cluster.slow_rank) return;
  // Compute, not a sleep: the rank's thread's CPU clock must advance by MS ms, so that a
  // host with more ranks than cores cannot hide it behind the others' turns.
  const int64_t until = ThreadCpuNanos() + int64_t(options_.cluster.slow_ms * 1e6);
  while (ThreadCpuNanos() < until) {
  }
  world_->ledger().timeline().ComputeSeconds(options_.cluster.slow_ms * 1e-3);
}

absl::StatusOr<StepStats> Trainer::TrainStep(int64_t step) {
  if (groups_.pp != nullptr) return PipelinedTrainStep(step);
  const int g = options_.training.global_batch_size, b = options_.training.micro_batch_size;
  const int micro_batches = options_.accumulation_steps();
  const int64_t tokens = int64_t(g) * options_.model.seq_len;
  const int64_t first = FirstSequence(step);
  int64_t start = MonotonicNanos();
  SlowDown();
  RETURN_IF_ERROR(gpt_->ZeroGrad());
  double loss_sum = 0;
  for (int j = 0; j < micro_batches; ++j) {
    const auto [tokens_here, targets_here] = FillMicroBatch(first, j, b);
    {
      comm::PhaseScope phase(traffic(), comm::Phase::kForward);
      const int64_t t0 = MonotonicNanos();
      ASSIGN_OR_RETURN(float loss, gpt_->Forward(tokens_here, targets_here, b));
      RecordSpan("forward", j, t0);
      loss_sum += loss;
    }
    comm::PhaseScope phase(traffic(), comm::Phase::kBackward);
    const int64_t t0 = MonotonicNanos();
    // The last micro-batch: the store may sum each gradient bucket as soon as it is final.
    const bool last = j + 1 == micro_batches;
    if (last) weights_->BeginLastBackward();
    RETURN_IF_ERROR(gpt_->Backward(1.0f / float(tokens)));
    RecordSpan("backward", j, t0);
    if (last) RETURN_IF_ERROR(weights_->EndBackward());
  }
  return Update(step, float(loss_sum / micro_batches), start);
}

// The rest of a step, after every micro-batch's backward: the loss averaged over the
// replicas, the learning rate, the global gradient norm, clipping, the optimizer.
absl::StatusOr<StepStats> Trainer::Update(int64_t step, float local_loss, int64_t start) {
  const int64_t tokens = int64_t(options_.training.global_batch_size) * options_.model.seq_len;
  StepStats s;
  s.step = step + 1;
  ASSIGN_OR_RETURN(s.loss, GlobalMean(local_loss));
  s.lr = optim::LearningRate(s.step, options_.training.warmup_steps, options_.training.steps,
                             options_.training.lr, options_.training.min_lr);
  ASSIGN_OR_RETURN(s.grad_norm, weights_->Step(s.lr, options_.training.grad_clip));
  if (options_.model.moe()) RETURN_IF_ERROR(MoeFigures(s));
  if (options_.parallel.Compresses()) RETURN_IF_ERROR(CompressionError(s));
  double seconds = SecondsSince(start);
  train_nanos_ += int64_t(seconds * 1e9);
  s.ms = seconds * 1e3;
  s.tokens_per_s = double(tokens) / seconds;
  s.gflops = options_.model.FlopsPerToken() * double(tokens) / seconds / 1e9;
  return s;
}

absl::Status Trainer::SumOverWorld(const char* label, std::vector<double>& sums) {
  if (world_ == nullptr) return absl::OkStatus();
  comm::PhaseScope phase(world_->ledger(), comm::Phase::kOther);
  comm::LabelScope scope(world_->ledger(), label);
  ASSIGN_OR_RETURN(Tensor t, Tensor::Empty({int64_t(sums.size())}, DType::kF64, alloc_,
                                           MemoryCategory::kComm));
  std::copy(sums.begin(), sums.end(), t.data<double>());
  RETURN_IF_ERROR(world_->AllReduce(t, comm::ReduceOp::kSum));
  std::copy(t.data<double>(), t.data<double>() + sums.size(), sums.begin());
  return absl::OkStatus();
}

absl::Status Trainer::CompressionError(StepStats& s) {
  const parallel::ErrorSums mine = weights_->CompressionError();
  std::vector<double> sums = {mine.residual, mine.value};
  RETURN_IF_ERROR(SumOverWorld(comm::scope::kCompressionError, sums));
  s.compression_error = sums[1] > 0 ? std::sqrt(sums[0] / sums[1]) : 0;
  return absl::OkStatus();
}

absl::Status Trainer::MoeFigures(StepStats& s) {
  // Every rank's backwards: its micro-batches (dp) through its layers (pp).
  model::GPT::MoeStats m = gpt_->TakeMoeStats();
  const int experts = options_.model.n_experts;
  std::vector<double> sums = {m.aux_loss, double(m.dropped), double(m.assignments)};
  for (int64_t t : m.expert_tokens) sums.push_back(double(t));
  // The ranks of a tp group route alike: tp rank 0 speaks for them. The ranks of a cp group
  // route their own rows, but share the micro-batch's aux loss: cp rank 0 gives it.
  if (tensor_parallel_.rank() != 0) std::fill(sums.begin(), sums.end(), 0.0);
  if (groups_.cp != nullptr && groups_.cp->rank() != 0) sums[0] = 0;
  RETURN_IF_ERROR(SumOverWorld("moe_stats", sums));
  s.aux_loss = sums[0] / (double(options_.parallel.dp) * options_.accumulation_steps());
  s.dropped = sums[2] > 0 ? sums[1] / sums[2] : 0;
  const auto tokens = sums.begin() + 3;
  expert_tokens_.resize(m.expert_tokens.size(), 0.0);
  std::vector<double> per_expert(size_t(experts), 0.0);  // over the layers
  for (size_t i = 0; i < m.expert_tokens.size(); ++i) {
    expert_tokens_[i] += tokens[ptrdiff_t(i)];
    per_expert[i % size_t(experts)] += tokens[ptrdiff_t(i)];
  }
  s.expert_tokens_min = *std::min_element(per_expert.begin(), per_expert.end());
  s.expert_tokens_max = *std::max_element(per_expert.begin(), per_expert.end());
  double all = 0;
  for (double t : per_expert) all += t;
  s.expert_tokens_mean = all / experts;
  return absl::OkStatus();
}

bool Trainer::Evaluates() const {
  if (groups_.pp != nullptr) return true;  // every stage holds part of the model
  if (groups_.dp != nullptr && options_.parallel.zero == 3) return true;
  if (groups_.ep != nullptr) return true;  // every rank holds some of the experts
  // dp rank 0's tp and cp groups
  if (groups_.tp != nullptr || groups_.cp != nullptr) {
    return options_.topology().Of(world_->rank()).dp == 0;
  }
  return logs();
}

EvalModel Trainer::Eval() {
  return {gpt_.get(), pipeline_.get(), groups_.tp.get(), groups_.pp.get(), &alloc_, &traffic(),
          sequence_.get()};
}

absl::StatusOr<float> Trainer::Evaluate() {
  return ValidationLoss(Eval(), data_.val, options_.training.micro_batch_size,
                        options_.data.eval_batches);
}

absl::StatusOr<std::string> Trainer::Sample(int bytes) {
  return train::Sample(Eval(), options_.sampling, bytes, options_.training.seed);
}

}  // namespace tally::train
