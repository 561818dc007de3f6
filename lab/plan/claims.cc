// The catalogue of claims (claims.h) and what its claims share (claim_runs.h); the claims
// are claims_bytes.cc and claims_memory.cc, the table and JSON claims_print.cc.
#include "lab/plan/claims.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "lab/plan/claim_runs.h"
#include "lab/plan/measured.h"
#include "lab/plan/plan.h"
#include "core/runtime/status_macros.h"

namespace tally::plan {

namespace internal_claims {

// tally_train's default GPT (4 layers of 256 channels, 4 heads, 128 positions, 256 byte
// tokens), b = 2 sequences a data-parallel rank in one micro-batch, fp32 values.
PlanInput DefaultGpt() {
  PlanInput in{ModelPreset("toy").value()};
  in.seq_len = in.model.config.seq_len;
  in.batch = 2;
  in.precision = DType::kF32;
  in.bytes_per_value = 4;
  return in;
}

// What a setting says of the model: "tally_train's default GPT (Φ = 3257856)".
std::string DefaultGptWords(const PlanInput& in) {
  return absl::StrCat("tally_train's default GPT (Φ = ", in.model.params, "), b = ", in.batch,
                      ", s = ", in.seq_len, ", ", in.precision == DType::kF32 ? "fp32" : "bf16");
}

// tally's GPT of a real model's size, b = 1 sequence a data-parallel rank, bf16: the
// claims made at scale (dry runs).
PlanInput GptAtScale(int layers, int heads, int hidden, int vocab, int seq_len) {
  model::GPTConfig config;
  config.n_layer = layers;
  config.n_head = heads;
  config.n_embd = hidden;
  config.seq_len = seq_len;
  config.vocab_size = vocab;
  PlanInput in{GptShape(config)};
  in.seq_len = seq_len;
  in.batch = 1;
  in.precision = DType::kBF16;
  in.bytes_per_value = 2;
  return in;
}

// A rank's model states at their peaks: parameters, gradients, optimizer state.
int64_t ModelStates(const MemoryLedger& m) {
  return m.peak(MemoryCategory::kParams) + m.peak(MemoryCategory::kGrads) +
         m.peak(MemoryCategory::kOptimizer);
}

absl::StatusOr<PlanRow> RowNamed(const PlanInput& in, const std::string& strategy) {
  for (PlanRow& row : Plan(in)) {
    if (row.strategy == strategy) return std::move(row);
  }
  return absl::InternalError(absl::StrCat("[claims] the plan has no row '", strategy, "'"));
}

// The busiest GPU's bytes under a planned row against the row's exact column: in all, or
// (`inter`) across nodes.
absl::StatusOr<ClaimCheck> CheckRow(const train::RankLedgers& run, const PlanInput& in,
                                    const std::string& strategy, const std::string& what,
                                    bool inter) {
  ASSIGN_OR_RETURN(const PlanRow row, RowNamed(in, strategy));
  const LedgerRows rows = PlanLedgerRows(strategy, in.zero);
  if (!rows) return absl::InternalError(absl::StrCat("[claims] no ledger rows for '", strategy, "'"));
  const std::shared_ptr<const comm::Nodes> placed = PlanAsTrainOptions(in).PlacedNodes();
  const comm::LinkBytes most = BusiestSent(
      run.traffic, placed != nullptr ? *placed : comm::Nodes::One(int(in.world())), rows);
  return ClaimCheck{what, double(inter ? most.inter : most.total()),
                    inter ? row.inter_bytes_per_gpu : row.exact_bytes_per_gpu};
}

std::string Percent(double ratio) { return absl::StrFormat("%.2f%%", 100 * (ratio - 1)); }

}  // namespace internal_claims

bool ClaimResult::Holds() const {
  return std::all_of(checks.begin(), checks.end(), [](const ClaimCheck& c) { return c.Holds(); });
}

const std::vector<Claim>& Claims() {
  static const std::vector<Claim> claims = {
      {"ring", "ring all-reduce: 2(N−1)/N of the buffer a GPU", internal_claims::Ring},
      {"zero3", "ZeRO-3 moves 1.5× ZeRO-2", internal_claims::Zero3},
      {"zero-memory", "the ZeRO paper's memory table (7.5B, K = 12)", internal_claims::ZeroMemory},
      {"optimizer-share", "the seed: on 1024 GPUs the optimizer states are negligible",
       internal_claims::OptimizerShare},
      {"zero++", "ZeRO++: 4× less communication", internal_claims::ZeroPlusPlus},
      {"powersgd", "PowerSGD: (m + n)·r instead of m·n", internal_claims::PowerSgd},
      {"onebit-adam", "1-bit Adam: up to 5× less communication", internal_claims::OneBitAdam},
      {"tp", "tensor parallelism: 8·b·s·h a layer", internal_claims::TensorParallel},
      {"pp", "pipeline parallelism: 2(N−1)·b·s·h a step", internal_claims::PipelineParallel},
      {"ulysses", "DeepSpeed-Ulysses: 4Nh/P a layer", internal_claims::Ulysses},
      {"bubble", "the pipeline bubble: (p−1)/(v·m + p−1)", internal_claims::Bubble},
      {"seed", "the seed's 13 worked examples", internal_claims::Seed},
  };
  return claims;
}

absl::StatusOr<std::vector<ClaimResult>> CheckClaims(const std::vector<std::string>& only) {
  std::vector<std::string> names;
  for (const Claim& c : Claims()) names.push_back(c.name);
  for (const std::string& name : only) {
    if (std::find(names.begin(), names.end(), name) == names.end()) {
      return absl::InvalidArgumentError(absl::StrCat("[claims] no claim is named '", name,
                                                     "': the claims are ",
                                                     absl::StrJoin(names, ", ")));
    }
  }
  std::vector<ClaimResult> out;
  for (const Claim& c : Claims()) {
    if (!only.empty() && std::find(only.begin(), only.end(), c.name) == only.end()) continue;
    ASSIGN_OR_RETURN(std::vector<ClaimResult> results, c.check());
    for (ClaimResult& r : results) out.push_back(std::move(r));
  }
  return out;
}

bool AllHold(const std::vector<ClaimResult>& results) {
  return std::all_of(results.begin(), results.end(), [](const ClaimResult& r) { return r.Holds(); });
}

}  // namespace tally::plan
