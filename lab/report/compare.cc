#include "lab/report/compare.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/runtime/status_macros.h"
#include "core/train/options.h"

namespace tally::report {
namespace {


// The configuration keys that make the model: runs that differ in one compare with it said.
constexpr const char* kModelKeys[] = {"n_layer", "n_head",    "n_embd",    "seq_len",
                                      "vocab_size", "n_experts", "moe_top_k", "params"};
// Keys that follow from the others (the grid's size, where the ranks sit): no label names them.
constexpr const char* kDerived[] = {"world", "nodes", "gpus_per_node", "grad_comm_dtype"};

// The run's cell of a row: min..max of value(rank) over the ranks where it is present.
template <typename Value>
Comparison::Cell CellOf(const RunReport& run, Value value) {
  Comparison::Cell cell;
  for (const RunReport::Rank& rank : run.ranks) {
    const std::optional<double> v = value(rank);
    if (!v.has_value()) continue;
    cell.min = cell.present ? std::min(cell.min, *v) : *v;
    cell.max = cell.present ? std::max(cell.max, *v) : *v;
    cell.present = true;
  }
  return cell;
}

template <typename Map>
std::optional<double> Lookup(const Map& map, const std::string& key) {
  auto it = map.find(key);
  if (it == map.end()) return std::nullopt;
  return double(it->second);
}

// Where the runs' models differ: each model key that does, with its value in every run
// (Comparison::models_differ); "" for runs of one model.
std::string ModelsDiffer(const std::vector<RunReport>& runs) {
  std::vector<std::string> models;
  for (const char* key : kModelKeys) {
    std::vector<std::string> values;
    for (const RunReport& run : runs) {
      auto it = run.config.find(key);
      values.push_back(it == run.config.end() ? "(none)" : it->second);
    }
    if (std::set<std::string>(values.begin(), values.end()).size() > 1) {
      models.push_back(absl::StrCat(key, " ", absl::StrJoin(values, " / ")));
    }
  }
  if (models.empty()) return "";
  return absl::StrCat("the runs are of different models (", absl::StrJoin(models, "; "),
                      "): their bytes and memory change with the model as well as with the layout");
}

// Runs of one configuration (the same config and steps), given more than once: their
// measured time's spread (Comparison::repeats).
std::vector<Comparison::Repeats> RepeatsOf(const std::vector<RunReport>& runs) {
  std::vector<Comparison::Repeats> repeats;
  std::vector<bool> grouped(runs.size(), false);
  for (size_t i = 0; i < runs.size(); ++i) {
    if (grouped[i]) continue;
    Comparison::Repeats group;
    for (size_t j = i; j < runs.size(); ++j) {
      if (!grouped[j] && runs[j].config == runs[i].config && runs[j].steps == runs[i].steps) {
        group.runs.push_back(j);
        grouped[j] = true;
      }
    }
    if (group.runs.size() < 2) continue;
    for (const char* part : kReportTime) {
      std::vector<double> busiest;  // per run
      for (const size_t r : group.runs) {
        const Comparison::Cell cell =
            CellOf(runs[r], [&](const RunReport::Rank& k) { return Lookup(k.time, part); });
        if (cell.present) busiest.push_back(cell.max);
      }
      if (busiest.size() != group.runs.size()) continue;  // a run without measured time
      std::sort(busiest.begin(), busiest.end());
      const size_t n = busiest.size();
      const double median = n % 2 == 1 ? busiest[n / 2] : (busiest[n / 2 - 1] + busiest[n / 2]) / 2;
      group.time.push_back({part, busiest.front(), median, busiest.back()});
    }
    if (!group.time.empty()) repeats.push_back(std::move(group));
  }
  return repeats;
}

// Each run's label: the config keys whose values differ between the runs, in the config's
// (alphabetical) order, as key=value, leaving out the keys the run's config lacks (the
// flags written only where they are on: lab/report/json.cc), or "without k1 k2" when it has
// none of them; one run alone, its grid; else "run N".
std::vector<std::string> LabelsOf(const std::vector<RunReport>& runs) {
  std::vector<std::string> labels;
  std::set<std::string> keys;
  for (const RunReport& run : runs) {
    for (const auto& [key, value] : run.config) keys.insert(key);
  }
  std::vector<std::string> differing;
  for (const std::string& key : keys) {
    std::set<std::string> values;
    for (const RunReport& run : runs) {
      auto it = run.config.find(key);
      values.insert(it == run.config.end() ? "(none)" : it->second);
    }
    const bool derived = std::find_if(std::begin(kDerived), std::end(kDerived), [&](const char* d) {
                           return key == d;
                         }) != std::end(kDerived);
    if (values.size() > 1 && !derived) differing.push_back(key);
  }
  for (size_t i = 0; i < runs.size(); ++i) {
    std::vector<std::string> parts, lacked;
    for (const std::string& key : differing) {
      auto it = runs[i].config.find(key);
      if (it == runs[i].config.end()) {
        lacked.push_back(key);
      } else {
        parts.push_back(absl::StrCat(key, "=", it->second));
      }
    }
    if (parts.empty() && !lacked.empty()) parts.push_back("without " + absl::StrJoin(lacked, " "));
    if (runs.size() == 1) {  // nothing differs: the run's grid names it
      for (const char* key : {"dp", "tp", "pp", "zero"}) {
        auto it = runs[i].config.find(key);
        if (it != runs[i].config.end()) parts.push_back(absl::StrCat(key, "=", it->second));
      }
    }
    labels.push_back(parts.empty() ? absl::StrCat("run ", i + 1) : absl::StrJoin(parts, " "));
  }
  return labels;
}

}  // namespace

absl::StatusOr<Comparison> Compare(const std::vector<RunReport>& runs) {
  if (runs.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(kCompareWho, " no runs to compare"));
  }
  Comparison c;
  c.models_differ = ModelsDiffer(runs);
  for (const RunReport& run : runs) c.paths.push_back(run.path);
  c.labels = LabelsOf(runs);

