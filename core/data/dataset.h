// Byte-level tokens, a train/validation split, and the documented batch order.
//
// Tokens are the bytes of the text (vocabulary 256). The first 90% of the tokens are the
// training split, the rest the validation split.
//
// Batch order (any program can rebuild exactly the batches tally trained on): a split
// of n tokens holds S = floor((n - 1) / T) sequences; sequence i (i = 0, 1, 2, ...) starts
// at token o = (i mod S)·T of the split, its inputs are tokens [o, o + T) and its targets
// tokens [o + 1, o + T + 1). Optimizer step k (from 0) with a global batch of G sequences
// trains on sequences k·G ... k·G + G - 1, in that order; with micro-batches of b, micro-
// batch j of step k is sequences k·G + j·b ... k·G + (j+1)·b - 1.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tally::data {

class Split {
 public:
  Split() = default;
  Split(std::vector<int32_t> tokens, int seq_len);

  int64_t tokens() const { return int64_t(tokens_.size()); }
  int64_t sequences() const { return sequences_; }
  // Sequences first, first+1, ..., first+count-1 of the batch order into inputs and
  // targets, each (count, T).
  void Fill(int64_t first, int count, int32_t* inputs, int32_t* targets) const;

 private:
  std::vector<int32_t> tokens_;
  int seq_len_ = 0;
  int64_t sequences_ = 0;
};

struct Dataset {
  std::string source;  // the file, or "embedded corpus"
  int64_t bytes = 0;
  uint64_t fingerprint = 0;  // Fnv1a64 (core/runtime/rng.h) of the bytes: what a checkpoint records
  double unigram_entropy = 0;  // of the training bytes, in nats: a context-free model's loss
  Split train, val;
};

// The tokens of `path`, or of the embedded corpus when `path` is empty. Fails with a clear
// message when the file is missing, empty, not a regular file, or larger than
// kMaxDataBytes, or a split is shorter than one sequence.
absl::StatusOr<Dataset> LoadDataset(const std::string& path, int seq_len);

// One sequence of zero tokens as both splits: what a dry run trains on (its model has no
// values, so no text could change what it counts).
Dataset Placeholder(int seq_len);

// The largest data file read (each byte becomes a 4-byte token): 1 GiB.
inline constexpr int64_t kMaxDataBytes = int64_t(1) << 30;

// The bytes of the embedded default corpus.
inline constexpr int64_t kEmbeddedCorpusBytes = 2'000'000;

}  // namespace tally::data
