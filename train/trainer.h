// The training loop of one rank: data, model, optimizer, schedule, evaluation, sampling,
// checkpoints, and the per-step log.
//
//   ASSIGN_OR_RETURN(auto trainer, Trainer::Create(options));
//   RETURN_IF_ERROR(trainer->Run(std::cout));
//
// Step k trains on the global batch k of the documented batch order (data/dataset.h):
// global_batch_size / micro_batch_size micro-batches, their gradients accumulated with
// each token weighted 1 / (global_batch_size · seq_len), so the loss is the mean over the
// global batch. Then the gradients are clipped to --grad_clip by their global norm and the
// optimizer steps with the scheduled learning rate (optim/schedule.h).
#pragma once

#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "data/dataset.h"
#include "model/gpt.h"
#include "optim/optimizer.h"
#include "train/options.h"

namespace tally::train {

struct StepStats {
  int64_t step = 0;  // 1-based: the number of optimizer steps done after it
  float loss = 0, lr = 0;
  double grad_norm = 0;  // before clipping
  double ms = 0, tokens_per_s = 0, gflops = 0;
};

class Trainer {
 public:
  static absl::StatusOr<std::unique_ptr<Trainer>> Create(const TrainOptions& options);

  // Trains from the loaded step to options.steps, logging one line per step, then saves
  // and samples as the options ask.
  absl::Status Run(std::ostream& log);

  // One optimizer step on global batch `step` (0-based).
  absl::StatusOr<StepStats> TrainStep(int64_t step);
  // Mean loss over the first eval_batches micro-batches of the validation split.
  absl::StatusOr<float> Evaluate();
  // `bytes` bytes generated after a newline, with the options' temperature and top-k.
  absl::StatusOr<std::string> Sample(int bytes);
  absl::Status Save(const std::string& path, int64_t step);

  model::GPT& model() { return *gpt_; }
  optim::Optimizer& optimizer() { return *optimizer_; }
  int64_t start_step() const { return start_step_; }
  const data::Dataset& dataset() const { return data_; }

 private:
  Trainer(const TrainOptions& options, data::Dataset data);

  TrainOptions options_;
  data::Dataset data_;
  MemoryLedger memory_;
  Allocator alloc_{&memory_};
  std::unique_ptr<model::GPT> gpt_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  std::vector<optim::Segment> segments_;  // the whole buffer, decay per tensor
  std::vector<int32_t> inputs_, targets_;  // one micro-batch
  int64_t start_step_ = 0;
};

}  // namespace tally::train
