// A training step of a pipeline stage (trainer.h): the stage's schedule runs in
// core/parallel/pipeline_parallel.h; around it, the tied embedding's sum, data parallelism's
// buckets, and the last stage's loss to every stage.
#include <algorithm>

#include "core/runtime/clock.h"
#include "core/runtime/comm/ledger/names.h"
#include "core/runtime/status_macros.h"
#include "core/train/trainer.h"

namespace tally::train {

absl::Status Trainer::SetUpPipeline() {
  const TrainOptions& o = options_;
  parallel::PipelineParallel::Options pipeline;
  pipeline.schedule = o.parallel.schedule;
  pipeline.micro_batches = o.accumulation_steps();
  pipeline.micro_batch_size = o.training.micro_batch_size;
  pipeline.recompute = o.parallel.StageRecompute();
  pipeline.boundary = o.Precision().activations;
  pipeline.early_receive = o.parallel.overlap;
  if (o.parallel.ScatterGather()) pipeline.scatter_gather = groups_.tp.get();
  ASSIGN_OR_RETURN(pipeline_, parallel::PipelineParallel::Create(gpt_.get(), groups_.pp.get(),
                                                                 pipeline, model_alloc_));
  return absl::OkStatus();
}

absl::StatusOr<StepStats> Trainer::PipelinedTrainStep(int64_t step) {
  const TrainOptions& o = options_;
  const int b = o.training.micro_batch_size;
  const int64_t tokens = int64_t(o.training.global_batch_size) * o.model.seq_len;
  const int64_t first = FirstSequence(step);
  const int64_t start = MonotonicNanos();
  SlowDown();
  auto fill = [&](int micro_batch, int32_t* inputs, int32_t* targets) {
    if (sequence_ == nullptr) {
      data_.train.Fill(first + int64_t(micro_batch) * b, b, inputs, targets);
      return;
    }
    const auto [tokens_here, targets_here] = FillMicroBatch(first, micro_batch, b);
    const size_t ids = size_t(b) * gpt_->positions();
    std::copy_n(tokens_here, ids, inputs);
    std::copy_n(targets_here, ids, targets);
  };
  auto span = [&](const char* what, int micro_batch, int64_t t0) {
    RecordSpan(what, micro_batch, t0);
  };
  ASSIGN_OR_RETURN(double loss, pipeline_->RunSchedule(fill, 1.0f / float(tokens), span));
  RETURN_IF_ERROR(pipeline_->ReduceTiedEmbedding(groups_.embedding.get()));
  {  // data parallelism: every bucket, now that the schedule is over
    comm::PhaseScope backward(traffic(), comm::Phase::kBackward);
    RETURN_IF_ERROR(weights_->EndBackward());
  }
  float mean = 0;
  {
    comm::PhaseScope phase(traffic(), comm::Phase::kOther);
    comm::LabelScope label(traffic(), comm::scope::kLoss);
    ASSIGN_OR_RETURN(mean, pipeline_->FromLastStage(float(loss)));
  }
  return Update(step, mean, start);
}

}  // namespace tally::train
