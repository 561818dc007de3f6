// What the claims of tally_claims' catalogue share (lab/plan/claims.cc): the models they
// run, a planned row held to a run, and each claim's function (claims_bytes.cc: what
// strategies send; claims_memory.cc: what a GPU holds and the bubble; the seed's examples).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "lab/plan/claims.h"
#include "lab/plan/measured.h"
#include "lab/plan/plan.h"
#include "core/runtime/memory_ledger.h"

namespace tally::plan::internal_claims {

using Results = absl::StatusOr<std::vector<ClaimResult>>;

// tally_train's default GPT (4 layers of 256 channels, 4 heads, 128 positions, 256 byte
// tokens), b = 2 sequences a data-parallel rank in one micro-batch, fp32 values.
PlanInput DefaultGpt();
// What a setting says of it: "tally_train's default GPT (Φ = 3257856), b = 2, ...".
std::string DefaultGptWords(const PlanInput& in);
// tally's GPT of a real model's size, b = 1 sequence a data-parallel rank, bf16: the
// claims made at scale (dry runs).
PlanInput GptAtScale(int layers, int heads, int hidden, int vocab, int seq_len);
// A rank's model states at their peaks: parameters, gradients, optimizer state.
int64_t ModelStates(const MemoryLedger& m);
absl::StatusOr<PlanRow> RowNamed(const PlanInput& in, const std::string& strategy);
// The busiest GPU's bytes under a planned row against the row's exact column: in all, or
// (`inter`) across nodes.
absl::StatusOr<ClaimCheck> CheckRow(const train::RankLedgers& run, const PlanInput& in,
                                    const std::string& strategy, const std::string& what,
                                    bool inter = false);
// A ratio's excess as a percentage: 1.0311 → "3.11%".
std::string Percent(double ratio);

// claims_bytes.cc
Results Ring();
Results Zero3();
Results ZeroPlusPlus();
Results PowerSgd();
Results OneBitAdam();
Results TensorParallel();
Results PipelineParallel();
Results Ulysses();
// claims_memory.cc
Results ZeroMemory();
Results OptimizerShare();
Results Bubble();
Results Seed();

}  // namespace tally::plan::internal_claims
