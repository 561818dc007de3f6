// Pipeline parallelism: a stage's executor (GPipe, Huang et al. 2019; 1F1B, PipeDream-
// Flush / Megatron, and its interleaved form, Narayanan et al. 2021), as Megatron's
// schedules.py runs them.
//
// The layers are split into N stages (pipeline_schedule.h's StageLayers), one per rank
// of the pp group; under the interleaved schedule into v·N chunks, rank s holding chunks
// s, N+s, ... (StageModelChunks), so that activations go round the ring of ranks v times. A
// step of m micro-batches runs this stage's list of forwards and backwards (StageSteps:
// gpipe, every forward then every backward; 1f1b, warm-up forwards, then one forward one
// backward, then cool-down backwards; interleaved, the same over the chunks). Activations
// go to the next (virtual) stage and their gradients back, sent without waiting; a
// buffer is reused only once its last send is done. Under the interleaved schedule the
// gradients travel on a communicator of their own (a duplicate of the pp group, also
// named "pp"): with N = 2 both directions join the same two ranks, and each
// communicator's messages between two ranks are matched in order.
//
//   bytes    each boundary carries every micro-batch's (b·s, h) activations forward and
//            their gradients back: b·s·h·4 each way per step for the replica's share of
//            the batch, whatever m is (PipelineCalls; 1/tp of it per rank under
//            sequence parallelism, or with scatter_gather, each tp rank its chunk, which
//            the receiving tp group all-gathers); v·N−1 boundaries instead of N−1 when
//            interleaved
//   bubble   with a backward as long as a forward, each stage idles (N−1)/(m+N−1) of
//            the schedule, (N−1)/(v·m+N−1) interleaved (TheoreticalBubble)
//   memory   a micro-batch's activations live from its forward to its backward: gpipe
//            keeps all m in flight, 1f1b at most N − stage (the slots), interleaved each
//            chunk's most in flight (InFlight); with recompute a slot keeps only its ids
//            and input, and the backward runs the forward again into one whole set of its
//            chunk first (GPipe's re-materialisation)
//
//   ASSIGN_OR_RETURN(auto pipeline, PipelineParallel::Create(gpt, pp_group, options, alloc));
//   ASSIGN_OR_RETURN(double loss, pipeline->RunSchedule(fill, 1.0f / tokens, span));
//   RETURN_IF_ERROR(pipeline->ReduceTiedEmbedding(embedding_group));
//   ASSIGN_OR_RETURN(float mean, pipeline->FromLastStage(float(loss)));  // every stage
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "core/model/gpt.h"
#include "core/parallel/pipeline_schedule.h"
#include "core/parallel/sent_as.h"
#include "core/runtime/comm/communicator.h"

namespace tally::parallel {

class PipelineParallel {
 public:
  struct Options {
    PipelineSchedule schedule = PipelineSchedule::k1F1B;
    int micro_batches = 1;     // m, per step (interleaved: a multiple of N)
    int micro_batch_size = 1;  // b
    bool recompute = false;
    // The type the boundary activations and their gradients travel as (bf16 under
    // mixed precision: each is rounded into a bf16 buffer of its slot before it is sent,
    // and widened on arrival).
    DType boundary = DType::kF32;
    // Post the next micro-batch's receive from each neighbour before this step computes
    // (--overlap): it lands in the other buffer of a pair while the step runs.
    bool early_receive = false;
    // Megatron's scatter/gather (its tp group, or null): a boundary tensor leaves a stage
    // as each tp rank's chunk of it (partition.h's ChunkOf), and the receiving stage's tp
    // group all-gathers the chunks in place before the tensor is used. The same values
    // arrive; a rank sends 1/tp of the bytes, and the group all-gathers (tp−1)/tp of
    // them, under the boundary's scope. The schedule's transfers only (Forward, for
    // evaluation and sampling, moves whole boundaries).
    comm::Communicator* scatter_gather = nullptr;
  };
  // `gpt`: this stage's model (with v chunks of layers under the interleaved schedule, one
  // otherwise); `stages`: the pp group, whose rank r is stage r. Both must outlive the
  // executor. `device`: the model's allocator, which the slots' activations and the
  // boundary buffers (charged as comm memory) come from.
  static absl::StatusOr<std::unique_ptr<PipelineParallel>> Create(model::GPT* gpt,
                                                                  comm::Communicator* stages,
                                                                  const Options& options,
                                                                  Allocator& device);

  int stage() const { return stage_; }
  // Whether this stage holds the model's last layer (and the loss).
  bool last_stage() const { return stage_ == stages_->size() - 1; }
  // Micro-batches in flight at once on chunk `chunk` of this stage: gpipe m; 1f1b
  // min(m, N − stage); interleaved as its steps say.
  int slots(int chunk = 0) const { return model_chunks_[size_t(chunk)].slot_count; }

