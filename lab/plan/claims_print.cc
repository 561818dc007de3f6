// tally_claims' output (claims.h's PrintClaims): a table of the claims, each claim's words
// below it, or one JSON array.
#include <cmath>
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "lab/plan/claims.h"
#include "core/runtime/json_writer.h"

namespace tally::plan {

namespace {

// "7818854 B", or a share of a step to 4 places.
std::string Quantity(double value, const std::string& unit) {
  if (unit == "fraction") return absl::StrFormat("%.4f", value);
  return absl::StrFormat("%.0f %s", value, unit);
}

void PrintJson(const std::vector<ClaimResult>& results, std::ostream& out) {
  JsonWriter w;
  w.BeginArray();
  for (const ClaimResult& r : results) {
    w.BeginObject();
    w.Key("name").String(r.name);
    w.Key("claim").String(r.claim);
    w.Key("source").String(r.source);
    w.Key("setting").String(r.setting);
    w.Key("formula").String(r.formula);
    w.Key("unit").String(r.unit);
    w.Key("tally").Double(r.tally);
    w.Key("claimed").Double(r.claimed);
    w.Key("ratio").Double(r.Ratio());
    w.Key("holds").Bool(r.Holds());
    w.Key("checks").BeginArray();
    for (const ClaimCheck& c : r.checks) {
      w.BeginObject();
      w.Key("what").String(c.what);
      w.Key("measured").Double(c.measured);
      w.Key("exact").Double(c.exact);
      w.Key("holds").Bool(c.Holds());
      w.EndObject();
    }
    w.EndArray();
    w.Key("leaves_out").String(r.leaves_out);
    w.EndObject();
  }
  w.EndArray();
  out << w.str() << "\n";
}

}  // namespace

void PrintClaims(const std::vector<ClaimResult>& results, bool json, std::ostream& out) {
  if (json) return PrintJson(results, out);
  out << absl::StrFormat("%-20s %18s %18s %10s  %s\n", "claim", "tally", "claimed", "ratio",
                         "measured = exact formula");
  for (const ClaimResult& r : results) {
    const std::string verdict = r.checks.empty()
                                    ? "planner (no run)"
                                    : absl::StrCat(r.Holds() ? "holds" : "DRIFTS", " (",
                                                   r.checks.size(), r.checks.size() == 1 ? " check)" : " checks)");
    out << absl::StrFormat("%-20s %18s %18s %10.4f  %s\n", r.name, Quantity(r.tally, r.unit),
                           Quantity(r.claimed, r.unit), r.Ratio(), verdict);
  }
  for (const ClaimResult& r : results) {
    out << "\n" << r.name << ": \"" << r.claim << "\" (" << r.source << ")\n";
    out << "  setting     " << r.setting << "\n";
    out << "  formula     " << r.formula << "\n";
    for (const ClaimCheck& c : r.checks) {
      out << "  measured    " << c.what << ": " << Quantity(c.measured, r.unit) << ", exact "
          << Quantity(c.exact, r.unit) << (c.Holds() ? "" : "  DRIFTS") << "\n";
    }
    out << absl::StrFormat("  tally       %s against the claim's %s: %.4f\n",
                           Quantity(r.tally, r.unit), Quantity(r.claimed, r.unit), r.Ratio());
    out << "  leaves out  " << r.leaves_out << "\n";
  }
}

}  // namespace tally::plan
