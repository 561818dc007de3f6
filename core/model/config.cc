#include "core/model/config.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace tally::model {

absl::Status GPTConfig::Validate() const {
  auto positive = [](int v, const char* name) -> absl::Status {
    if (v > 0) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat("[config] ", name, " must be positive, got ", v));
  };
  for (auto [v, name] : {std::pair{n_layer, "n_layer"}, {n_head, "n_head"}, {n_embd, "n_embd"},
                         {seq_len, "seq_len"}, {vocab_size, "vocab_size"}}) {
    if (absl::Status s = positive(v, name); !s.ok()) return s;
  }
  if (n_experts < 0) {
    return absl::InvalidArgumentError(absl::StrCat("[config] n_experts must be >= 0, got ", n_experts));
  }
  const double c = n_embd, mlp = 8.0 * c * c + 5.0 * c;
  const double params =
      (double(vocab_size) + double(seq_len) + 2.0) * c +  // in double: an int sum could wrap
      double(n_layer) * (4.0 * c * c + 8.0 * c + (moe() ? n_experts * (mlp + c) : mlp));
  if (params > kMaxParams) {
    return absl::InvalidArgumentError(absl::StrCat("[config] the model would have ", params,
                                                   " parameters; tally counts at most ", kMaxParams));
  }
  if (n_embd % n_head != 0) {
    return absl::InvalidArgumentError(absl::StrCat("[config] n_embd (", n_embd,
                                                   ") must be divisible by n_head (", n_head, ")"));
  }
  if (moe()) {
    if (moe_top_k < 1 || moe_top_k > n_experts) {
      return absl::InvalidArgumentError(absl::StrCat("[config] moe_top_k must be in [1, n_experts = ",
                                                     n_experts, "], got ", moe_top_k));
    }
    if (!std::isfinite(capacity_factor) || capacity_factor < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "[config] capacity_factor must be a finite number >= 0 (0: no limit), got ", capacity_factor));
    }
    if (!std::isfinite(aux_loss_coef) || aux_loss_coef < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "[config] moe_aux_loss_coef must be a finite number >= 0, got ", aux_loss_coef));
    }
  }
  return absl::OkStatus();
}

int64_t GPTConfig::MlpParams() const {
  const int64_t c = n_embd, dense = 8 * c * c + 5 * c;
  return moe() ? int64_t(n_experts) * (dense + c) : dense;
}

int64_t GPTConfig::NumParams() const {
  int64_t c = n_embd;
  return int64_t(vocab_size) * c + int64_t(seq_len) * c +
         int64_t(n_layer) * (4 * c * c + 8 * c + MlpParams()) + 2 * c;
}

double GPTConfig::FlopsPerToken() const {
  // A token runs k experts' MLPs and the router instead of all E.
  const int64_t c = n_embd, dense = 8 * c * c + 5 * c;
  const double unused = moe() ? double(n_layer) * double(n_experts - moe_top_k) * double(dense) : 0;
  return 6.0 * (double(NumParams()) - unused) + 12.0 * n_layer * n_embd * double(seq_len);
}

std::string GPTConfig::ToString() const {
  std::string s = absl::StrCat("n_layer=", n_layer, " n_head=", n_head, " n_embd=", n_embd,
                               " seq_len=", seq_len, " vocab_size=", vocab_size);
  if (moe()) {
    absl::StrAppend(&s, " n_experts=", n_experts, " moe_top_k=", moe_top_k,
                    " capacity_factor=", capacity_factor);
  }
  return s;
}

}  // namespace tally::model
