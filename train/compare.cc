#include "train/compare.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>
#include <set>
#include <span>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "runtime/files.h"
#include "runtime/json_reader.h"
#include "runtime/status_macros.h"
#include "train/options.h"

namespace tally::train {
namespace {

constexpr char kWho[] = "[tally_compare]";

// The configuration keys that make the model: runs that differ in one compare with it said.
constexpr const char* kModelKeys[] = {"n_layer", "n_head",    "n_embd",    "seq_len",
                                      "vocab_size", "n_experts", "moe_top_k", "params"};
// Keys that follow from the others (the grid's size, where the ranks sit): no label names them.
constexpr const char* kDerived[] = {"world", "nodes", "gpus_per_node", "grad_comm_dtype"};
constexpr const char* kMemory[] = {"params", "grads", "optimizer", "activations", "comm",
                                   "peak_total"};
constexpr const char* kTime[] = {"step_ms", "compute_ms", "comm_exposed_ms", "comm_hidden_ms",
                                 "idle_ms"};
constexpr const char* kModelledTime[] = {"step_ms", "compute_ms", "comm_exposed_ms", "comm_waiting_ms",
                                         "idle_ms"};

std::string AsText(const JsonValue& v) {
  switch (v.kind) {
    case JsonValue::Kind::kString: return v.string;
    case JsonValue::Kind::kBool: return v.boolean ? "true" : "false";
    case JsonValue::Kind::kNumber:
      return v.is_integer() && std::abs(v.number) < 9.007199254740992e15
                 ? absl::StrCat(v.AsInt())
                 : absl::StrFormat("%g", v.number);
    case JsonValue::Kind::kNull: return "null";
    default: return "...";
  }
}

absl::Status NotAReport(const std::string& path, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat(
      kWho, " ", path, " is not a tally_train report (--report=json or --traffic_json): ", why));
}

// What a report's numbers may be, as tally writes them: counts (bytes, steps, ranks) are
// integers in [0, 2^53], exact in a double and summable in 64 bits; times are finite
// milliseconds in [0, 1e15]. Anything else refuses the file, naming the field: no figure
// wraps, goes negative or prints as inf.
enum class Quantity { kCount, kMillis, kLoss, kShare };
constexpr double kMaxCount = 9007199254740992.0;  // 2^53
constexpr double kMaxMillis = 1e15;
constexpr double kMaxLoss = 1e6;  // nats: a cross-entropy (and experts' auxiliary loss)

absl::StatusOr<double> Checked(double x, Quantity q, const std::string& path, const std::string& field) {
  const bool count = q == Quantity::kCount;
  const double most = count                   ? kMaxCount
                      : q == Quantity::kMillis ? kMaxMillis
                      : q == Quantity::kLoss   ? kMaxLoss
                                               : 1.0;
  if (!std::isfinite(x) || x < 0 || x > most || (count && std::floor(x) != x)) {
    return NotAReport(path, absl::StrFormat("%s is %g; it must be %s", field, x,
                                            count                     ? "an integer in [0, 2^53]"
                                            : q == Quantity::kMillis ? "a finite number of ms in [0, 1e15]"
                                            : q == Quantity::kLoss   ? "a finite loss in [0, 1e6]"
                                                                      : "a share in [0, 1]"));
  }
  return x;
}

absl::StatusOr<double> Checked(const JsonValue& v, Quantity q, const std::string& path,
                               const std::string& field) {
  if (!v.is_number()) return NotAReport(path, absl::StrCat(field, " is not a number"));
  return Checked(v.number, q, path, field);
}

// A number that must be there.
absl::StatusOr<double> NumberAt(const JsonValue& object, const std::string& key,
                                const std::string& path, const std::string& where,
                                Quantity q = Quantity::kCount) {
  const JsonValue* v = object.Find(key);
  if (v == nullptr || !v->is_number()) {
    return NotAReport(path, absl::StrCat(where, " has no number \"", key, "\""));
  }
  return Checked(*v, q, path, absl::StrCat(where, "'s \"", key, "\""));
}

// `total` + `more`, refused past 2^53 (what a double holds exactly).
absl::Status AddCount(int64_t& total, double more, const std::string& path, const std::string& what) {
  if (double(total) + more > kMaxCount) {
    return NotAReport(path, absl::StrCat(what, " sums past 2^53"));
  }
  total += int64_t(more);
  return absl::OkStatus();
}

absl::StatusOr<std::string> StringAt(const JsonValue& object, const std::string& key,
                                     const std::string& path, const std::string& where) {
  const JsonValue* v = object.Find(key);
  if (v == nullptr || v->kind != JsonValue::Kind::kString) {
    return NotAReport(path, absl::StrCat(where, " has no string \"", key, "\""));
  }
  return v->string;
}

absl::StatusOr<RunReport::Rank> ParseRank(const JsonValue& rank, const std::string& path,
                                          size_t index) {
  const std::string where = absl::StrCat("rank entry ", index);
  if (rank.kind != JsonValue::Kind::kObject) return NotAReport(path, where + " is not an object");
  RunReport::Rank out;
  for (auto [key, to] : {std::pair{"dp", &out.dp}, {"tp", &out.tp}, {"pp", &out.pp},
                         {"node", &out.node}}) {
    if (const JsonValue* v = rank.Find(key); v != nullptr) {
      ASSIGN_OR_RETURN(double at, Checked(*v, Quantity::kCount, path, absl::StrCat(where, "'s \"", key, "\"")));
      if (at >= TrainOptions::kMaxRanks) {
        return NotAReport(path, absl::StrCat(where, "'s \"", key, "\" is ", at,
                                             "; tally runs at most ", TrainOptions::kMaxRanks, " ranks"));
      }
      *to = int(at);
    }
  }
  std::set<std::string> no_exact, no_seed;  // keys with a row that has no formula
  const JsonValue* traffic = rank.Find("traffic");
  if (traffic == nullptr || traffic->kind != JsonValue::Kind::kArray) {
    return NotAReport(path, where + " has no \"traffic\" array");
  }
  int64_t total = 0;
  for (const JsonValue& row : traffic->array) {
    ASSIGN_OR_RETURN(std::string group, StringAt(row, "group", path, where));
    ASSIGN_OR_RETURN(std::string op, StringAt(row, "op", path, where));
    ASSIGN_OR_RETURN(std::string phase, StringAt(row, "phase", path, where));
    const std::string key = absl::StrCat(group, " ", op, " ", phase);
    const std::string row_name = absl::StrCat(where, "'s row \"", key, "\"");
    ASSIGN_OR_RETURN(double sent, NumberAt(row, "bytes_sent", path, row_name));
    RETURN_IF_ERROR(AddCount(out.sent[key], sent, path, row_name));
    RETURN_IF_ERROR(AddCount(total, sent, path, absl::StrCat(where, "'s bytes_sent")));
    for (auto [field, into, missing] : {std::tuple{"exact_bytes_sent", &out.exact, &no_exact},
                                        {"seed_bytes_sent", &out.seed, &no_seed}}) {
      const JsonValue* v = row.Find(field);
      if (v != nullptr && v->is_number()) {
        const std::string name = absl::StrCat(row_name, "'s \"", field, "\"");
        ASSIGN_OR_RETURN(double bytes, Checked(*v, Quantity::kCount, path, name));
        RETURN_IF_ERROR(AddCount((*into)[key], bytes, path, name));
      } else {
        missing->insert(key);
      }
    }
  }
  for (const std::string& key : no_exact) out.exact.erase(key);
  for (const std::string& key : no_seed) out.seed.erase(key);
  const JsonValue* memory = rank.Find("memory");
  if (memory == nullptr || memory->kind != JsonValue::Kind::kObject) {
    return NotAReport(path, where + " has no \"memory\" object");
  }
  for (const char* category : kMemory) {
    ASSIGN_OR_RETURN(double bytes, NumberAt(*memory, category, path, where + "'s memory"));
    out.memory[category] = int64_t(bytes);
  }
  if (const JsonValue* f = rank.Find("memory_formula"); f != nullptr) {
    for (const auto& [category, v] : f->object) {
      if (!v.is_number()) continue;
      ASSIGN_OR_RETURN(double bytes, Checked(v, Quantity::kCount, path,
                                             absl::StrCat(where, "'s memory_formula \"", category, "\"")));
      out.memory_formula[category] = int64_t(bytes);
    }
  }
  if (const JsonValue* peers = rank.Find("peers"); peers != nullptr) {
    // Parsed compact: numbers only are in `numbers`; anything else is in `array`.
    if (!peers->array.empty()) return NotAReport(path, where + "'s \"peers\" holds more than numbers");
    if (peers->numbers.size() > size_t(TrainOptions::kMaxRanks)) {
      return NotAReport(path, absl::StrCat(where, "'s \"peers\" has ", peers->numbers.size(),
                                           " entries; tally runs at most ", TrainOptions::kMaxRanks, " ranks"));
    }
    out.peers.reserve(peers->numbers.size());
    for (double v : peers->numbers) {
      ASSIGN_OR_RETURN(double bytes, Checked(v, Quantity::kCount, path, where + "'s \"peers\" entry"));
      out.peers.push_back(int64_t(bytes));
    }
  }
  if (const JsonValue* spans = rank.Find("spans"); spans != nullptr) {
    for (const JsonValue& s : spans->array) {
      const JsonValue* name = s.Find("name");
      const JsonValue* start = s.Find("start_ms");
      const JsonValue* end = s.Find("end_ms");
      if (name == nullptr || start == nullptr || end == nullptr) continue;
      ASSIGN_OR_RETURN(double from, Checked(*start, Quantity::kMillis, path, where + "'s span start_ms"));
      ASSIGN_OR_RETURN(double to, Checked(*end, Quantity::kMillis, path, where + "'s span end_ms"));
      out.spans.push_back({name->string, from, to});
    }
  }
  for (auto [object, parts, into] :
       {std::tuple{"time", std::span<const char* const>(kTime), &out.time},
        {"modelled_time", std::span<const char* const>(kModelledTime), &out.modelled_time}}) {
    const JsonValue* time = rank.Find(object);
    if (time == nullptr) continue;
    for (const char* part : parts) {
      if (const JsonValue* ms = time->Find(part); ms != nullptr && ms->is_number()) {
        ASSIGN_OR_RETURN((*into)[part], Checked(*ms, Quantity::kMillis, path,
                                                absl::StrCat(where, "'s ", object, " \"", part, "\"")));
      }
    }
  }
  return out;
}

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

// The loss curve, where the report has one (not a dry run's, nor an older report's), and
// the verdict, into `run`.
absl::Status ParseLossesAndVerdict(const JsonValue& doc, const std::string& path, RunReport& run) {
  if (const JsonValue* losses = doc.Find("losses"); losses != nullptr) {
    ASSIGN_OR_RETURN(const double first, NumberAt(doc, "first_step", path, "the report"));
    run.first_step = int64_t(first);
    if (losses->kind != JsonValue::Kind::kArray) return NotAReport(path, "\"losses\" is not an array");
    for (size_t i = 0; i < losses->numbers.size(); ++i) {
      ASSIGN_OR_RETURN(const double loss, Checked(losses->numbers[i], Quantity::kLoss, path,
                                                  absl::StrCat("loss ", i)));
      run.losses.push_back(loss);
    }
    const JsonValue* val = doc.Find("val_losses");
    for (size_t i = 0; val != nullptr && i < val->array.size(); ++i) {
      const std::string where = absl::StrCat("validation loss ", i);
      ASSIGN_OR_RETURN(const double step, NumberAt(val->array[i], "step", path, where));
      ASSIGN_OR_RETURN(const double loss, NumberAt(val->array[i], "loss", path, where, Quantity::kLoss));
      run.val_losses.push_back({step, loss});
    }
  }
  if (const JsonValue* verdict = doc.Find("verdict"); verdict != nullptr) {
    const JsonValue* bound = verdict->Find("bound");
    ASSIGN_OR_RETURN(const double share, NumberAt(*verdict, "exposed_share", path, "the verdict",
                                                  Quantity::kShare));
    ASSIGN_OR_RETURN(const double rank, NumberAt(*verdict, "rank", path, "the verdict"));
    if (bound == nullptr || (bound->string != "compute" && bound->string != "communication")) {
      return NotAReport(path, "the verdict's \"bound\" is not compute or communication");
    }
    run.verdict = absl::StrFormat("%s-bound on the modelled clock: %.0f%% of rank %d's step exposed",
                                  bound->string, 100 * share, int64_t(rank));
  }
  return absl::OkStatus();
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
    for (const char* part : kTime) {
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

}  // namespace

absl::StatusOr<RunReport> ParseRunReport(std::string_view text, const std::string& path) {
  // tally_train's log lines may come first: the report is the line that opens an object.
  size_t start = 0;
  while (start < text.size() && text[start] != '{') {
    const size_t line_end = text.find('\n', start);
    if (line_end == std::string_view::npos) {
      start = text.size();
      break;
    }
    start = line_end + 1;
  }
  if (start >= text.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(kWho, " ", path, " is not JSON: no line starts with '{'"));
  }
  absl::StatusOr<JsonValue> doc = ParseJson(text.substr(start), JsonArrays::kCompactNumbers);
  if (!doc.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(kWho, " ", path, " is not JSON: ", doc.status().message()));
  }
  const JsonValue* config = doc->Find("config");
  const JsonValue* ranks = doc->Find("ranks");
  if (doc->kind != JsonValue::Kind::kObject || config == nullptr ||
      config->kind != JsonValue::Kind::kObject || ranks == nullptr ||
      ranks->kind != JsonValue::Kind::kArray || ranks->array.empty()) {
    return NotAReport(path, "no \"config\" object and \"ranks\" array");
  }
  RunReport run;
  run.path = path;
  for (const auto& [key, value] : config->object) run.config[key] = AsText(value);
  ASSIGN_OR_RETURN(double steps, NumberAt(*doc, "steps", path, "the report"));
  run.steps = int64_t(steps);
  RETURN_IF_ERROR(ParseLossesAndVerdict(*doc, path, run));
  if (ranks->array.size() > size_t(TrainOptions::kMaxRanks)) {
    return NotAReport(path, absl::StrCat(ranks->array.size(), " ranks; tally runs at most ",
                                         TrainOptions::kMaxRanks));
  }
  for (size_t i = 0; i < ranks->array.size(); ++i) {
    ASSIGN_OR_RETURN(RunReport::Rank rank, ParseRank(ranks->array[i], path, i));
    run.ranks.push_back(std::move(rank));
  }
  return run;
}

