// tally_claims' catalogue (lab/plan/claims.h): every claim's measurement equals its exact
// formula, the claims' figures stand where the formulas put them, and a drift or an
// unknown name is said.
#include <cmath>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "lab/plan/claims.h"
#include "core/runtime/json_reader.h"

namespace tally::plan {
namespace {

// Every claim, checked once (about 30 s of dry and real runs here, a dry run of 1024 ranks
// the most of it): one test holds the whole catalogue, the others run a claim or none.
const std::vector<ClaimResult>& All() {
  static const std::vector<ClaimResult> results = [] {
    absl::StatusOr<std::vector<ClaimResult>> r = CheckClaims({});
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : std::vector<ClaimResult>{};
  }();
  return results;
}

const ClaimResult& Named(const std::string& name) {
  for (const ClaimResult& r : All()) {
    if (r.name == name) return r;
  }
  static const ClaimResult none;
  ADD_FAILURE() << "no result " << name;
  return none;
}

void ExpectEveryMeasurementEqualsItsExactFormula() {
  ASSERT_FALSE(All().empty());
  std::set<std::string> names;
  int measured = 0;
  for (const ClaimResult& r : All()) {
    EXPECT_TRUE(names.insert(r.name).second) << r.name;
    EXPECT_FALSE(r.claim.empty() || r.source.empty() || r.setting.empty() || r.formula.empty() ||
                 r.leaves_out.empty())
        << r.name;
    for (const ClaimCheck& c : r.checks) {
      EXPECT_EQ(c.measured, c.exact) << r.name << ": " << c.what;
      EXPECT_GT(c.measured, 0) << r.name << ": " << c.what;
      ++measured;
    }
    EXPECT_TRUE(r.Holds()) << r.name;
    EXPECT_GT(r.tally, 0) << r.name;
    EXPECT_GT(r.claimed, 0) << r.name;
  }
  EXPECT_TRUE(AllHold(All()));
  // Every claim of the catalogue gave a result; all but the seed's were measured.
  for (const Claim& c : Claims()) {
    bool found = false;
    for (const ClaimResult& r : All()) found |= r.name == c.name || absl::StartsWith(r.name, c.name + "/");
    EXPECT_TRUE(found) << c.name;
  }
  EXPECT_GE(measured, 25);
}

// Where the formulas put each claim's figure against tally's.
void ExpectTheClaimsStandWhereTheFormulasPutThem() {
  // The ring: 2(N−1)/N·4Φ but for the uneven chunks, a few bytes more (Φ mod 5 = 1).
  const ClaimResult& ring = Named("ring");
  EXPECT_GT(ring.tally, ring.claimed);
  EXPECT_LT(ring.tally - ring.claimed, 2 * 4 * 5);
  // ZeRO-3 is 1.5× ZeRO-2 exactly when N divides every unit; without resharding 1×.
  const ClaimResult& zero3 = Named("zero3");
  ASSERT_EQ(zero3.checks.size(), 3u);
  EXPECT_EQ(zero3.tally, 1.5 * zero3.checks[0].measured);
  EXPECT_EQ(zero3.checks[2].measured, zero3.checks[0].measured);
  // Tensor parallelism: the ring's (N−1)/N of 8·b·s·h at tp 2; Ulysses' (P−1)/P at cp 4;
  // the pipeline and the bubble exactly.
  EXPECT_EQ(Named("tp").Ratio(), 0.5);
  EXPECT_EQ(Named("ulysses").Ratio(), 0.75);
  EXPECT_EQ(Named("pp").Ratio(), 1);
  EXPECT_EQ(Named("bubble/1f1b").tally, 3.0 / 11);
  EXPECT_EQ(Named("bubble/interleaved").tally, 3.0 / 19);
  // ZeRO's memory: ZeRO-1 is the paper's formula to the byte here (Nd divides every
  // optimizer shard), ZeRO-3 more than 16Ψ/Nd by the unit it gathers, the more so the
  // smaller the shards.
  EXPECT_EQ(Named("zero-memory/64/1").Ratio(), 1);
  EXPECT_GT(Named("zero-memory/64/3").Ratio(), Named("zero-memory/16/3").Ratio());
  EXPECT_GT(Named("zero-memory/16/3").Ratio(), Named("zero-memory/4/3").Ratio());
  EXPECT_GT(Named("zero-memory/4/3").Ratio(), 1);
  // The seed's "negligible" optimizer on 1024 GPUs: 12Φ/1024 but for the embedding's
  // stages, and still some 8% of what a GPU holds.
  const ClaimResult& share = Named("optimizer-share");
  EXPECT_GT(share.Ratio(), 1);
  EXPECT_LT(share.Ratio(), 1.05);
  EXPECT_GT(share.tally / share.checks[1].measured, 0.05);
  // ZeRO++ beats its 4× across nodes here; PowerSGD sends more than the claim's (m + n)·r
  // (the values sent whole); a compressed 1-bit step is 32× less than fp32's all-reduce,
  // so far under the claim's 5× of a whole run.
  EXPECT_LT(Named("zero++").Ratio(), 1);
  EXPECT_GT(Named("powersgd").Ratio(), 1);
  const ClaimResult& onebit = Named("onebit-adam");
  EXPECT_NEAR(onebit.checks[0].measured / onebit.checks[1].measured, 32, 0.5);
  // The seed's 13, figures the planner reproduces (two at b = 8 and 4: 7% off).
  int seed = 0;
  for (const ClaimResult& r : All()) {
    if (!absl::StartsWith(r.name, "seed/")) continue;
    ++seed;
    EXPECT_TRUE(r.checks.empty());
    EXPECT_NEAR(r.Ratio(), 1, 0.08) << r.name;
  }
  EXPECT_EQ(seed, 13);
}

TEST(Claims, ADriftIsSaidAndFailsTheCheck) {
  const absl::StatusOr<std::vector<ClaimResult>> pp = CheckClaims({"pp", "tp"});
  ASSERT_TRUE(pp.ok()) << pp.status();
  ASSERT_EQ(pp->size(), 2u);
  EXPECT_EQ((*pp)[0].name, "tp");  // the catalogue's order
  EXPECT_TRUE(AllHold(*pp));
  ClaimResult drift = (*pp)[1];
  ASSERT_EQ(drift.checks.size(), 1u);
  drift.checks[0].measured += 1;
  EXPECT_FALSE(drift.Holds());
  EXPECT_FALSE(AllHold({(*pp)[0], drift}));
  std::ostringstream text;
  PrintClaims({drift}, /*json=*/false, text);
  EXPECT_TRUE(absl::StrContains(text.str(), "DRIFTS (1 check)")) << text.str();
  EXPECT_TRUE(absl::StrContains(text.str(), "1572865 B, exact 1572864 B  DRIFTS")) << text.str();
}

void ExpectJsonHoldsEveryResult() {
  std::ostringstream out;
  PrintClaims(All(), /*json=*/true, out);
  absl::StatusOr<JsonValue> doc = ParseJson(out.str());
  ASSERT_TRUE(doc.ok()) << doc.status();
  ASSERT_EQ(doc->array.size(), All().size());
  for (size_t i = 0; i < All().size(); ++i) {
    const JsonValue& r = doc->array[i];
    EXPECT_EQ(r.Find("name")->string, All()[i].name);
    EXPECT_EQ(r.Find("holds")->boolean, true);
    EXPECT_EQ(r.Find("checks")->array.size(), All()[i].checks.size());
    for (const JsonValue& c : r.Find("checks")->array) {
      EXPECT_EQ(c.Find("measured")->number, c.Find("exact")->number);
    }
  }
}

TEST(Claims, TheCatalogueHoldsWhereTheFormulasPutIt) {
  ExpectEveryMeasurementEqualsItsExactFormula();
  ExpectTheClaimsStandWhereTheFormulasPutThem();
  ExpectJsonHoldsEveryResult();
}

TEST(Claims, AnUnknownNameListsTheClaims) {
  const absl::StatusOr<std::vector<ClaimResult>> r = CheckClaims({"ring", "zero4"});
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(absl::StartsWith(r.status().message(), "[claims] no claim is named 'zero4': the claims are ring, zero3, "))
      << r.status();
}

}  // namespace
}  // namespace tally::plan
