// The default report as a user meets it: a step's traffic with a layer's rows folded, the
// run's phases one line each, and a summary of at most 25 lines of at most 100
// characters whose figures are the JSON report's; every table with --report=full; the
// modelled cluster's table only with --cluster; one rank reports too.
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "core/runtime/json_reader.h"
#include "tests/e2e/run_command.h"

namespace tally {
namespace {

const std::string kTrain = TALLY_TRAIN_BINARY;
const std::string kGrid =
    " --n_layer=2 --n_head=2 --n_embd=64 --seq_len=32 --threads=1 --dp=2 --tp=2 --pp=2 --zero=1 "
    "--sequence_parallel --global_batch_size=8 --micro_batch_size=2 --steps=2 --eval_every=2 "
    "--sample_bytes=0";

// The lines of `output` from the first that starts with `first` on.
std::vector<std::string> LinesFrom(const std::string& output, const std::string& first) {
  std::vector<std::string> lines;
  bool in = false;
  for (const absl::string_view line : absl::StrSplit(output, '\n')) {
    in = in || absl::StartsWith(line, first);
    if (in && !line.empty()) lines.push_back(std::string(line));
  }
  return lines;
}

// The bytes world rank r sent a step in `group`'s training phases, from the JSON report.
double GroupBytesPerStep(const JsonValue& report, const std::string& group, size_t r) {
  double sent = 0;
  for (const JsonValue& row : report.Find("ranks")->array[r].Find("traffic")->array) {
    const std::string& phase = row.Find("phase")->string;
    if (row.Find("group")->string != group || phase == "setup" || phase == "eval" ||
        phase == "checkpoint") {
      continue;
    }
    sent += row.Find("bytes_sent")->number;
  }
  return sent / double(report.Find("steps")->AsInt());
}

TEST(Summary, TheDefaultReportIsAFoldedStepAndAShortSummaryOfTheJsonsFigures) {
  const std::string json = Temp("summary.json");
  const Result r = RunCommand(kTrain + kGrid + " --traffic_json=" + json);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::vector<std::string> report = LinesFrom(r.output, "traffic per step");
  ASSERT_FALSE(report.empty()) << r.output;
  for (const std::string& line : report) EXPECT_LE(line.size(), 100u) << line;
  const std::vector<std::string> summary = LinesFrom(r.output, "summary of 2 steps");
  EXPECT_LE(summary.size(), 25u) << r.output;
  EXPECT_GE(summary.size(), 10u) << r.output;

  // A layer's rows are one row; evaluation is one line; no modelled-cluster table.
  EXPECT_TRUE(absl::StrContains(r.output, "layer0-1.attn,mlp")) << r.output;
  EXPECT_FALSE(absl::StrContains(r.output, "layer0.attn")) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "\nevaluation, over the run: ")) << r.output;
  EXPECT_FALSE(absl::StrContains(r.output, "time on a modelled cluster")) << r.output;
  EXPECT_FALSE(absl::StrContains(r.output, "traffic over 2 steps")) << r.output;  // the full table
  // Every group's bytes equal their exact formula, and so does the memory.
  for (const char* group : {"dp", "tp", "pp", "embedding"}) {
    const std::regex row(std::string("\n  ") + group + " +([0-9]+(?:\\.[0-9]+)?)(\\.\\.([0-9]+(?:\\.[0-9]+)?))? (B|KiB|MiB)  exact =");
    std::smatch m;
    ASSERT_TRUE(std::regex_search(r.output, m, row)) << group << "\n" << r.output;
    // The largest figure is the busiest rank's bytes a step, in the unit shown.
    const JsonValue doc = ReadJson(json);
    double most = 0;
    for (size_t rank = 0; rank < 8; ++rank) most = std::max(most, GroupBytesPerStep(doc, group, rank));
    const double unit = m[4] == "MiB" ? 1 << 20 : m[4] == "KiB" ? 1 << 10 : 1;
    const double shown = std::stod(m[3].matched ? m[3].str() : m[1].str()) * unit;
    EXPECT_NEAR(shown, most, 0.006 * most) << group << "\n" << r.output;
  }
  EXPECT_TRUE(absl::StrContains(r.output, "the memory formula equals the ledger's peaks on every rank"))
      << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "\npipeline bubble (1f1b, pp=2, m=2; the idlest stage): "
                                          "theory 0.333, modelled "))
      << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "\nstep, modelled: ")) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "\nstep, measured on this host: ")) << r.output;
  EXPECT_TRUE(std::regex_search(r.output, std::regex("\nverdict: (compute|communication)-bound on the "
                                                     "modelled clock, [0-9]+% of rank [0-7]'s step")))
      << r.output;
}

TEST(Summary, FullPrintsEveryTableAndAClusterAddsItsModelledTable) {
  const Result full = RunCommand(kTrain + kGrid + " --report=full");
  ASSERT_EQ(full.exit_code, 0) << full.output;
  EXPECT_TRUE(absl::StrContains(full.output, "traffic over 2 steps")) << full.output;
  EXPECT_TRUE(absl::StrContains(full.output, "layer0.attn")) << full.output;
  EXPECT_TRUE(absl::StrContains(full.output, "\nmemory per rank, peak bytes")) << full.output;
  EXPECT_FALSE(absl::StrContains(full.output, "summary of 2 steps")) << full.output;

  const Result h100 = RunCommand(kTrain + kGrid + " --cluster=h100");
  ASSERT_EQ(h100.exit_code, 0) << h100.output;
  EXPECT_TRUE(absl::StrContains(h100.output, "time on a modelled cluster")) << h100.output;
  EXPECT_TRUE(absl::StrContains(h100.output, "  the cluster: h100")) << h100.output;
}

// The serial run reports as every run does: its JSON on one rank, a summary with no bytes.
TEST(Summary, OneRankWritesTheReportJsonAndASummary) {
  const std::string json = Temp("one_rank.json");
  const Result r = RunCommand(kTrain + " --n_layer=2 --n_head=2 --n_embd=64 --seq_len=32 "
                                       "--threads=1 --global_batch_size=4 --steps=2 "
                                       "--eval_every=0 --sample_bytes=0 --traffic_json=" + json);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "\nsummary of 2 steps: dp=1 x tp=1 x pp=1")) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "none (one rank talks to nobody)")) << r.output;
  const JsonValue doc = ReadJson(json);
  ASSERT_EQ(doc.Find("ranks")->array.size(), 1u);
  EXPECT_EQ(doc.Find("config")->Find("world")->AsInt(), 1);
  EXPECT_GT(doc.Find("ranks")->array[0].Find("memory")->Find("peak_total")->AsInt(), 0);

  const Result printed = RunCommand(kTrain + " --n_layer=2 --n_head=2 --n_embd=64 --seq_len=32 "
                                             "--threads=1 --global_batch_size=4 --steps=1 "
                                             "--eval_every=0 --sample_bytes=0 --report=json 2>/dev/null");
  ASSERT_EQ(printed.exit_code, 0) << printed.output;
  EXPECT_TRUE(absl::StrContains(printed.output, "\"ranks\"")) << printed.output;
}

}  // namespace
}  // namespace tally