  // Micro-batch j of the step, on the host: tokens and targets, (b, T) each.
  using Fill = std::function<void(int micro_batch, int32_t* tokens, int32_t* targets)>;
  // Called after each forward and backward of a micro-batch, with its start (trace spans).
  using SpanRecorder = std::function<void(const char* what, int micro_batch, int64_t start_nanos)>;
  // One step's schedule, from zeroed gradients: every forward and backward of this stage
  // with its transfers, each position's loss weighted by `dloss`. Returns the mean loss of
  // the micro-batches on the last stage (0 elsewhere).
  absl::StatusOr<double> RunSchedule(const Fill& fill, float dloss, const SpanRecorder& span);
  // The tied embedding: the first stage's lookup and the last stage's head each add to
  // their own copy of wte; the sum goes to both over `embedding` (Megatron's embedding
  // group; null on the other stages), phase backward, scope tied_embedding.
  absl::Status ReduceTiedEmbedding(comm::Communicator* embedding);
  // The last stage's `value` on every stage (the loss).
  absl::StatusOr<float> FromLastStage(float value);
  // A forward of b sequences through every stage and no backward (evaluation, sampling):
  // the loss on every stage when the last stage has targets, else 0; the logits stay on
  // the last stage (GPT::LogitsRowToHost).
  absl::StatusOr<float> Forward(const int32_t* tokens, const int32_t* targets, int b);

  // Over the run: nanoseconds this stage computed, and its schedules took.
  int64_t busy_nanos() const { return busy_nanos_; }
  int64_t step_nanos() const { return step_nanos_; }

 private:
  PipelineParallel(model::GPT* gpt, comm::Communicator* stages, const Options& options,
                   Allocator& device);
  // Floats of b sequences' activations at a boundary (this rank's rows of them).
  int64_t BoundaryElements(int b) const;
  // Chunk `chunk` of this stage as a virtual stage, and whether it is the pipeline's
  // first or last one (no input from a stage before it; the loss).
  int VirtualStage(int chunk) const;
  bool FirstVirtual(int chunk) const { return VirtualStage(chunk) == 0; }
  bool LastVirtual(int chunk) const;
  // The stage `step` (±1) away on the ring of stages (under the interleaved schedule the
  // last stage passes its chunks' outputs on to the first).
  int Neighbour(int step) const;
  // The slots' activations for micro-batches of b sequences.
  absl::Status EnsureSlots(int b);
  // The forward of `slot`'s micro-batch of b sequences on `chunk` (ids on the host; input
  // from the previous virtual stage, null on the first); SlotOutput is its output for the
  // next.
  absl::StatusOr<float> ForwardSlot(int chunk, int slot, int b, const int32_t* tokens,
                                    const float* input, const int32_t* targets);
  const float* SlotOutput(int chunk, int slot) const;
  // What arrives from one neighbour over `group`: the buffer a step reads (and, when the
  // boundary travels as another type, the one it arrives in), a pair of each under
  // early_receive, with the next receive posted into the buffer the step does not read.
  struct Inbox {
    comm::Communicator* group = nullptr;
    Tensor data[2], wire[2];
    int current = 0;
    std::unique_ptr<comm::Work> posted;
  };
  // The boundary tensor from `peer`: the receive posted earlier, or one now; widened
  // from the boundary type. Returns the buffer the step reads.
  absl::StatusOr<const float*> Take(Inbox& in, int peer);
  // Posts the next receive from `peer` into the other buffer.
  void PostNext(Inbox& in, int peer);
  // This tp rank's chunk of a boundary tensor under scatter_gather; all of `t` without.
  Tensor Part(const Tensor& t) const;
  // Starts sending `t` (its Part) to `peer` over `group`: itself, or its copy in `wire`
  // (the slot's buffer of the boundary type).
  absl::StatusOr<std::unique_ptr<comm::Work>> StartSend(comm::Communicator& group, const Tensor& t,
                                                        const Tensor& wire, int peer);
  absl::Status BackwardSlot(int chunk, int slot, float dloss, const float* d_output,
                            float* d_input);

  model::GPT* gpt_;
  comm::Communicator* stages_;
  // The gradients' communicator: stages_, or its duplicate under the interleaved schedule.
  std::unique_ptr<comm::Communicator> own_gradients_;
  comm::Communicator* gradients_;
  const Options options_;
  Allocator& device_;
  const SentAs boundary_sent_as_;  // Forward's boundaries, in the boundary type
  const int stage_;
  // This stage's forwards and backwards of a step.
  const std::vector<PipelineStep> steps_;
  // The buffers of one chunk of the stage's layers.
  struct ModelChunk {
    int slot_count = 0;
    // Each slot's activations (recompute: slots[0] is the one whole set every backward
    // recomputes into; the others keep ids and input only), for batch slots_batch_.
    std::vector<model::GPT::Activations> slots;
    Tensor d_inputs;  // each slot's d_input
    Tensor outputs;   // recompute: each slot's output, while it is sent
    // Under a boundary type other than fp32: each slot's outputs and input gradients
    // while they are sent, in that type.
    Tensor wire_outputs, wire_d_inputs;
    // Each slot's last send of its output and of its input gradient.
    std::vector<std::unique_ptr<comm::Work>> forward_sends, backward_sends;
  };
  std::vector<ModelChunk> model_chunks_;
  int slots_batch_ = 0;
  Inbox from_previous_, from_next_;  // stage inputs, output gradients
  std::vector<int32_t> tokens_, targets_;  // one micro-batch, on the host
  int64_t busy_nanos_ = 0, step_nanos_ = 0;
};

}  // namespace tally::parallel
