#include "model/config.h"

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
  const double params = double(vocab_size + seq_len + 2) * n_embd +
                        double(n_layer) * (12.0 * n_embd * n_embd + 13.0 * n_embd);
  if (params > kMaxParams) {
    return absl::InvalidArgumentError(absl::StrCat("[config] the model would have ", params,
                                                   " parameters; tally counts at most ", kMaxParams));
  }
  if (n_embd % n_head != 0) {
    return absl::InvalidArgumentError(absl::StrCat("[config] n_embd (", n_embd,
                                                   ") must be divisible by n_head (", n_head, ")"));
  }
  return absl::OkStatus();
}

int64_t GPTConfig::NumParams() const {
  int64_t c = n_embd;
  return int64_t(vocab_size) * c + int64_t(seq_len) * c + int64_t(n_layer) * (12 * c * c + 13 * c) +
         2 * c;
}

double GPTConfig::FlopsPerToken() const {
  return 6.0 * double(NumParams()) + 12.0 * n_layer * n_embd * double(seq_len);
}

std::string GPTConfig::ToString() const {
  return absl::StrCat("n_layer=", n_layer, " n_head=", n_head, " n_embd=", n_embd,
                      " seq_len=", seq_len, " vocab_size=", vocab_size);
}

}  // namespace tally::model