absl::StatusOr<RunReport> ReadRunReport(const std::string& path) {
  RETURN_IF_ERROR(CheckInputFile(path, absl::StrCat(kWho, " ", path), int64_t(1) << 30).status());
  std::ifstream file(path, std::ios::binary);
  if (!file) return absl::NotFoundError(absl::StrCat(kWho, " cannot open ", path));
  std::string text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  return ParseRunReport(text, path);
}

absl::StatusOr<Comparison> Compare(const std::vector<RunReport>& runs) {
  if (runs.empty()) return absl::InvalidArgumentError(absl::StrCat(kWho, " no runs to compare"));
  Comparison c;
  c.models_differ = ModelsDiffer(runs);
  // Labels: the keys whose values differ, in the config's (alphabetical) order.
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
    std::vector<std::string> parts;
    for (const std::string& key : differing) {
      auto it = runs[i].config.find(key);
      parts.push_back(absl::StrCat(key, "=", it == runs[i].config.end() ? "(none)" : it->second));
    }
    c.paths.push_back(runs[i].path);
    if (runs.size() == 1) {  // nothing differs: the run's grid names it
      for (const char* key : {"dp", "tp", "pp", "zero"}) {
        auto it = runs[i].config.find(key);
        if (it != runs[i].config.end()) parts.push_back(absl::StrCat(key, "=", it->second));
      }
    }
    c.labels.push_back(parts.empty() ? absl::StrCat("run ", i + 1) : absl::StrJoin(parts, " "));
  }

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
  for (const char* category : kMemory) {
    add_row("memory", category, [&](const RunReport::Rank& r) { return Lookup(r.memory, category); });
  }
  for (const char* part : kTime) {
    add_row(Comparison::kMeasured, part,
            [&](const RunReport::Rank& r) { return Lookup(r.time, part); });
  }
  for (const char* part : kModelledTime) {
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

}  // namespace tally::train
