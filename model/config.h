// The GPT-2 style model's shape.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace tally::model {

struct GPTConfig {
  int n_layer = 4;
  int n_head = 4;
  int n_embd = 256;      // C
  int seq_len = 128;     // T: the longest sequence, and the size of the position table
  int vocab_size = 256;  // V: bytes

  // Parameter counts beyond this (2^50) are refused, so that every size derived from the
  // shape fits in 64 bits.
  static constexpr double kMaxParams = 1125899906842624.0;

  // Every field positive, n_embd divisible by n_head, at most kMaxParams parameters.
  absl::Status Validate() const;
  int head_size() const { return n_embd / n_head; }
  // Parameters: V·C + T·C + L·(12·C² + 13·C) + 2·C.
  int64_t NumParams() const;
  // Model FLOPs per token for a forward and backward pass: 6·params + 12·L·C·T (the
  // matmuls, plus attention's two T×T products).
  double FlopsPerToken() const;
  std::string ToString() const;
};

}  // namespace tally::model
