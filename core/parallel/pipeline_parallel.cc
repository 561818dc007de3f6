#include "core/parallel/pipeline_parallel.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/runtime/clock.h"
#include "core/runtime/comm/algorithms/partition.h"
#include "core/runtime/comm/ledger/names.h"
#include "core/runtime/status_macros.h"

namespace tally::parallel {

PipelineParallel::PipelineParallel(model::GPT* gpt, comm::Communicator* stages,
                                   const Options& options, Allocator& device)
    : gpt_(gpt),
      stages_(stages),
      gradients_(stages),
      options_(options),
      device_(device),
      boundary_sent_as_(options.boundary),
      stage_(stages->rank()),
      steps_(StageSteps(options.schedule, stages->size(), stages->rank(), options.micro_batches,
                        int(gpt->layout().model_chunks().size()))),
      model_chunks_(gpt->layout().model_chunks().size()) {
  // gpipe keeps every micro-batch in flight; 1f1b at most the stages from here on.
  for (size_t c = 0; c < model_chunks_.size(); ++c) {
    model_chunks_[c].slot_count = InFlight(steps_, int(c));
    model_chunks_[c].forward_sends.resize(size_t(model_chunks_[c].slot_count));
    model_chunks_[c].backward_sends.resize(size_t(model_chunks_[c].slot_count));
  }
}

absl::StatusOr<std::unique_ptr<PipelineParallel>> PipelineParallel::Create(
    model::GPT* gpt, comm::Communicator* stages, const Options& options, Allocator& device) {
  const int v = int(gpt->layout().model_chunks().size());
  if ((options.schedule == PipelineSchedule::kInterleaved) != (v > 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "[pipeline] the ", Name(options.schedule), " schedule cannot run a stage of ", v,
        " chunk(s) of layers (interleaved runs several, the others one)"));
  }
  if (options.schedule == PipelineSchedule::kInterleaved &&
      options.micro_batches % stages->size() != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "[pipeline] the interleaved schedule runs micro-batches in groups of the ", stages->size(),
        " stages: ", options.micro_batches, " is not a multiple"));
  }
  std::unique_ptr<PipelineParallel> p(new PipelineParallel(gpt, stages, options, device));
  if (v > 1) {  // the gradients' own communicator, also "pp"
    ASSIGN_OR_RETURN(p->own_gradients_, stages->Split(0, stages->rank(), stages->name()));
    p->gradients_ = p->own_gradients_.get();
  }
  p->from_previous_.group = stages;
  p->from_next_.group = p->gradients_;
  const int64_t activation = p->BoundaryElements(options.micro_batch_size);
  // The inboxes: one buffer both share (a step reads one of them at a time), or, with
  // early receives, a pair each.
  auto buffer = [&](DType type, int64_t count) {
    return Tensor::Empty({count}, type, device, MemoryCategory::kComm);
  };
  const bool wired = options.boundary != DType::kF32;
  if (!options.early_receive) {
    ASSIGN_OR_RETURN(Tensor shared, buffer(DType::kF32, activation));
    p->from_previous_.data[0] = p->from_next_.data[0] = shared;
    if (wired) {
      ASSIGN_OR_RETURN(Tensor shared_wire, buffer(options.boundary, activation));
      p->from_previous_.wire[0] = p->from_next_.wire[0] = shared_wire;
    }
  } else {
    // A stage receives activations unless it runs the first virtual stage only, and
    // gradients unless the last only.
    const bool from_previous = stages->rank() > 0 || v > 1;
    const bool from_next = !p->last_stage() || v > 1;
    for (Inbox* in : {from_previous ? &p->from_previous_ : nullptr,
                      from_next ? &p->from_next_ : nullptr}) {
      for (int i = 0; in != nullptr && i < 2; ++i) {
        ASSIGN_OR_RETURN(in->data[i], buffer(DType::kF32, activation));
        if (wired) {
          ASSIGN_OR_RETURN(in->wire[i], buffer(options.boundary, activation));
        }
      }
    }
  }
  for (ModelChunk& chunk : p->model_chunks_) {
    const int64_t slots = activation * chunk.slot_count;
    ASSIGN_OR_RETURN(chunk.d_inputs, buffer(DType::kF32, slots));
    if (options.recompute) {
      ASSIGN_OR_RETURN(chunk.outputs, buffer(DType::kF32, slots));
    }
    if (wired) {
      ASSIGN_OR_RETURN(chunk.wire_outputs, buffer(options.boundary, slots));
      ASSIGN_OR_RETURN(chunk.wire_d_inputs, buffer(options.boundary, slots));
    }
  }
  const size_t ids = size_t(options.micro_batch_size) * gpt->positions();
  p->tokens_.resize(ids);
  p->targets_.resize(ids);
  return p;
}