  auto add_row = [&](const std::string& section, const std::string& key, auto value) {
    Comparison::Row row{section, key, {}};
    for (const RunReport& run : runs) row.cells.push_back(CellOf(run, value));
    const Comparison::Cell& base = row.cells.front();
    for (Comparison::Cell& cell : row.cells) {
      if (cell.present && base.present && base.max > 0) cell.ratio = cell.max / base.max;
    }
    c.rows.push_back(std::move(row));
  };
  std::set<std::string> traffic;
  for (const RunReport& run : runs) {
    for (const RunReport::Rank& rank : run.ranks) {
      for (const auto& [key, bytes] : rank.sent) traffic.insert(key);
    }
  }
  for (const std::string& key : traffic) {
    add_row("traffic", key, [&](const RunReport::Rank& r) -> std::optional<double> {
      std::optional<double> v = Lookup(r.sent, key);
      return v.has_value() && *v > 0 ? v : std::nullopt;  // the ranks that sent any
    });
  }
  add_row("traffic", "total", [&](const RunReport::Rank& r) -> std::optional<double> {
    int64_t total = 0;
    for (const auto& [key, bytes] : r.sent) total += bytes;
    return double(total);
  });
  for (const char* category : kReportMemory) {
    add_row("memory", category, [&](const RunReport::Rank& r) { return Lookup(r.memory, category); });
  }
  for (const char* part : kReportTime) {
    add_row(Comparison::kMeasured, part,
            [&](const RunReport::Rank& r) { return Lookup(r.time, part); });
  }
  for (const char* part : kReportModelledTime) {
    add_row(Comparison::kModelled, part,
            [&](const RunReport::Rank& r) { return Lookup(r.modelled_time, part); });
  }
  c.repeats = RepeatsOf(runs);
  // A time row no run has says nothing.
  c.rows.erase(std::remove_if(c.rows.begin(), c.rows.end(),
                              [](const Comparison::Row& row) {
                                return std::none_of(row.cells.begin(), row.cells.end(),
                                                    [](const auto& cell) { return cell.present; });
                              }),
               c.rows.end());
  return c;
}

}  // namespace tally::report
