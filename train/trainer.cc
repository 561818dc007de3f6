#include "train/trainer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "model/checkpoint.h"
#include "optim/schedule.h"
#include "runtime/clock.h"
#include "runtime/comm/launch.h"
#include "runtime/json_writer.h"
#include "runtime/kernels/cpu/gemm.h"
#include "runtime/rng.h"
#include "runtime/status_macros.h"
#include "train/report.h"

namespace tally::train {

void SetIntraOpThreads(const TrainOptions& options) {
  // Ranks share the cores: each gets its part, so that ranks x BLAS threads <= cores.
  int cores = int(std::max(1u, std::thread::hardware_concurrency()));
  cpu::SetBlasThreads(options.threads > 0 ? options.threads : std::max(1, cores / options.dp));
}

absl::StatusOr<std::unique_ptr<optim::Optimizer>> MakeOptimizer(const TrainOptions& options,
                                                                int64_t size, Allocator& alloc) {
  if (options.optimizer == "adamw") {
    optim::AdamWOptions adam;
    adam.weight_decay = options.weight_decay;
    ASSIGN_OR_RETURN(auto opt, optim::AdamW::Create(adam, size, alloc));
    return std::unique_ptr<optim::Optimizer>(std::move(opt));
  }
  optim::SGDOptions sgd;
  sgd.weight_decay = options.weight_decay;
  ASSIGN_OR_RETURN(auto opt, optim::SGD::Create(sgd, size, alloc));
  return std::unique_ptr<optim::Optimizer>(std::move(opt));
}

Trainer::Trainer(const TrainOptions& options, data::Dataset data, comm::Communicator* world)
    : options_(options),
      world_(world),
      data_(std::move(data)),
      alloc_(world != nullptr ? world->allocator() : own_alloc_) {}

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::Create(const TrainOptions& requested,
                                                         comm::Communicator* world) {
  const TrainOptions options = requested.Resolved();
  RETURN_IF_ERROR(options.Validate());
  const int world_size = world != nullptr ? world->size() : 1;
  if (world_size != options.dp) {
    return absl::InvalidArgumentError(absl::StrCat("[train] ", world_size,
                                                   " ranks cannot run --dp=", options.dp));
  }
  ASSIGN_OR_RETURN(data::Dataset data, data::LoadDataset(options.data, options.model.seq_len));
  std::unique_ptr<Trainer> t(new Trainer(options, std::move(data), world));
  // The BLAS thread count is process-wide: set here for one rank, by Train() before it
  // starts the ranks of a multi-rank run.
  if (world == nullptr) SetIntraOpThreads(options);

  if (world != nullptr) {
    // The data-parallel group: every rank of the world, for now.
    ASSIGN_OR_RETURN(t->dp_, world->Split(/*color=*/0, world->rank(), "dp"));
  }
  ASSIGN_OR_RETURN(comm::Algorithm algorithm, comm::ParseAlgorithm(options.allreduce));
  const model::ParameterLayout layout = model::ParameterLayout::ForGPT(options.model);
  if (t->dp_ != nullptr && options.zero >= 1) {
    auto make_optimizer = [options](int64_t n, Allocator& alloc) {
      return MakeOptimizer(options, n, alloc);
    };
    ASSIGN_OR_RETURN(t->zero_, parallel::ZeroWeights::Create(t->dp_.get(), options.zero, layout,
                                                             options.seed, make_optimizer,
                                                             algorithm));
    ASSIGN_OR_RETURN(t->gpt_, model::GPT::Create(options.model, t->alloc_, t->zero_.get()));
  } else {
    ASSIGN_OR_RETURN(t->gpt_, model::GPT::Create(options.model, t->alloc_, options.seed));
    ASSIGN_OR_RETURN(t->optimizer_, MakeOptimizer(options, layout.total(), t->alloc_));
    t->segments_ = model::OptimizerSegments(layout);
    if (t->dp_ != nullptr) {
      t->sync_ = std::make_unique<parallel::GradientSync>(
          t->dp_.get(), layout.total(), int64_t(options.bucket_mb * (1 << 20)), algorithm);
    }
  }
  if (!options.load.empty()) RETURN_IF_ERROR(t->Load(options.load));
  size_t tokens = size_t(options.micro_batch_size) * options.model.seq_len;
  t->inputs_.resize(tokens);
  t->targets_.resize(tokens);
  return t;
}

absl::StatusOr<float> Trainer::GlobalMean(float local) {
  if (dp_ == nullptr) return local;
  comm::PhaseScope phase(world_->ledger(), comm::Phase::kOther);
  comm::LabelScope label(world_->ledger(), "loss");
  ASSIGN_OR_RETURN(Tensor value, Tensor::Empty({1}, DType::kF32, alloc_, MemoryCategory::kComm));
  value.data<float>()[0] = local;
  RETURN_IF_ERROR(dp_->AllReduce(value, comm::ReduceOp::kAvg));
  return value.data<float>()[0];
}

absl::StatusOr<StepStats> Trainer::TrainStep(int64_t step) {
  const int g = options_.global_batch_size, b = options_.micro_batch_size;
  const int micro_batches = options_.accumulation_steps();
  const int64_t tokens = int64_t(g) * options_.model.seq_len;
  // This rank's share of global batch `step`: the dp_rank-th run of g / dp sequences.
  const int dp_rank = dp_ != nullptr ? dp_->rank() : 0;
  const int64_t first = step * g + int64_t(dp_rank) * (g / options_.dp);
  int64_t start = MonotonicNanos();
  gpt_->ZeroGrad();
  double loss_sum = 0;
  for (int j = 0; j < micro_batches; ++j) {
    data_.train.Fill(first + int64_t(j) * b, b, inputs_.data(), targets_.data());
    {
      comm::PhaseScope phase(traffic(), comm::Phase::kForward);
      ASSIGN_OR_RETURN(float loss, gpt_->Forward(inputs_.data(), targets_.data(), b));
      loss_sum += loss;
    }
    comm::PhaseScope phase(traffic(), comm::Phase::kBackward);
    if (sync_ == nullptr || j + 1 < micro_batches) {  // ZeRO reduces in its weight store
      RETURN_IF_ERROR(gpt_->Backward(1.0f / float(tokens)));
      continue;
    }
    // The last micro-batch: sum each gradient bucket over the ranks as soon as it is final.
    sync_->BeginStep();
    RETURN_IF_ERROR(gpt_->Backward(1.0f / float(tokens), [&](int64_t begin, int64_t end) {
      return sync_->Ready(gpt_->grads(), begin, end);
    }));
    RETURN_IF_ERROR(sync_->Finish(gpt_->grads()));
  }
  StepStats s;
  s.step = step + 1;
  ASSIGN_OR_RETURN(s.loss, GlobalMean(float(loss_sum / micro_batches)));
  s.lr = optim::LearningRate(step, options_.warmup_steps, options_.steps, options_.lr,
                             options_.min_lr);
  if (zero_ != nullptr) {
    ASSIGN_OR_RETURN(s.grad_norm, zero_->Step(s.lr, options_.grad_clip));
  } else {
    float* grads = gpt_->grads().data<float>();
    int64_t n = gpt_->grads().numel();
    s.grad_norm = std::sqrt(optim::SquaredNorm(grads, n));
    if (options_.grad_clip > 0) {
      float scale = optim::ClipScale(s.grad_norm, options_.grad_clip);
      if (scale < 1.0f) optim::Scale(grads, n, scale);
    }
    optimizer_->Step(gpt_->params().data<float>(), grads, s.lr, segments_);
  }
  double seconds = SecondsSince(start);
  s.ms = seconds * 1e3;
  s.tokens_per_s = double(tokens) / seconds;
  s.gflops = options_.model.FlopsPerToken() * double(tokens) / seconds / 1e9;
  return s;
}

absl::StatusOr<float> Trainer::Evaluate() {
  comm::PhaseScope phase(traffic(), comm::Phase::kEval);
  const int b = options_.micro_batch_size;
  int batches = int(std::min<int64_t>(options_.eval_batches,
                                      std::max<int64_t>(1, data_.val.sequences() / b)));
  double sum = 0;
  for (int j = 0; j < batches; ++j) {
    data_.val.Fill(int64_t(j) * b, b, inputs_.data(), targets_.data());
    ASSIGN_OR_RETURN(float loss, gpt_->Forward(inputs_.data(), targets_.data(), b));
    sum += loss;
  }
  return float(sum / batches);
}

absl::StatusOr<std::string> Trainer::Sample(int bytes) {
  comm::PhaseScope phase(traffic(), comm::Phase::kEval);
  const int t = options_.model.seq_len, v = options_.model.vocab_size;
  std::vector<int32_t> context = {'\n'};
  std::vector<int32_t> window(t, 0);
  std::string text;
  const uint64_t stream = StreamOf("sample");
  std::vector<std::pair<float, int>> scored(v);
  for (int i = 0; i < bytes; ++i) {
    // The last (up to) T bytes, left-aligned; causal attention makes the padding after
    // them irrelevant to the logits at the last real position.
    int len = std::min<int>(int(context.size()), t);
    std::copy(context.end() - len, context.end(), window.begin());
    ASSIGN_OR_RETURN(float unused, gpt_->Forward(window.data(), nullptr, 1));
    (void)unused;
    const float* logits = gpt_->logits() + int64_t(len - 1) * v;
    for (int j = 0; j < v; ++j) scored[j] = {logits[j] / options_.temperature, j};
    int k = options_.top_k > 0 ? options_.top_k : v;
    std::partial_sort(scored.begin(), scored.begin() + k, scored.end(), std::greater<>());
    double total = 0;
    for (int j = 0; j < k; ++j) total += std::exp(scored[j].first - scored[0].first);
    double pick = Uniform(options_.seed, stream, uint64_t(i)) * total;
    int chosen = scored[k - 1].second;
    for (int j = 0; j < k; ++j) {
      pick -= std::exp(scored[j].first - scored[0].first);
      if (pick <= 0) {
        chosen = scored[j].second;
        break;
      }
    }
    context.push_back(chosen);
    text += char(chosen);
  }
  return text;
}

absl::StatusOr<Tensor> Trainer::Parameters() {
  if (zero_ != nullptr) return zero_->GatherParams(/*root=*/0);
  return logs() ? gpt_->params() : Tensor();
}

absl::Status Trainer::Save(const std::string& path, int64_t step) {
  if (zero_ == nullptr) {
    return logs() ? model::SaveCheckpoint(path, options_.model, gpt_->params().data<float>(),
                                          optimizer_.get(), step)
                  : absl::OkStatus();
  }
  // Checkpoints are whole: rank 0 gathers every shard first.
  comm::PhaseScope phase(traffic(), comm::Phase::kCheckpoint);
  ASSIGN_OR_RETURN(Tensor params, zero_->GatherParams(/*root=*/0));
  ASSIGN_OR_RETURN(auto optimizer, zero_->GatherOptimizer(/*root=*/0));
  if (!logs()) return absl::OkStatus();
  return model::SaveCheckpoint(path, options_.model, params.data<float>(), optimizer.get(), step);
}

absl::Status Trainer::Load(const std::string& path) {
  if (zero_ == nullptr) {
    ASSIGN_OR_RETURN(model::LoadedCheckpoint loaded,
                     model::LoadCheckpoint(path, options_.model, gpt_->params().data<float>(),
                                           optimizer_.get()));
    start_step_ = loaded.step;
    return absl::OkStatus();
  }
  // Every rank reads the whole file and keeps its shard.
  Allocator unaccounted(nullptr);
  const int64_t total = gpt_->layout().total();
  ASSIGN_OR_RETURN(Tensor params, Tensor::Empty({total}, DType::kF32, unaccounted));
  ASSIGN_OR_RETURN(auto whole, MakeOptimizer(options_, total, unaccounted));
  ASSIGN_OR_RETURN(model::LoadedCheckpoint loaded,
                   model::LoadCheckpoint(path, options_.model, params.data<float>(), whole.get()));
  start_step_ = loaded.step;
  return zero_->Load(params.data<float>(), loaded.has_optimizer ? whole.get() : nullptr);
}

namespace {

std::string StepJson(const StepStats& s) {
  JsonWriter w;
  w.BeginObject();
  w.Key("step").Int(s.step).Key("loss").Double(s.loss).Key("lr").Double(s.lr);
  w.Key("grad_norm").Double(s.grad_norm).Key("ms").Double(s.ms);
  w.Key("tokens_per_s").Double(s.tokens_per_s).Key("gflops").Double(s.gflops);
  w.EndObject();
  return w.str();
}

std::string ValJson(int64_t step, float val_loss) {
  JsonWriter w;
  w.BeginObject().Key("step").Int(step).Key("val_loss").Double(val_loss).EndObject();
  return w.str();
}

}  // namespace

absl::Status Trainer::Run(std::ostream& out) {
  // Every rank trains and takes part in saving (ZeRO gathers the shards); rank 0 alone
  // logs, and evaluates and samples on its replica, which adds no traffic. ZeRO-3 ranks
  // have no replica: they all evaluate and sample, gathering the parameters (phase eval).
  std::ostream null(nullptr);
  std::ostream& log = logs() ? out : null;
  const model::GPTConfig& c = options_.model;
  log << absl::StrFormat(
      "model: %s, %d parameters\ndata: %s, %d bytes (train %d, val %d tokens); unigram entropy "
      "%.3f nats, uniform ln(256) = %.3f\nbatch: %d sequences x %d tokens per step; dp=%d "
      "(zero=%d), each rank %d micro-batch(es) of %d; %s, lr %g -> %g, warm-up %d, %d steps\n",
      c.ToString(), c.NumParams(), data_.source, data_.bytes, data_.train.tokens(),
      data_.val.tokens(), data_.unigram_entropy, std::log(256.0), options_.global_batch_size,
      c.seq_len, options_.dp, options_.zero, options_.accumulation_steps(),
      options_.micro_batch_size, optimizer().name(), options_.lr, options_.min_lr,
      options_.warmup_steps, options_.steps);
  if (start_step_ > 0) log << "resumed from '" << options_.load << "' at step " << start_step_ << "\n";

  std::ofstream metrics;
  if (logs() && !options_.metrics_json.empty()) {
    metrics.open(options_.metrics_json, std::ios::trunc);
    if (!metrics) return absl::InvalidArgumentError("[train] cannot write '" + options_.metrics_json + "'");
  }
  for (int64_t k = start_step_; k < options_.steps; ++k) {
    ASSIGN_OR_RETURN(StepStats s, TrainStep(k));
    log << absl::StrFormat(
        "step %5d/%d | loss %.4f | lr %.2e | grad norm %.3f | %7.1f ms | %7.0f tok/s | %5.1f GFLOP/s\n",
        s.step, options_.steps, s.loss, s.lr, s.grad_norm, s.ms, s.tokens_per_s, s.gflops);
    if (metrics.is_open()) metrics << StepJson(s) << "\n" << std::flush;
    bool evaluate = options_.eval_every > 0 && (s.step % options_.eval_every == 0 || s.step == options_.steps);
    if ((logs() || forward_is_collective()) && evaluate) {
      ASSIGN_OR_RETURN(float val, Evaluate());
      log << absl::StrFormat("step %5d/%d | val loss %.4f\n", s.step, options_.steps, val);
      if (metrics.is_open()) metrics << ValJson(s.step, val) << "\n" << std::flush;
    }
    if (options_.save_every > 0 && s.step % options_.save_every == 0 && s.step < options_.steps) {
      RETURN_IF_ERROR(Save(options_.save, s.step));
    }
  }
  if (!options_.save.empty()) {
    int64_t step = std::max(start_step_, options_.steps);
    RETURN_IF_ERROR(Save(options_.save, step));
    log << "saved '" << options_.save << "' at step " << step << "\n";
  }
  if ((logs() || forward_is_collective()) && options_.sample_bytes > 0) {
    ASSIGN_OR_RETURN(std::string text, Sample(options_.sample_bytes));
    log << "sample (temperature " << options_.temperature << ", top-k " << options_.top_k
        << "):\n" << text << "\n";
  }
  return absl::OkStatus();
}

absl::Status Train(const TrainOptions& requested, std::ostream& log) {
  const TrainOptions options = requested.Resolved();
  RETURN_IF_ERROR(options.Validate());
  if (options.dp == 1 && options.zero == 0) {
    ASSIGN_OR_RETURN(auto trainer, Trainer::Create(options));
    return trainer->Run(log);
  }
  SetIntraOpThreads(options);
  std::vector<comm::TrafficLedger> traffic(options.dp);
  std::vector<MemoryLedger> memory(options.dp);
  int64_t start_step = 0;
  comm::LaunchOptions launch;
  launch.world_size = options.dp;
  RETURN_IF_ERROR(comm::RunThreadRanks(launch, [&](comm::Communicator& world) -> absl::Status {
    ASSIGN_OR_RETURN(auto trainer, Trainer::Create(options, &world));
    RETURN_IF_ERROR(trainer->Run(log));
    traffic[world.rank()] = world.ledger();
    memory[world.rank()] = world.memory();
    if (world.rank() == 0) start_step = trainer->start_step();
    return absl::OkStatus();
  }));
  int64_t steps = std::max<int64_t>(0, options.steps - start_step);  // steps this run made
  ReportInputs report{options, steps, traffic, memory};
  log << "\n" << FormatReport(report);
  if (!options.traffic_json.empty()) {
    RETURN_IF_ERROR(WriteTextFile(options.traffic_json, ReportJson(report) + "\n"));
  }
  return absl::OkStatus();
}

}  // namespace tally::train
