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
  // Mixture of experts (core/model/moe.h): E experts behind a router in every block's MLP, each
  // token sent to its top k (0 experts: the dense MLP); each expert takes at most
  // ⌈capacity_factor·k·n/E⌉ of a micro-batch's n tokens (0: no limit); the Switch
  // load-balancing loss weighted by aux_loss_coef.
  int n_experts = 0;
  int moe_top_k = 2;
  double capacity_factor = 0;
  double aux_loss_coef = 0.01;
  bool moe() const { return n_experts > 0; }

  // Parameter counts beyond this (2^50) are refused, so that every size derived from the
  // shape fits in 64 bits.
  static constexpr double kMaxParams = 1125899906842624.0;

  // Every field positive, n_embd divisible by n_head, at most kMaxParams parameters; with
  // experts, 1 <= moe_top_k <= n_experts and non-negative, finite capacity and coefficient.
  absl::Status Validate() const;
  int head_size() const { return n_embd / n_head; }
  // Parameters: V·C + T·C + L·(12·C² + 13·C) + 2·C; with E experts each layer's MLP
  // (8·C² + 5·C) is E of them plus the router (E·C): L·(4·C² + 8·C + E·(8·C² + 5·C) + E·C).
  int64_t NumParams() const;
  // Parameters of one layer's MLP: the dense one, or the experts and the router.
  int64_t MlpParams() const;
  // Model FLOPs per token for a forward and backward pass: 6·(the parameters a token
  // uses) + 12·L·C·T (the matmuls, plus attention's two T×T products); with experts a
  // token uses k of them and the router.
  double FlopsPerToken() const;
  std::string ToString() const;
};

}  // namespace tally::model
