// Reading a tally_train report (--traffic_json, --report=json) for tally_compare and the
// page: every number checked to be one tally could have written, every string UTF-8.
#include "lab/report/compare.h"

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
#include "core/runtime/files.h"
#include "core/runtime/json_reader.h"
#include "core/runtime/status_macros.h"
#include "core/train/options.h"

namespace tally::report {
namespace {


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
      kCompareWho, " ", path, " is not a tally_train report (--report=json or --traffic_json): ", why));
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
      if (at >= train::ParallelOptions::kMaxRanks) {
        return NotAReport(path,
                          absl::StrCat(where, "'s \"", key, "\" is ", at, "; tally runs at most ",
                                       train::ParallelOptions::kMaxRanks, " ranks"));
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
  for (const char* category : kReportMemory) {
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
    if (peers->numbers.size() > size_t(train::ParallelOptions::kMaxRanks)) {
      return NotAReport(path, absl::StrCat(where, "'s \"peers\" has ", peers->numbers.size(),
                                           " entries; tally runs at most ",
                                           train::ParallelOptions::kMaxRanks, " ranks"));
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
       {std::tuple{"time", std::span<const char* const>(kReportTime), &out.time},
        {"modelled_time", std::span<const char* const>(kReportModelledTime), &out.modelled_time}}) {
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
        absl::StrCat(kCompareWho, " ", path, " is not JSON: no line starts with '{'"));
  }
  absl::StatusOr<JsonValue> doc = ParseJson(text.substr(start), JsonArrays::kCompactNumbers);
  if (!doc.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(kCompareWho, " ", path, " is not JSON: ", doc.status().message()));
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
  if (ranks->array.size() > size_t(train::ParallelOptions::kMaxRanks)) {
    return NotAReport(path, absl::StrCat(ranks->array.size(), " ranks; tally runs at most ",
                                         train::ParallelOptions::kMaxRanks));
  }
  for (size_t i = 0; i < ranks->array.size(); ++i) {
    ASSIGN_OR_RETURN(RunReport::Rank rank, ParseRank(ranks->array[i], path, i));
    run.ranks.push_back(std::move(rank));
  }
  return run;
}

absl::StatusOr<RunReport> ReadRunReport(const std::string& path) {
  RETURN_IF_ERROR(CheckInputFile(path, absl::StrCat(kCompareWho, " ", path), int64_t(1) << 30).status());
  std::ifstream file(path, std::ios::binary);
  if (!file) return absl::NotFoundError(absl::StrCat(kCompareWho, " cannot open ", path));
  std::string text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  return ParseRunReport(text, path);
}
}  // namespace tally::report