int64_t PipelineParallel::BoundaryElements(int b) const {
  // Under sequence parallelism a stage's output is its part of the sequence (and under
  // context parallelism the rank's positions of it).
  const model::GPTConfig& c = gpt_->config();
  return int64_t(gpt_->split().Rows(b * gpt_->positions())) * c.n_embd;
}

int PipelineParallel::VirtualStage(int chunk) const {
  return parallel::VirtualStage(chunk, stages_->size(), stage_);
}

int PipelineParallel::Neighbour(int step) const {
  const int stages = stages_->size();
  return (stage_ + step + stages) % stages;
}

bool PipelineParallel::LastVirtual(int chunk) const {
  return VirtualStage(chunk) == stages_->size() * int(model_chunks_.size()) - 1;
}

Tensor PipelineParallel::Part(const Tensor& t) const {
  const comm::Communicator* group = options_.scatter_gather;
  if (group == nullptr || !t.defined()) return t;
  const comm::Chunk chunk = comm::ChunkOf(t.numel(), group->size(), group->rank());
  return t.Flat(chunk.offset, chunk.offset + chunk.count);
}

absl::StatusOr<const float*> PipelineParallel::Take(Inbox& in, int peer) {
  if (in.posted != nullptr) {
    const absl::Status status = in.posted->Wait();
    in.posted.reset();
    RETURN_IF_ERROR(status);
    in.current ^= 1;
  } else {
    Tensor into = Part(in.wire[in.current].defined() ? in.wire[in.current] : in.data[in.current]);
    RETURN_IF_ERROR(in.group->Recv(into, peer));
  }
  const Tensor& data = in.data[in.current];
  const Tensor& wire = in.wire[in.current];
  if (options_.scatter_gather != nullptr) {  // every tp rank's chunk, in place
    Tensor whole = wire.defined() ? wire : data;
    RETURN_IF_ERROR(options_.scatter_gather->AllGather(Part(whole), whole));
  }
  if (wire.defined()) {
    RETURN_IF_ERROR(gpt_->kernels().Convert(data.raw_data(), DType::kF32, wire.raw_data(),
                                            wire.dtype(), data.numel()));
  }
  return data.data<float>();
}

void PipelineParallel::PostNext(Inbox& in, int peer) {
  const int other = in.current ^ 1;
  Tensor into = Part(in.wire[other].defined() ? in.wire[other] : in.data[other]);
  in.posted = in.group->Irecv(into, peer);
}

absl::StatusOr<std::unique_ptr<comm::Work>> PipelineParallel::StartSend(comm::Communicator& group,
                                                                      const Tensor& t,
                                                                      const Tensor& wire,
                                                                      int peer) {
  const Tensor part = Part(t);
  if (!wire.defined()) return group.Isend(part, peer);
  const Tensor wire_part = Part(wire);
  RETURN_IF_ERROR(gpt_->kernels().Convert(wire_part.raw_data(), wire_part.dtype(), part.raw_data(),
                                          DType::kF32, part.numel()));
  return group.Isend(wire_part, peer);
}

absl::Status PipelineParallel::EnsureSlots(int b) {
  if (b == slots_batch_) return absl::OkStatus();
  for (size_t c = 0; c < model_chunks_.size(); ++c) {
    ModelChunk& chunk = model_chunks_[c];
    chunk.slots.clear();
    for (int i = 0; i < chunk.slot_count; ++i) {
      const bool whole = !options_.recompute || i == 0;
      ASSIGN_OR_RETURN(model::GPT::Activations a, gpt_->NewActivations(b, whole, int(c)));
      if (options_.recompute && i == 0) {  // the whole set is also slot 0's own
        ASSIGN_OR_RETURN(a.input, Tensor::Empty({BoundaryElements(b)}, DType::kF32,
                                                device_, MemoryCategory::kActivations));
      }
      chunk.slots.push_back(std::move(a));
    }
  }
  slots_batch_ = b;
  return absl::OkStatus();
}

absl::StatusOr<float> PipelineParallel::ForwardSlot(int chunk, int slot, int b,
                                                    const int32_t* tokens, const float* input,
                                                    const int32_t* targets) {
  RETURN_IF_ERROR(EnsureSlots(b));
  std::vector<model::GPT::Activations>& slots = model_chunks_[size_t(chunk)].slots;
  model::GPT::Activations& ids = slots[size_t(slot)];
  RETURN_IF_ERROR(gpt_->LoadIds(ids, tokens, targets));
  if (options_.recompute && input != nullptr) {  // kept for the backward's forward
    RETURN_IF_ERROR(gpt_->kernels().Copy(ids.input.raw_data(), input, ids.input.nbytes()));
  }
  model::GPT::Activations& into = slots[options_.recompute ? 0 : size_t(slot)];
  return gpt_->ForwardStage(into, ids, input, /*loss=*/targets != nullptr);
}

