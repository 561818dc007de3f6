// The pipeline-parallel parts of the training loop (trainer.h): a stage's set-up, one
// step of its schedule, and a forward through every stage.
#include <algorithm>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "runtime/clock.h"
#include "runtime/status_macros.h"
#include "train/trainer.h"

namespace tally::train {

absl::Status Trainer::SetUpPipeline() {
  const TrainOptions& o = options_;
  stage_ = pp_->rank();
  schedule_ = o.schedule;
  // gpipe keeps every micro-batch in flight; 1f1b at most the stages from here on.
  const int m = o.accumulation_steps();
  slots_ = schedule_ == parallel::PipelineSchedule::kGPipe ? m : std::min(m, o.pp - stage_);
  gpt_->SetPipelineSlots(slots_, o.recompute);
  const int64_t activation = BoundaryElements(o.micro_batch_size);
  // The boundary's activations and gradients, on the model's device.
  Allocator& on = model_alloc_;
  ASSIGN_OR_RETURN(received_, Tensor::Empty({activation}, DType::kF32, on, MemoryCategory::kComm));
  ASSIGN_OR_RETURN(d_inputs_,
                   Tensor::Empty({activation * slots_}, DType::kF32, on, MemoryCategory::kComm));
  if (o.recompute) {
    ASSIGN_OR_RETURN(outputs_,
                     Tensor::Empty({activation * slots_}, DType::kF32, on, MemoryCategory::kComm));
  }
  return absl::OkStatus();
}

int64_t Trainer::BoundaryElements(int b) const {
  // Under sequence parallelism a stage's output is its part of the sequence.
  return int64_t(sharding_.Rows(b * options_.model.seq_len)) * options_.model.n_embd;
}

// One step of the pipeline: this stage's list of forwards and backwards
// (pipeline_schedule.h), activations to the next stage and gradients to the previous one
// sent without waiting; a buffer is reused only once its last send is done.
absl::StatusOr<StepStats> Trainer::PipelineStep(int64_t step) {
  const TrainOptions& o = options_;
  const int b = o.micro_batch_size, m = o.accumulation_steps(), last = o.pp - 1;
  const int64_t tokens = int64_t(o.global_batch_size) * o.model.seq_len;
  const int64_t activation = BoundaryElements(b);
  const int64_t first = FirstSequence(step);
  const int64_t start = MonotonicNanos();
  int64_t busy = 0;
  comm::TrafficLedger& ledger = traffic();
  std::vector<std::unique_ptr<comm::Work>> forward_sends(slots_), backward_sends(slots_);
  auto wait = [](std::unique_ptr<comm::Work>& work) {
    absl::Status s = work != nullptr ? work->Wait() : absl::OkStatus();
    work.reset();
    return s;
  };
  RETURN_IF_ERROR(gpt_->ZeroGrad());
  double loss_sum = 0;
  for (const parallel::PipelineStep& s : parallel::StageSteps(schedule_, o.pp, stage_, m)) {
    const int slot = s.micro_batch % slots_;
    data_.train.Fill(first + int64_t(s.micro_batch) * b, b, inputs_.data(), targets_.data());
    if (s.kind == parallel::PipelineStep::kForward) {
      comm::PhaseScope phase(ledger, comm::Phase::kForward);
      if (stage_ > 0) {
        comm::LabelScope label(ledger, parallel::BoundaryScope(stage_ - 1, stage_));
        RETURN_IF_ERROR(pp_->Recv(received_, stage_ - 1));
      }
      RETURN_IF_ERROR(wait(forward_sends[slot]));  // the slot's last output has left
      int64_t t0 = MonotonicNanos();
      ASSIGN_OR_RETURN(float loss, gpt_->ForwardStage(slot, stage_ == 0 ? inputs_.data() : nullptr,
                                                      stage_ > 0 ? received_.data<float>() : nullptr,
                                                      stage_ == last ? targets_.data() : nullptr, b));
      busy += MonotonicNanos() - t0;
      RecordSpan("forward", s.micro_batch, t0);
      loss_sum += loss;
      if (stage_ < last) {
        comm::LabelScope label(ledger, parallel::BoundaryScope(stage_, stage_ + 1));
        Tensor output = Tensor::Borrow(const_cast<float*>(gpt_->StageOutput(slot)), activation,
                                       model_alloc_.device());
        if (o.recompute) {  // the recompute buffer is rewritten by the next forward or backward
          Tensor copy = outputs_.Flat(slot * activation, (slot + 1) * activation);
          RETURN_IF_ERROR(gpt_->kernels().Copy(copy.raw_data(), output.raw_data(), output.nbytes()));
          output = copy;
        }
        forward_sends[slot] = pp_->Isend(output, stage_ + 1);
      }
      continue;
    }
    comm::PhaseScope phase(ledger, comm::Phase::kBackward);
    if (stage_ < last) {
      comm::LabelScope label(ledger, parallel::BoundaryScope(stage_ + 1, stage_));
      RETURN_IF_ERROR(pp_->Recv(received_, stage_ + 1));
    }
    RETURN_IF_ERROR(wait(backward_sends[slot]));
    Tensor d_input = d_inputs_.Flat(slot * activation, (slot + 1) * activation);
    int64_t t0 = MonotonicNanos();
    RETURN_IF_ERROR(gpt_->BackwardStage(slot, 1.0f / float(tokens),
                                        stage_ < last ? received_.data<float>() : nullptr,
                                        stage_ > 0 ? d_input.data<float>() : nullptr));
    busy += MonotonicNanos() - t0;
    RecordSpan("backward", s.micro_batch, t0);
    if (stage_ > 0) {
      comm::LabelScope label(ledger, parallel::BoundaryScope(stage_, stage_ - 1));
      backward_sends[slot] = pp_->Isend(d_input, stage_ - 1);
    }
  }
  for (auto& work : forward_sends) RETURN_IF_ERROR(wait(work));
  for (auto& work : backward_sends) RETURN_IF_ERROR(wait(work));
  // The schedule's time, which the bubble is a share of (the step adds the optimizer).
  busy_nanos_ += busy;
  step_nanos_ += MonotonicNanos() - start;
  // The tied embedding: the first stage's lookup and the last stage's head each add to
  // their own copy of wte; the sum goes to both (under ZeRO-2/3, of the already reduced
  // chunks only: WeightStore::TiedEmbeddingGrads).
  comm::PhaseScope backward(ledger, comm::Phase::kBackward);
  if (embedding_group_ != nullptr) {
    comm::LabelScope label(ledger, "tied_embedding");
    ASSIGN_OR_RETURN(Tensor wte, gpt_->weights().TiedEmbeddingGrads());
    RETURN_IF_ERROR(embedding_group_->AllReduce(wte, comm::ReduceOp::kSum));
  }
  if (sync_ != nullptr) {  // data parallelism: every bucket, now that the schedule is over
    sync_->BeginStep();
    RETURN_IF_ERROR(sync_->Finish(gpt_->grads()));
  }
  double loss = 0;
  {  // the last stage's loss to every stage
    comm::PhaseScope phase(ledger, comm::Phase::kOther);
    comm::LabelScope label(ledger, "loss");
    const float mine = stage_ == last ? float(loss_sum / m) : 0.0f;
    ASSIGN_OR_RETURN(loss, pp_->AllReduceValue(mine, DType::kF32, comm::ReduceOp::kSum));
  }
  return Update(step, float(loss), start);
}

absl::StatusOr<float> Trainer::PipelineForward(const int32_t* tokens, const int32_t* targets, int b) {
  const int last = options_.pp - 1;
  const int64_t activation = BoundaryElements(b);
  ASSIGN_OR_RETURN(Tensor input,
                   Tensor::Empty({activation}, DType::kF32, model_alloc_, MemoryCategory::kComm));
  if (stage_ > 0) RETURN_IF_ERROR(pp_->Recv(input, stage_ - 1));
  ASSIGN_OR_RETURN(float loss, gpt_->ForwardStage(0, tokens, stage_ > 0 ? input.data<float>() : nullptr,
                                                  stage_ == last ? targets : nullptr, b));
  if (stage_ < last) {
    Tensor out = Tensor::Borrow(const_cast<float*>(gpt_->StageOutput(0)), activation,
                                model_alloc_.device());
    RETURN_IF_ERROR(pp_->Send(out, stage_ + 1));
  }
  // The last stage's loss to every stage.
  ASSIGN_OR_RETURN(double all, pp_->AllReduceValue(stage_ == last ? loss : 0.0f, DType::kF32,
                                                   comm::ReduceOp::kSum));
  return float(all);
}

}  // namespace tally::train
