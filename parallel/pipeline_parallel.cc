#include "parallel/pipeline_parallel.h"

#include <algorithm>
#include <utility>

#include "runtime/clock.h"
#include "runtime/status_macros.h"

namespace tally::parallel {

PipelineParallel::PipelineParallel(model::GPT* gpt, comm::Communicator* stages,
                                   const Options& options, Allocator& device)
    : gpt_(gpt),
      stages_(stages),
      options_(options),
      device_(device),
      boundary_sent_as_(options.boundary),
      stage_(stages->rank()),
      // gpipe keeps every micro-batch in flight; 1f1b at most the stages from here on.
      slot_count_(options.schedule == PipelineSchedule::kGPipe
                      ? options.micro_batches
                      : std::min(options.micro_batches, stages->size() - stages->rank())) {}

absl::StatusOr<std::unique_ptr<PipelineParallel>> PipelineParallel::Create(
    model::GPT* gpt, comm::Communicator* stages, const Options& options, Allocator& device) {
  std::unique_ptr<PipelineParallel> p(new PipelineParallel(gpt, stages, options, device));
  const int64_t activation = p->BoundaryElements(options.micro_batch_size);
  const int slots = p->slot_count_;
  // The inboxes: one buffer both share (a step reads one of them at a time), or, with
  // early receives, a pair each.
  auto buffer = [&](DType type) {
    return Tensor::Empty({activation}, type, device, MemoryCategory::kComm);
  };
  const bool wired = options.boundary != DType::kF32;
  if (!options.early_receive) {
    ASSIGN_OR_RETURN(Tensor shared, buffer(DType::kF32));
    p->from_previous_.data[0] = p->from_next_.data[0] = shared;
    if (wired) {
      ASSIGN_OR_RETURN(Tensor shared_wire, buffer(options.boundary));
      p->from_previous_.wire[0] = p->from_next_.wire[0] = shared_wire;
    }
  } else {
    const int last = stages->size() - 1, stage = stages->rank();
    for (Inbox* in : {stage > 0 ? &p->from_previous_ : nullptr,
                      stage < last ? &p->from_next_ : nullptr}) {
      for (int i = 0; in != nullptr && i < 2; ++i) {
        ASSIGN_OR_RETURN(in->data[i], buffer(DType::kF32));
        if (wired) {
          ASSIGN_OR_RETURN(in->wire[i], buffer(options.boundary));
        }
      }
    }
  }
  ASSIGN_OR_RETURN(p->d_inputs_,
                   Tensor::Empty({activation * slots}, DType::kF32, device, MemoryCategory::kComm));
  if (options.recompute) {
    ASSIGN_OR_RETURN(p->outputs_, Tensor::Empty({activation * slots}, DType::kF32, device,
                                                MemoryCategory::kComm));
  }
  if (options.boundary != DType::kF32) {
    auto wire = [&](int64_t n) {
      return Tensor::Empty({n}, options.boundary, device, MemoryCategory::kComm);
    };
    ASSIGN_OR_RETURN(p->wire_outputs_, wire(activation * slots));
    ASSIGN_OR_RETURN(p->wire_d_inputs_, wire(activation * slots));
  }
  const size_t ids = size_t(options.micro_batch_size) * gpt->config().seq_len;
  p->tokens_.resize(ids);
  p->targets_.resize(ids);
  return p;
}

int64_t PipelineParallel::BoundaryElements(int b) const {
  // Under sequence parallelism a stage's output is its part of the sequence.
  const model::GPTConfig& c = gpt_->config();
  return int64_t(gpt_->split().Rows(b * c.seq_len)) * c.n_embd;
}

absl::StatusOr<const float*> PipelineParallel::Take(Inbox& in, int peer) {
  if (in.posted != nullptr) {
    const absl::Status status = in.posted->Wait();
    in.posted.reset();
    RETURN_IF_ERROR(status);
    in.current ^= 1;
  } else {
    Tensor into = in.wire[in.current].defined() ? in.wire[in.current] : in.data[in.current];
    RETURN_IF_ERROR(stages_->Recv(into, peer));
  }
  const Tensor& data = in.data[in.current];
  const Tensor& wire = in.wire[in.current];
  if (wire.defined()) {
    RETURN_IF_ERROR(gpt_->kernels().Convert(data.raw_data(), DType::kF32, wire.raw_data(),
                                            wire.dtype(), data.numel()));
  }
  return data.data<float>();
}

void PipelineParallel::PostNext(Inbox& in, int peer) {
  const int other = in.current ^ 1;
  Tensor into = in.wire[other].defined() ? in.wire[other] : in.data[other];
  in.posted = stages_->Irecv(into, peer);
}

absl::StatusOr<std::unique_ptr<comm::Work>> PipelineParallel::StartSend(const Tensor& t,
                                                                      const Tensor& wire,
                                                                      int peer) {
  if (!wire.defined()) return stages_->Isend(t, peer);
  RETURN_IF_ERROR(
      gpt_->kernels().Convert(wire.raw_data(), wire.dtype(), t.raw_data(), DType::kF32, t.numel()));
  return stages_->Isend(wire, peer);
}

absl::Status PipelineParallel::EnsureSlots(int b) {
  if (b == slots_batch_) return absl::OkStatus();
  slots_.clear();
  for (int i = 0; i < slot_count_; ++i) {
    const bool whole = !options_.recompute || i == 0;
    ASSIGN_OR_RETURN(model::GPT::Activations a, gpt_->NewActivations(b, whole));
    if (options_.recompute && i == 0) {  // the whole set is also slot 0's own
      ASSIGN_OR_RETURN(a.input, Tensor::Empty({BoundaryElements(b)}, DType::kF32,
                                              device_, MemoryCategory::kActivations));
    }
    slots_.push_back(std::move(a));
  }
  slots_batch_ = b;
  return absl::OkStatus();
}

absl::StatusOr<float> PipelineParallel::ForwardSlot(int slot, int b, const int32_t* tokens,
                                                    const float* input, const int32_t* targets) {
  RETURN_IF_ERROR(EnsureSlots(b));
  model::GPT::Activations& ids = slots_[slot];
  RETURN_IF_ERROR(gpt_->LoadIds(ids, tokens, targets));
  if (options_.recompute && input != nullptr) {  // kept for the backward's forward
    RETURN_IF_ERROR(gpt_->kernels().Copy(ids.input.raw_data(), input, ids.input.nbytes()));
  }
  model::GPT::Activations& into = slots_[options_.recompute ? 0 : slot];
  return gpt_->ForwardStage(into, ids, input, /*loss=*/targets != nullptr);
}

const float* PipelineParallel::SlotOutput(int slot) const {
  return gpt_->StageOutput(slots_[options_.recompute ? 0 : slot]);
}

absl::Status PipelineParallel::BackwardSlot(int slot, float dloss, const float* d_output,
                                            float* d_input) {
  model::GPT::Activations& saved = slots_[slot];
  if (!options_.recompute) return gpt_->BackwardStage(saved, saved, dloss, d_output, d_input);
  // The forward again, from the slot's ids and input, into the whole set.
  const bool first = stage_ == 0;
  RETURN_IF_ERROR(gpt_->ForwardStage(slots_[0], saved, first ? nullptr : saved.input.data<float>(),
                                     /*loss=*/last_stage())
                      .status());
  return gpt_->BackwardStage(slots_[0], saved, dloss, d_output, d_input);
}

// Long, and kept whole: the stage's list of forwards and backwards with their sends and
// receives reads best as the one loop it is (as Megatron's schedules do).
absl::StatusOr<double> PipelineParallel::RunSchedule(const Fill& fill, float dloss,
                                                     const Span& span) {
  const int b = options_.micro_batch_size, m = options_.micro_batches;
  const int stages = stages_->size(), last = stages - 1;
  const int64_t activation = BoundaryElements(b);
  const int64_t start = MonotonicNanos();
  int64_t busy = 0;
  comm::TrafficLedger& ledger = stages_->ledger();
  std::vector<std::unique_ptr<comm::Work>> forward_sends(slot_count_), backward_sends(slot_count_);
  // Slot `slot`'s part of a buffer of every slot's (empty stays empty).
  auto slot_of = [&](const Tensor& all, int slot) {
    return all.defined() ? all.Flat(slot * activation, (slot + 1) * activation) : Tensor();
  };
  auto wait = [](std::unique_ptr<comm::Work>& work) {
    absl::Status s = work != nullptr ? work->Wait() : absl::OkStatus();
    work.reset();
    return s;
  };
  RETURN_IF_ERROR(gpt_->ZeroGrad());
  double loss_sum = 0;
  const std::vector<PipelineStep> steps = StageSteps(options_.schedule, stages, stage_, m);
  // Whether a step after the i-th is of `kind` (its receive may be posted now).
  auto another = [&](size_t i, PipelineStep::Kind kind) {
    for (size_t j = i + 1; j < steps.size(); ++j) {
      if (steps[j].kind == kind) return true;
    }
    return false;
  };
  for (size_t i = 0; i < steps.size(); ++i) {
    const PipelineStep& s = steps[i];
    const int slot = s.micro_batch % slot_count_;
    fill(s.micro_batch, tokens_.data(), targets_.data());
    if (s.kind == PipelineStep::kForward) {
      comm::PhaseScope phase(ledger, comm::Phase::kForward);
      const float* input = nullptr;
      if (stage_ > 0) {
        comm::LabelScope label(ledger, BoundaryScope(stage_ - 1, stage_));
        ASSIGN_OR_RETURN(input, Take(from_previous_, stage_ - 1));
        if (options_.early_receive && another(i, PipelineStep::kForward)) {
          PostNext(from_previous_, stage_ - 1);
        }
      }
      RETURN_IF_ERROR(wait(forward_sends[slot]));  // the slot's last output has left
      const int64_t t0 = MonotonicNanos();
      ASSIGN_OR_RETURN(float loss, ForwardSlot(slot, b, stage_ == 0 ? tokens_.data() : nullptr,
                                               input, stage_ == last ? targets_.data() : nullptr));
      busy += MonotonicNanos() - t0;
      span("forward", s.micro_batch, t0);
      loss_sum += loss;
      if (stage_ < last) {
        comm::LabelScope label(ledger, BoundaryScope(stage_, stage_ + 1));
        Tensor output = Tensor::Borrow(const_cast<float*>(SlotOutput(slot)), activation,
                                       device_.device());
        if (options_.recompute) {  // the whole set is rewritten by the next forward or backward
          Tensor copy = outputs_.Flat(slot * activation, (slot + 1) * activation);
          RETURN_IF_ERROR(gpt_->kernels().Copy(copy.raw_data(), output.raw_data(), output.nbytes()));
          output = copy;
        }
        ASSIGN_OR_RETURN(forward_sends[slot], StartSend(output, slot_of(wire_outputs_, slot), stage_ + 1));
      }
      continue;
    }
    comm::PhaseScope phase(ledger, comm::Phase::kBackward);
    const float* d_output = nullptr;
    if (stage_ < last) {
      comm::LabelScope label(ledger, BoundaryScope(stage_ + 1, stage_));
      ASSIGN_OR_RETURN(d_output, Take(from_next_, stage_ + 1));
      if (options_.early_receive && another(i, PipelineStep::kBackward)) {
        PostNext(from_next_, stage_ + 1);
      }
    }
    RETURN_IF_ERROR(wait(backward_sends[slot]));
    Tensor d_input = d_inputs_.Flat(slot * activation, (slot + 1) * activation);
    const int64_t t0 = MonotonicNanos();
    RETURN_IF_ERROR(BackwardSlot(slot, dloss, d_output, stage_ > 0 ? d_input.data<float>() : nullptr));
    busy += MonotonicNanos() - t0;
    span("backward", s.micro_batch, t0);
    if (stage_ > 0) {
      comm::LabelScope label(ledger, BoundaryScope(stage_, stage_ - 1));
      ASSIGN_OR_RETURN(backward_sends[slot],
                       StartSend(d_input, slot_of(wire_d_inputs_, slot), stage_ - 1));
    }
  }
  for (auto& work : forward_sends) RETURN_IF_ERROR(wait(work));
  for (auto& work : backward_sends) RETURN_IF_ERROR(wait(work));
  // The schedule's time, which the bubble is a share of (the step adds the optimizer).
  busy_nanos_ += busy;
  step_nanos_ += MonotonicNanos() - start;
  return stage_ == last ? loss_sum / m : 0.0;
}

absl::Status PipelineParallel::ReduceTiedEmbedding(comm::Communicator* embedding) {
  if (embedding == nullptr) return absl::OkStatus();
  comm::PhaseScope phase(embedding->ledger(), comm::Phase::kBackward);
  comm::LabelScope label(embedding->ledger(), "tied_embedding");
  ASSIGN_OR_RETURN(Tensor wte, gpt_->weights().TiedEmbeddingGrads());
  return embedding->AllReduce(wte, comm::ReduceOp::kSum);
}

absl::StatusOr<float> PipelineParallel::FromLastStage(float value) {
  ASSIGN_OR_RETURN(double all, stages_->AllReduceValue(last_stage() ? value : 0.0f, DType::kF32,
                                                       comm::ReduceOp::kSum));
  return float(all);
}

absl::StatusOr<float> PipelineParallel::Forward(const int32_t* tokens, const int32_t* targets, int b) {
  const int last = stages_->size() - 1;
  const int64_t activation = BoundaryElements(b);
  ASSIGN_OR_RETURN(Tensor input, Tensor::Empty({activation}, DType::kF32, device_, MemoryCategory::kComm));
  if (stage_ > 0) RETURN_IF_ERROR(boundary_sent_as_.Recv(*stages_, input, stage_ - 1));
  ASSIGN_OR_RETURN(float loss, ForwardSlot(0, b, stage_ == 0 ? tokens : nullptr,
                                           stage_ > 0 ? input.data<float>() : nullptr,
                                           stage_ == last ? targets : nullptr));
  if (stage_ < last) {
    Tensor out = Tensor::Borrow(const_cast<float*>(SlotOutput(0)), activation, device_.device());
    RETURN_IF_ERROR(boundary_sent_as_.Send(*stages_, out, stage_ + 1));
  }
  return FromLastStage(loss);
}

}  // namespace tally::parallel
