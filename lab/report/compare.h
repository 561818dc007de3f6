// tally_compare: runs side by side, from the JSON tally_train writes (--report=json or
// --traffic_json; a dry run's too).
//
//   ASSIGN_OR_RETURN(RunReport a, ReadRunReport("zero1.json"));
//   ASSIGN_OR_RETURN(RunReport b, ReadRunReport("zero3.json"));
//   ASSIGN_OR_RETURN(Comparison c, Compare({a, b}));
//   std::cout << ComparisonText(c);
//
// Rows, in four sections:
//   traffic  per group × primitive × phase (summed over algorithms and scopes, so that a
//            ring and a naive run line up): the bytes a rank sent over the run, min..max
//            over the ranks that sent any; and "total", all of a rank's bytes;
//   memory   per category (params, grads, optimizer, activations, comm, peak_total): the
//            peak bytes a rank held, min..max over the ranks;
//   time_measured  per part of a step on the measured clock (step_ms, compute_ms,
//            comm_exposed_ms, comm_hidden_ms, idle_ms), min..max over the ranks, where the
//            JSON has it (a dry run has none); its ratios to two significant figures;
//   time_modelled  the same on the modelled clock (step_ms, compute_ms, comm_exposed_ms,
//            comm_waiting_ms, idle_ms of the last step replayed; report.h's ModelledRun).
// Each run's cell is next to its ratio to the first run: the largest value (the busiest
// rank) over the first run's largest. Runs are named by the configuration keys whose values
// differ between them ("dp=4 zero=1"; one run by its dp, tp, pp and zero); runs of
// different models are refused.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace tally::report {

// What tally_compare's messages start with.
inline constexpr char kCompareWho[] = "[tally_compare]";

// The figures of a rank's report entry that are read and compared: its peak memory by
// category, and its step's parts on each clock.
inline constexpr const char* kReportMemory[] = {"params", "grads", "optimizer", "activations",
                                                "comm", "peak_total"};
inline constexpr const char* kReportTime[] = {"step_ms", "compute_ms", "comm_exposed_ms",
                                              "comm_hidden_ms", "idle_ms"};
inline constexpr const char* kReportModelledTime[] = {"step_ms", "compute_ms", "comm_exposed_ms",
                                                      "comm_waiting_ms", "idle_ms"};

struct RunReport {
  std::string path;
  std::map<std::string, std::string> config;  // every key of "config", its value as text
  int64_t steps = 0;
  // The training loss of each step from first_step, and the validation losses (step,
  // loss); empty in a dry run's report.
  int64_t first_step = 1;
  std::vector<double> losses;
  std::vector<std::pair<double, double>> val_losses;
  // The seed's test on the modelled clock, one line ("" where the report has none).
  std::string verdict;
  struct Rank {
    int dp = 0, tp = 0, pp = 0, node = 0;   // where the rank sat in the grid
    std::map<std::string, int64_t> sent;    // "group op phase" -> bytes sent
    // The same by the exact formula and by the seed's, for the keys whose every row has one.
    std::map<std::string, int64_t> exact, seed;
    std::map<std::string, int64_t> memory;  // category -> peak bytes
    std::map<std::string, int64_t> memory_formula;  // params, grads, optimizer(, activations)
    std::map<std::string, double> time;     // part of a step -> ms, measured (empty: none)
    std::map<std::string, double> modelled_time;  // the same, modelled (empty: none written)
    std::vector<int64_t> peers;             // bytes sent to each rank (empty: none written)
    struct Span {
      std::string name;  // "forward 3"
      double start_ms = 0, end_ms = 0;
    };
    std::vector<Span> spans;  // the last step's (empty: none recorded)
  };
  std::vector<Rank> ranks;
};

// Reading and checking a report (lab/report/reader.cc).
// The report in `text` (`path` names it in errors). The text may start with tally_train's
// log lines, as `tally_train --report=json > FILE` writes it: the report is the object on
// the first line that starts with '{'.
absl::StatusOr<RunReport> ParseRunReport(std::string_view text, const std::string& path);
absl::StatusOr<RunReport> ReadRunReport(const std::string& path);

struct Comparison {
  // The sections of the two clocks' rows.
  static constexpr const char* kMeasured = "time_measured";
  static constexpr const char* kModelled = "time_modelled";
  struct Cell {
    bool present = false;
    double min = 0, max = 0;
    std::optional<double> ratio;  // max / the first run's max, where both are present and > 0
  };
  struct Row {
    std::string section;  // "traffic", "memory", "time_measured", "time_modelled"
    std::string key;      // "dp all_reduce backward", "params", "step_ms"
    std::vector<Cell> cells;  // one per run
  };
  std::vector<std::string> paths;
  std::vector<std::string> labels;  // "dp=4 zero=1", ...: the keys that differ
  // Where the runs' models differ, one line naming each model key that does and its
  // values ("n_layer 2 / 4"); "" for runs of one model.
  std::string models_differ;
  std::vector<Row> rows;
  // Runs of one configuration (the same config and steps), given more than once: the
  // measured clock's noise, per part of a step: the busiest rank's figure of each run,
  // min, median and max over the runs (the median of an even count is the mean of the
  // middle two).
  struct Repeats {
    std::vector<size_t> runs;  // indices into paths and labels, two or more
    struct Spread {
      std::string key;  // "step_ms", ...
      double min = 0, median = 0, max = 0;
    };
    std::vector<Spread> time;
  };
  std::vector<Repeats> repeats;
};

// At least one run. Runs of different models compare too (models_differ says how).
absl::StatusOr<Comparison> Compare(const std::vector<RunReport>& runs);

std::string ComparisonText(const Comparison& c);
// One line per row and run: section,key,run,label,min,max,ratio (empty where absent).
std::string ComparisonCsv(const Comparison& c);
// {"runs": [{"path", "label"}], "models_differ" (where they do), "rows": [{"section", "key", "cells": [{"present", "min",
// "max", "ratio"}]}], "repeats": [{"runs": [run index], "time": [{"key", "min", "median",
// "max"}]}]}: min and max where present, ratio where there is one.
std::string ComparisonJson(const Comparison& c);

}  // namespace tally::report