const float* PipelineParallel::SlotOutput(int chunk, int slot) const {
  return gpt_->StageOutput(model_chunks_[size_t(chunk)].slots[options_.recompute ? 0 : size_t(slot)]);
}

absl::Status PipelineParallel::BackwardSlot(int chunk, int slot, float dloss,
                                            const float* d_output, float* d_input) {
  std::vector<model::GPT::Activations>& slots = model_chunks_[size_t(chunk)].slots;
  model::GPT::Activations& saved = slots[size_t(slot)];
  if (!options_.recompute) return gpt_->BackwardStage(saved, saved, dloss, d_output, d_input);
  // The forward again, from the slot's ids and input, into the chunk's whole set.
  RETURN_IF_ERROR(gpt_->ForwardStage(slots[0], saved,
                                     FirstVirtual(chunk) ? nullptr : saved.input.data<float>(),
                                     /*loss=*/LastVirtual(chunk))
                      .status());
  return gpt_->BackwardStage(slots[0], saved, dloss, d_output, d_input);
}

// Long, and kept whole: the stage's list of forwards and backwards with their sends and
// receives reads best as the one loop it is (as Megatron's schedules do).
absl::StatusOr<double> PipelineParallel::RunSchedule(const Fill& fill, float dloss,
                                                     const SpanRecorder& span) {
  const int b = options_.micro_batch_size, m = options_.micro_batches;
  const int previous = Neighbour(-1), next = Neighbour(+1);
  const int64_t activation = BoundaryElements(b);
  const int64_t start = MonotonicNanos();
  int64_t busy = 0;
  comm::TrafficLedger& ledger = stages_->ledger();
  // Slot `slot`'s part of a buffer of every slot's (empty stays empty).
  auto slot_of = [&](const Tensor& all, int slot) {
    return all.defined() ? all.Flat(slot * activation, (slot + 1) * activation) : Tensor();
  };
  auto wait = [](std::unique_ptr<comm::Work>& work) {
    absl::Status s = work != nullptr ? work->Wait() : absl::OkStatus();
    work.reset();
    return s;
  };
  // Whether step i receives its input (a forward) or its output's gradient (a backward).
  auto receives = [&](const PipelineStep& s) {
    return s.kind == PipelineStep::kForward ? !FirstVirtual(s.model_chunk) : !LastVirtual(s.model_chunk);
  };
  // The boundary a step receives over: from the virtual stage before it (a forward) or
  // after it (a backward).
  auto received_over = [&](const PipelineStep& s) {
    const int vs = VirtualStage(s.model_chunk);
    return s.kind == PipelineStep::kForward ? BoundaryScope(vs - 1, vs) : BoundaryScope(vs + 1, vs);
  };
  // Posts the receive of the next step of kind `kind` after the i-th that receives, if any,
  // under that step's boundary (outside any other label: labels nest).
  auto post_next = [&](size_t i, PipelineStep::Kind kind, Inbox& in, int peer) {
    for (size_t j = i + 1; j < steps_.size(); ++j) {
      if (steps_[j].kind != kind || !receives(steps_[j])) continue;
      comm::LabelScope label(ledger, received_over(steps_[j]));
      PostNext(in, peer);
      return;
    }
  };
  RETURN_IF_ERROR(gpt_->ZeroGrad());
  double loss_sum = 0;
  for (size_t i = 0; i < steps_.size(); ++i) {
    const PipelineStep& s = steps_[i];
    ModelChunk& chunk = model_chunks_[size_t(s.model_chunk)];
    const int slot = s.micro_batch % chunk.slot_count;
    const int vs = VirtualStage(s.model_chunk);
    const bool first = FirstVirtual(s.model_chunk), last = LastVirtual(s.model_chunk);
    fill(s.micro_batch, tokens_.data(), targets_.data());
    if (s.kind == PipelineStep::kForward) {
      comm::PhaseScope phase(ledger, comm::Phase::kForward);
      const float* input = nullptr;
      if (!first) {
        {
          comm::LabelScope label(ledger, received_over(s));
          ASSIGN_OR_RETURN(input, Take(from_previous_, previous));
        }
        if (options_.early_receive) post_next(i, PipelineStep::kForward, from_previous_, previous);
      }
      RETURN_IF_ERROR(wait(chunk.forward_sends[size_t(slot)]));  // the slot's last output has left
      const int64_t t0 = MonotonicNanos();
      ASSIGN_OR_RETURN(float loss, ForwardSlot(s.model_chunk, slot, b, first ? tokens_.data() : nullptr,
                                               input, last ? targets_.data() : nullptr));
      busy += MonotonicNanos() - t0;
      span("forward", s.micro_batch, t0);
      loss_sum += loss;
      if (!last) {
        comm::LabelScope label(ledger, BoundaryScope(vs, vs + 1));
        Tensor output = Tensor::Borrow(const_cast<float*>(SlotOutput(s.model_chunk, slot)), activation,
                                       device_.device());
        if (options_.recompute) {  // the whole set is rewritten by the next forward or backward
          Tensor copy = slot_of(chunk.outputs, slot);
          RETURN_IF_ERROR(gpt_->kernels().Copy(copy.raw_data(), output.raw_data(), output.nbytes()));
          output = copy;
        }
        ASSIGN_OR_RETURN(chunk.forward_sends[size_t(slot)],
                         StartSend(*stages_, output, slot_of(chunk.wire_outputs, slot), next));
      }
      continue;
    }
    comm::PhaseScope phase(ledger, comm::Phase::kBackward);
    const float* d_output = nullptr;
    if (!last) {
      {
        comm::LabelScope label(ledger, received_over(s));
        ASSIGN_OR_RETURN(d_output, Take(from_next_, next));
      }
      if (options_.early_receive) post_next(i, PipelineStep::kBackward, from_next_, next);
    }
    RETURN_IF_ERROR(wait(chunk.backward_sends[size_t(slot)]));
    Tensor d_input = slot_of(chunk.d_inputs, slot);
    const int64_t t0 = MonotonicNanos();
    RETURN_IF_ERROR(BackwardSlot(s.model_chunk, slot, dloss, d_output, first ? nullptr : d_input.data<float>()));
    busy += MonotonicNanos() - t0;
    span("backward", s.micro_batch, t0);
    if (!first) {
      comm::LabelScope label(ledger, BoundaryScope(vs, vs - 1));
      ASSIGN_OR_RETURN(chunk.backward_sends[size_t(slot)],
                       StartSend(*gradients_, d_input, slot_of(chunk.wire_d_inputs, slot), previous));
    }
  }
  for (ModelChunk& chunk : model_chunks_) {
    for (auto& work : chunk.forward_sends) RETURN_IF_ERROR(wait(work));
    for (auto& work : chunk.backward_sends) RETURN_IF_ERROR(wait(work));
  }
  // The schedule's time, which the bubble is a share of (the step adds the optimizer).
  busy_nanos_ += busy;
  step_nanos_ += MonotonicNanos() - start;
  return last_stage() ? loss_sum / m : 0.0;
}

