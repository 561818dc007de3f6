// Checkpoints: safetensors files with GPT-2's tensor names (parameters.h), always whole
// (never sharded), plus the optimizer's state in the same file.
//
//   wte.weight, wpe.weight, h.0.ln_1.weight, ...            the parameters
//   optimizer.exp_avg.<name>, optimizer.exp_avg_sq.<name>   AdamW's moments
//   optimizer.momentum_buffer.<name>                        SGD's buffer
//   __metadata__: format "tally", step, optimizer, n_layer, n_head, n_embd, seq_len,
//                 vocab_size, n_experts, moe_top_k, and what the run was (TrainedOn,
//                 informational): precision ("fp32" or "bf16"), data (its source: a file
//                 or "embedded corpus"), data_bytes, data_fnv1a64 (16 lowercase hex
//                 digits) (all strings; a file without the data keys is from before
//                 2026-12-02, or another program)
//   compression.rank<w>.<buffer>                            a compressed run's per-rank
//                 state (CompressionState below), with the metadata key compression
//
// The parameters are always F32: a bf16 run saves its fp32 master weights, so a run of
// either precision resumes from a checkpoint of the other.
//
// A file with only the parameters (written with no optimizer, or by another program)
// loads as initial weights at step 0.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/model/config.h"
#include "core/optim/optimizer.h"

namespace tally::model {

// What the run that wrote a checkpoint was, besides its model: read back, never checked
// (a run on other data only warns, core/train/trainer.h).
struct TrainedOn {
  std::string precision = "fp32";
  std::string data;             // its source; empty: not recorded
  int64_t data_bytes = 0;
  uint64_t data_fnv1a64 = 0;    // core/runtime/rng.h's Fnv1a64 of the bytes
  // "embedded corpus (2000000 bytes)", or "unknown data" when not recorded.
  std::string DataName() const;
};

// The state data parallelism's gradient compression keeps on each rank across steps
// (core/parallel/powersgd.h's E and Q, core/parallel/onebit_adam.h's two errors): unlike the
// optimizer's, it differs from rank to rank, so a checkpoint holds every rank's, each
// buffer one F32 tensor of one dimension named CompressionTensorName(rank, buffer), and
// `key` in the metadata (as "compression"): what the state is (the method, its flags and
// the grid that cut it, core/train/checkpoints.cc). A run restores it only under the same key.
struct CompressionState {
  std::string key;                                    // empty: none
  std::map<std::string, std::vector<float>> tensors;  // by their names in the file
};
std::string CompressionTensorName(int rank, const std::string& buffer);
// The most ranks whose compression state a checkpoint holds (it bounds the file the
// loader reads: at most 2·(Φ + 1536) floats a rank, in up to 6 tensors).
inline constexpr int kMostCompressedRanks = 64;

// `params`: the whole flat buffer of a model of `config` (ParameterLayout::ForGPT).
// `optimizer` may be null (parameters only); its state covers the whole buffer.
absl::Status SaveCheckpoint(const std::string& path, const GPTConfig& config,
                            const float* params, optim::Optimizer* optimizer, int64_t step,
                            const TrainedOn& trained_on = {},
                            const CompressionState& compression = {});

struct LoadedCheckpoint {
  int64_t step = 0;             // optimizer steps taken before the save (0 unless restored)
  bool has_optimizer = false;   // whether the optimizer state was restored
  int64_t saved_step = 0;       // the step the file names, whatever was restored
  TrainedOn trained_on;
  CompressionState compression;  // whatever the file holds, every rank's
};

// Loads the parameters into `params`, the whole buffer (every tensor must be there with
// the shape `config` gives) and, if the file has them and `optimizer` is not null, the
// optimizer's state and step. Compression state is read (checked finite and of one
// dimension), never restored here.
absl::StatusOr<LoadedCheckpoint> LoadCheckpoint(const std::string& path, const GPTConfig& config,
                                                float* params, optim::Optimizer* optimizer);

}  // namespace tally::model
