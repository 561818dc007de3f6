// tally_compare: runs side by side, from the JSON tally_train writes (lab/report/compare.h).
//
//   tally_train --dp=4 --zero=1 --steps=10 --traffic_json=zero1.json
//   tally_train --dp=4 --zero=3 --steps=10 --traffic_json=zero3.json
//   tally_compare zero1.json zero3.json            traffic, memory and time, with ratios
//   tally_compare --csv zero1.json zero3.json      the same rows for machines
//   tally_compare --json zero1.json zero3.json
//   tally_compare --html=zero.html zero1.json zero3.json   also the page (lab/report/page.h)
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "examples/example_main.h"
#include "lab/report/compare.h"
#include "lab/report/page.h"
#include "core/runtime/files.h"
#include "core/runtime/json_writer.h"
#include "core/runtime/status_macros.h"

ABSL_FLAG(bool, csv, false, "print the rows as CSV (section,key,run,label,min,max,ratio)");
ABSL_FLAG(bool, json, false, "print the comparison as JSON");
ABSL_FLAG(std::string, html, "",
          "also write the runs side by side as one self-contained HTML page here");

namespace tally {
namespace {

absl::Status Main(const std::vector<std::string>& files) {
  if (files.empty()) {
    return absl::InvalidArgumentError(
        "[tally_compare] name the runs' JSON files: tally_compare A.json B.json [more...] "
        "(tally_train --report=json or --traffic_json=FILE writes them)");
  }
  if (absl::GetFlag(FLAGS_csv) && absl::GetFlag(FLAGS_json)) {
    return absl::InvalidArgumentError("[tally_compare] --csv or --json, not both");
  }
  const std::string html = absl::GetFlag(FLAGS_html);
  if (!html.empty()) {
    RETURN_IF_ERROR(CheckOutputFile(html, "[tally_compare] --html"));
    for (const std::string& file : files) {
      if (!SameFile(html, file)) continue;
      return absl::InvalidArgumentError(absl::StrCat(
          "[tally_compare] --html='", html, "' and the input '", file,
          "' are one file: the page would replace the run it reads; give the page a path of its own"));
    }
  }
  std::vector<report::RunReport> runs;
  for (const std::string& file : files) {
    ASSIGN_OR_RETURN(report::RunReport run, report::ReadRunReport(file));
    runs.push_back(std::move(run));
  }
  ASSIGN_OR_RETURN(report::Comparison c, report::Compare(runs));
  const std::string out = absl::GetFlag(FLAGS_csv)    ? report::ComparisonCsv(c)
                          : absl::GetFlag(FLAGS_json) ? report::ComparisonJson(c)
                                                      : report::ComparisonText(c);
  std::fwrite(out.data(), 1, out.size(), stdout);
  if (!html.empty()) {
    RETURN_IF_ERROR(WriteTextFile(html, report::ReportPage(runs, c)));
    // On stderr: standard output stays the comparison alone (--json, --csv).
    std::fprintf(stderr, "report page written to '%s' (open it in a browser)\n", html.c_str());
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace tally

int main(int argc, char** argv) {
  return tally::RunExampleWithArguments(
      argc, argv, "runs side by side: tally_compare A.json B.json [more...] [--csv | --json]",
      tally::Main);
}
