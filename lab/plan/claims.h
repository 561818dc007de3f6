// tally_claims: published communication and memory claims, each reproduced with the
// ledger. A claim is run where it can be: a real run of tally's GPT on thread ranks where
// a small one is enough, a dry run (meta tensors, the same ledgers) at the claim's own
// scale where it is not. Each result holds what the run measured to the exact formula
// tally declares for it (the planner's, plan.h, which the planner's tests hold to runs),
// and puts the claim's own figure for the same setting beside it, with what the claim
// leaves out.
//
//   ASSIGN_OR_RETURN(std::vector<ClaimResult> results, CheckClaims({"zero3", "ring"}));
//   PrintClaims(results, /*json=*/false, std::cout);
//   return AllHold(results) ? 0 : 1;
//
// A claim whose feature tally does not have (DualPipe's parameters, a tree all-reduce's
// "about 2S") is not in the catalogue: the issue that brings the feature adds it.
#pragma once

#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace tally::plan {

// One measured quantity held to its exact formula: bytes (or slots of a schedule), so
// equal means equal.
struct ClaimCheck {
  std::string what;
  double measured = 0;  // the run's ledger (or the schedule tally runs)
  double exact = 0;     // the formula's
  bool Holds() const { return measured == exact; }
};

struct ClaimResult {
  std::string name;     // the catalogue's name (--only), with a setting's suffix: "zero-memory/64/3"
  std::string claim;    // what the source says, briefly
  std::string source;   // paper, document or repository
  std::string setting;  // where tally measured it: the model, the grid, real or dry run
  std::string formula;  // the exact formula in tally's terms
  std::vector<ClaimCheck> checks;  // empty: the planner's figure alone (the seed's examples)
  // The quantity the claim speaks of as tally has it, and the claim's figure for the same
  // setting, in `unit` ("B": bytes, "fraction" of a step).
  double tally = 0, claimed = 0;
  std::string unit = "B";
  std::string leaves_out;
  bool Holds() const;
  double Ratio() const { return claimed != 0 ? tally / claimed : 0; }
};

struct Claim {
  std::string name, summary;
  std::function<absl::StatusOr<std::vector<ClaimResult>>()> check;
};
// Every claim, in the order tally_claims prints them.
const std::vector<Claim>& Claims();

// The claims named in `only` (every one when empty), checked in the catalogue's order; a
// name not in the catalogue is an error that lists the names.
absl::StatusOr<std::vector<ClaimResult>> CheckClaims(const std::vector<std::string>& only);

// Every measurement equal to its exact formula.
bool AllHold(const std::vector<ClaimResult>& results);

// The results as a table with each claim's words below it, or as one JSON array.
void PrintClaims(const std::vector<ClaimResult>& results, bool json, std::ostream& out);

}  // namespace tally::plan