absl::Status PipelineParallel::ReduceTiedEmbedding(comm::Communicator* embedding) {
  if (embedding == nullptr) return absl::OkStatus();
  comm::PhaseScope phase(embedding->ledger(), comm::Phase::kBackward);
  comm::LabelScope label(embedding->ledger(), comm::scope::kTiedEmbedding);
  ASSIGN_OR_RETURN(Tensor wte, gpt_->weights().TiedEmbeddingGrads());
  return embedding->AllReduce(wte, comm::ReduceOp::kSum);
}

absl::StatusOr<float> PipelineParallel::FromLastStage(float value) {
  ASSIGN_OR_RETURN(double all, stages_->AllReduceValue(last_stage() ? value : 0.0f, DType::kF32,
                                                       comm::ReduceOp::kSum));
  return float(all);
}

absl::StatusOr<float> PipelineParallel::Forward(const int32_t* tokens, const int32_t* targets, int b) {
  const int previous = Neighbour(-1), next = Neighbour(+1);
  const int64_t activation = BoundaryElements(b);
  ASSIGN_OR_RETURN(Tensor input, Tensor::Empty({activation}, DType::kF32, device_, MemoryCategory::kComm));
  float loss = 0;
  for (int c = 0; c < int(model_chunks_.size()); ++c) {  // round the ring of stages once a chunk
    const bool first = FirstVirtual(c), last = LastVirtual(c);
    if (!first) RETURN_IF_ERROR(boundary_sent_as_.Recv(*stages_, input, previous));
    ASSIGN_OR_RETURN(loss, ForwardSlot(c, 0, b, first ? tokens : nullptr,
                                       first ? nullptr : input.data<float>(),
                                       last ? targets : nullptr));
    if (!last) {
      Tensor out = Tensor::Borrow(const_cast<float*>(SlotOutput(c, 0)), activation, device_.device());
      RETURN_IF_ERROR(boundary_sent_as_.Send(*stages_, out, next));
    }
  }
  return FromLastStage(loss);
}

}  // namespace tally::parallel
