// Checkpoints: safetensors files with GPT-2's tensor names (parameters.h), always whole
// (never sharded), plus the optimizer's state in the same file.
//
//   wte.weight, wpe.weight, h.0.ln_1.weight, ...            the parameters
//   optimizer.exp_avg.<name>, optimizer.exp_avg_sq.<name>   AdamW's moments
//   optimizer.momentum_buffer.<name>                        SGD's buffer
//   __metadata__: format "tally", step, optimizer, n_layer, n_head, n_embd, seq_len,
//                 vocab_size, precision (the run's that wrote it: "fp32" or "bf16";
//                 informational) (all strings)
//
// The parameters are always F32: a bf16 run saves its fp32 master weights, so a run of
// either precision resumes from a checkpoint of the other.
//
// A file with only the parameters (written with no optimizer, or by another program)
// loads as initial weights at step 0.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "model/config.h"
#include "optim/optimizer.h"

namespace tally::model {

// `params`: the whole flat buffer of a model of `config` (ParameterLayout::ForGPT).
// `optimizer` may be null (parameters only); its state covers the whole buffer.
absl::Status SaveCheckpoint(const std::string& path, const GPTConfig& config,
                            const float* params, optim::Optimizer* optimizer, int64_t step,
                            const std::string& precision = "fp32");

struct LoadedCheckpoint {
  int64_t step = 0;             // optimizer steps taken before the save
  bool has_optimizer = false;   // whether the optimizer state was restored
};

// Loads the parameters into `params`, the whole buffer (every tensor must be there with
// the shape `config` gives) and, if the file has them and `optimizer` is not null, the
// optimizer's state and step.
absl::StatusOr<LoadedCheckpoint> LoadCheckpoint(const std::string& path, const GPTConfig& config,
                                                float* params, optim::Optimizer* optimizer);

}  // namespace tally::model
