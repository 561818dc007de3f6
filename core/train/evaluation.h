// Evaluation and sampling, apart from training: forwards of a rank's part of the model
// (through every stage under pipeline parallelism), no backward, booked in phase eval.
//
//   validation loss  micro-batches of b validation sequences 0, 1, 2, ... (the batch
//                    order, core/data/dataset.h), min(eval_batches, max(1, ⌊S/b⌋)) of them for
//                    a split of S sequences; the mean of their mean losses (under context
//                    parallelism each cp rank's positions, the means averaged over cp)
//   sampling         after the prompt (a newline without one), each byte from the last
//                    position's logits over the whole vocabulary (tensor-parallel slices
//                    gathered): the top k of
//                    logit/temperature, drawn with probability ∝ exp(score − max) by the
//                    counter RNG's Uniform(seed, StreamOf("sample"), i); the window is the
//                    last (up to) T bytes, left-aligned (causal attention makes the
//                    padding after them irrelevant); under context parallelism the cp
//                    rank holding the window's last position picks, and the cp group
//                    sums the pick (the others add 0)
//
// Every rank that holds part of the replica evaluated must call them together. What they
// allocate is outside the training peaks of the rank's memory ledger (its
// paused_peak_total, core/runtime/memory_ledger.h).
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "core/data/dataset.h"
#include "core/model/gpt.h"
#include "core/parallel/context_parallel.h"
#include "core/parallel/pipeline_parallel.h"
#include "core/runtime/comm/communicator.h"
#include "core/train/options.h"

namespace tally::train {

// The pieces of a rank's model a forward runs through.
struct EvalModel {
  model::GPT* gpt = nullptr;
  parallel::PipelineParallel* pipeline = nullptr;  // null without pipeline parallelism
  comm::Communicator* tp = nullptr;                // the tensor-parallel group, or null
  comm::Communicator* pp = nullptr;                // the pipeline's stages, or null
  Allocator* host = nullptr;                       // host memory of the rank's ledger
  comm::TrafficLedger* traffic = nullptr;          // the rank's ledger
  // Context parallelism: the rank's positions of each sequence and the cp group, over
  // which the losses are averaged and the sampled byte is agreed; null without it.
  const parallel::ContextParallel* sequence = nullptr;
};

absl::StatusOr<float> ValidationLoss(const EvalModel& m, const data::Split& val, int micro_batch_size,
                                     int eval_batches);

// `bytes` bytes sampled by `sampling`'s temperature, top-k and prompt (not its
// sample_bytes: the caller says how many), from the random stream of `seed`.
absl::StatusOr<std::string> Sample(const EvalModel& m, const SamplingOptions& sampling, int bytes,
                                   uint64_t seed);

}  // namespace tally::train
