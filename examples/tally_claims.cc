// tally_claims: published communication and memory claims, each reproduced with the
// ledger (lab/plan/claims.h): the claim and its source, where tally measured it, the exact
// formula the measurement must equal, the claim's own figure beside it and what the claim
// leaves out. Exit 1 when a measurement drifts from its exact formula.
//
//   tally_claims                     every claim, a table and each claim's words
//   tally_claims --only=zero3,ring   those claims
//   tally_claims --json              one JSON array
//   tally_claims --list              the claims' names
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "examples/example_main.h"
#include "lab/plan/claims.h"
#include "core/runtime/status_macros.h"

ABSL_FLAG(std::string, only, "",
          "comma-separated claims to check (--list names them; empty: every claim)");
ABSL_FLAG(bool, json, false, "print the results as one JSON array");
ABSL_FLAG(bool, list, false, "print the claims' names and what each says, and exit");

namespace tally {
namespace {

absl::Status Main() {
  if (absl::GetFlag(FLAGS_list)) {
    for (const plan::Claim& c : plan::Claims()) {
      std::cout << absl::StrFormat("%-12s %s\n", c.name, c.summary);
    }
    return absl::OkStatus();
  }
  std::vector<std::string> only;
  for (absl::string_view name : absl::StrSplit(absl::GetFlag(FLAGS_only), ',', absl::SkipWhitespace())) {
    only.emplace_back(absl::StripAsciiWhitespace(name));
  }
  ASSIGN_OR_RETURN(const std::vector<plan::ClaimResult> results, plan::CheckClaims(only));
  plan::PrintClaims(results, absl::GetFlag(FLAGS_json), std::cout);
  std::cout << std::flush;
  std::vector<std::string> drifts;
  for (const plan::ClaimResult& r : results) {
    if (!r.Holds()) drifts.push_back(r.name);
  }
  if (!drifts.empty()) {
    return absl::InternalError(absl::StrCat("[claims] ", drifts.size(), " of ", results.size(),
                                            " results drift from their exact formulas: ",
                                            absl::StrJoin(drifts, ", ")));
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace tally

int main(int argc, char** argv) {
  return tally::RunExample(argc, argv,
                           "published claims checked by the ledger: tally_claims [--only=NAMES] [--json]",
                           tally::Main);
}
