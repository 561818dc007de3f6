// tally_compare's outputs (compare.h): the text tables, the CSV and the JSON of a
// Comparison.
#include <algorithm>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "lab/report/compare.h"
#include "core/runtime/json_writer.h"

namespace tally::report {
namespace {

// Bytes as the cell shows them: whole numbers; milliseconds to 3 decimals (the modelled
// clock's to 4: a small model's step on a cluster is a fraction of a millisecond).
std::string Figure(const std::string& section, double v) {
  if (section == Comparison::kMeasured) return absl::StrFormat("%.3f", v);
  if (section == Comparison::kModelled) return absl::StrFormat("%.4f", v);
  return absl::StrCat(int64_t(v));
}

std::string CellText(const std::string& section, const Comparison::Cell& c) {
  if (!c.present) return "-";
  if (c.min == c.max) return Figure(section, c.max);
  return absl::StrCat(Figure(section, c.min), "..", Figure(section, c.max));
}

// Exact figures (bytes, memory, the modelled clock) to four decimals; the measured clock's
// to two significant figures, all that its noise leaves.
std::string RatioText(const std::string& section, const Comparison::Cell& c) {
  if (!c.ratio.has_value()) return "-";
  return section == Comparison::kMeasured ? absl::StrFormat("%.2g", *c.ratio)
                                          : absl::StrFormat("%.4f", *c.ratio);
}

std::string CsvField(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string quoted = "\"";
  for (char ch : s) {
    if (ch == '"') quoted += '"';
    quoted += ch;
  }
  return quoted + "\"";
}

}  // namespace

std::string ComparisonText(const Comparison& c) {
  std::ostringstream out;
  for (size_t i = 0; i < c.labels.size(); ++i) {
    out << "run " << i + 1 << ": " << c.labels[i] << "  (" << c.paths[i] << ")\n";
  }
  if (!c.models_differ.empty()) out << c.models_differ << "\n";
  static const std::map<std::string, std::string> kTitles = {
      {"traffic", "traffic: bytes sent per rank over the run, min..max over the ranks that sent any"},
      {"memory", "memory: peak bytes per rank, min..max over the ranks"},
      {Comparison::kMeasured,
       "time, measured on the host that ran each run (noisy: ratios to two significant figures): "
       "ms per step, min..max over the ranks"},
      {Comparison::kModelled,
       "time, modelled (the last step replayed on each run's modelled cluster: the same on every "
       "host): ms, min..max over the ranks"}};
  for (const char* section : {"traffic", "memory", Comparison::kMeasured, Comparison::kModelled}) {
    std::vector<const Comparison::Row*> rows;
    for (const Comparison::Row& row : c.rows) {
      if (row.section == section) rows.push_back(&row);
    }
    if (rows.empty()) continue;
    // Columns: the key, then per run its cell and (after the first) its ratio.
    size_t key_width = 3;
    std::vector<size_t> width(c.labels.size());
    for (size_t i = 0; i < c.labels.size(); ++i) width[i] = c.labels[i].size();
    for (const Comparison::Row* row : rows) {
      key_width = std::max(key_width, row->key.size());
      for (size_t i = 0; i < row->cells.size(); ++i) {
        width[i] = std::max(width[i], CellText(row->section, row->cells[i]).size());
      }
    }
    out << "\n" << kTitles.at(section) << "; ratio: the busiest rank against run 1's\n";
    out << absl::StrFormat("%-*s", int(key_width), "row");
    for (size_t i = 0; i < c.labels.size(); ++i) {
      out << "  " << absl::StrFormat("%*s", int(width[i]), c.labels[i]);
      if (i > 0) out << absl::StrFormat("  %8s", "ratio");
    }
    out << "\n";
    for (const Comparison::Row* row : rows) {
      out << absl::StrFormat("%-*s", int(key_width), row->key);
      for (size_t i = 0; i < row->cells.size(); ++i) {
        out << "  " << absl::StrFormat("%*s", int(width[i]), CellText(row->section, row->cells[i]));
        if (i > 0) out << absl::StrFormat("  %8s", RatioText(row->section, row->cells[i]));
      }
      out << "\n";
    }
  }
  for (const Comparison::Repeats& group : c.repeats) {
    std::vector<std::string> names;
    for (const size_t r : group.runs) names.push_back(absl::StrCat(r + 1));
    out << "\nruns " << absl::StrJoin(names, ", ")
        << " are one configuration: measured ms per step of the busiest rank, "
           "min..median..max over the runs\n";
    for (const Comparison::Repeats::Spread& x : group.time) {
      out << absl::StrFormat("%-16s %.1f..%.1f..%.1f\n", x.key, x.min, x.median, x.max);
    }
  }
  return out.str();
}

std::string ComparisonCsv(const Comparison& c) {
  std::string out = "section,key,run,label,min,max,ratio\n";
  for (const Comparison::Row& row : c.rows) {
    for (size_t i = 0; i < row.cells.size(); ++i) {
      const Comparison::Cell& cell = row.cells[i];
      absl::StrAppend(&out, row.section, ",", CsvField(row.key), ",", i + 1, ",",
                      CsvField(c.labels[i]), ",",
                      cell.present ? Figure(row.section, cell.min) : "", ",",
                      cell.present ? Figure(row.section, cell.max) : "", ",",
                      cell.ratio.has_value() ? absl::StrFormat("%.6g", *cell.ratio) : "", "\n");
    }
  }
  return out;
}

std::string ComparisonJson(const Comparison& c) {
  JsonWriter w;
  w.BeginObject().Key("runs").BeginArray();
  for (size_t i = 0; i < c.labels.size(); ++i) {
    w.BeginObject().Key("path").String(c.paths[i]).Key("label").String(c.labels[i]).EndObject();
  }
  w.EndArray();
  if (!c.models_differ.empty()) w.Key("models_differ").String(c.models_differ);
  w.Key("rows").BeginArray();
  for (const Comparison::Row& row : c.rows) {
    w.BeginObject().Key("section").String(row.section).Key("key").String(row.key);
    w.Key("cells").BeginArray();
    for (const Comparison::Cell& cell : row.cells) {
      w.BeginObject().Key("present").Bool(cell.present);
      if (cell.present) w.Key("min").Double(cell.min).Key("max").Double(cell.max);
      if (cell.ratio.has_value()) w.Key("ratio").Double(*cell.ratio);
      w.EndObject();
    }
    w.EndArray().EndObject();
  }
  w.EndArray().Key("repeats").BeginArray();
  for (const Comparison::Repeats& group : c.repeats) {
    w.BeginObject().Key("runs").BeginArray();
    for (const size_t r : group.runs) w.Int(int64_t(r));
    w.EndArray().Key("time").BeginArray();
    for (const Comparison::Repeats::Spread& x : group.time) {
      w.BeginObject().Key("key").String(x.key).Key("min").Double(x.min);
      w.Key("median").Double(x.median).Key("max").Double(x.max).EndObject();
    }
    w.EndArray().EndObject();
  }
  w.EndArray().EndObject();
  return w.str() + "\n";
}

}  // namespace tally::report
