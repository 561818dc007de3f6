// The report page (lab/report/page.h) as a browser sees it: a small 3D run's page and a
// comparison's, loaded in headless Chromium, have the charts and the exact byte counts in
// their DOM and log nothing to the console; a screenshot of each is written next to the
// test's output for a person to look at. Skipped, saying why, where Chromium cannot start
// (scripts/setup.sh installs Debian's chromium).
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "core/runtime/json_reader.h"
#include "tests/e2e/run_command.h"

namespace tally {
namespace {

const std::string kTrain = TALLY_TRAIN_BINARY;
const std::string kCompare = TALLY_COMPARE_BINARY;
const std::string kTiny =
    " --n_layer=2 --n_head=2 --n_embd=32 --seq_len=32 --threads=1 --steps=2 --eval_every=0 "
    "--sample_bytes=0";

// The browser's command, or "" with the reason in `why`.
std::string Chromium(std::string* why) {
  for (const char* name : {"chromium", "chromium-browser", "google-chrome"}) {
    Result which = RunCommand(absl::StrCat("command -v ", name));
    if (which.exit_code != 0) continue;
    std::string path = which.output.substr(0, which.output.find('\n'));
    // As root (CI) the sandbox cannot start; the page runs no script either way.
    const std::string command =
        path + " --headless --no-sandbox --disable-gpu --disable-dev-shm-usage "
               "--no-first-run --disable-extensions --enable-logging=stderr --v=0";
    Result probe = RunCommand(command + " --dump-dom about:blank");
    if (probe.exit_code == 0 && absl::StrContains(probe.output, "<html")) return command;
    *why = absl::StrCat(path, " does not start headless: ", probe.output.substr(0, 300));
    return "";
  }
  *why = "no chromium on PATH (scripts/setup.sh installs Debian's chromium)";
  return "";
}

// The page's DOM as Chromium built it, and what it logged.
struct Loaded {
  std::string dom, log;
};
Loaded Load(const std::string& chromium, const std::string& page, const std::string& screenshot) {
  const std::string log_file = page + ".log";
  Loaded out;
  Result dom = RunCommand(chromium + " --dump-dom file://" + page + " 2> " + log_file);
  EXPECT_EQ(dom.exit_code, 0) << dom.output;
  out.dom = dom.output;
  std::ifstream in(log_file);
  out.log.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  Result shot = RunCommand(chromium + " --window-size=1400,3000 --hide-scrollbars --screenshot=" +
                           screenshot + " file://" + page);
  EXPECT_EQ(shot.exit_code, 0) << shot.output;
  std::printf("screenshot: %s\n", screenshot.c_str());
  return out;
}

// The busiest rank's bytes sent under group × op × phase, from a run's JSON.
int64_t Busiest(const std::string& json, const std::string& group, const std::string& op,
                const std::string& phase) {
  int64_t most = 0;
  const JsonValue doc = ReadJson(json);
  for (const JsonValue& rank : doc.Find("ranks")->array) {
    int64_t sent = 0;
    for (const JsonValue& row : rank.Find("traffic")->array) {
      if (row.Find("group")->string == group && row.Find("op")->string == op &&
          row.Find("phase")->string == phase) {
        sent += row.Find("bytes_sent")->AsInt();
      }
    }
    most = std::max(most, sent);
  }
  return most;
}

int Count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

std::string OutputDir() {
  char cwd[4096];
  return getcwd(cwd, sizeof(cwd)) != nullptr ? std::string(cwd) : ::testing::TempDir();
}

TEST(ReportPage, A3DRunAndAComparisonInChromium) {
  std::string why;
  const std::string chromium = Chromium(&why);
  if (chromium.empty()) GTEST_SKIP() << why;
  const std::string dir = ::testing::TempDir();
  // Names of this test's own: other tests run at the same time in the same directory.
  const std::string page = dir + "/page_run3d.html", json = dir + "/page_run3d.json";
  Result run = RunCommand(kTrain + kTiny +
                          " --dp=2 --tp=2 --pp=2 --zero=1 --global_batch_size=8 "
                          "--micro_batch_size=2 --eval_every=2 --report_html=" + page + " --traffic_json=" + json);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_TRUE(absl::StrContains(run.output, "report page written to '" + page + "'")) << run.output;

  const Loaded loaded = Load(chromium, page, OutputDir() + "/report_page_3d.png");
  const std::string& dom = loaded.dom;
  // The answer first, then the loss, then the details, in that order.
  size_t last = 0;
  for (const char* section : {"answer", "loss", "config", "grid", "traffic", "memory", "time",
                              "peers", "pipeline"}) {
    const size_t at = dom.find(absl::StrCat("<section id=\"", section, "\">"));
    ASSERT_NE(at, std::string::npos) << section;
    EXPECT_GT(at, last) << section;
    last = at;
  }
  // The answer's bytes a step, a segment a group.
  EXPECT_TRUE(absl::StrContains(dom, "class=\"bar answer-bytes\" data-run=\"dp=2 tp=2 pp=2 zero=1\" "
                                     "data-part=\"dp\"")) << "the answer's dp segment";
  for (const char* part : {"tp", "pp", "embedding"}) {
    EXPECT_TRUE(absl::StrContains(dom, absl::StrCat("class=\"bar answer-bytes\" data-run=\"dp=2 tp=2 pp=2 "
                                                    "zero=1\" data-part=\"", part, "\"")))
        << part;
  }
  EXPECT_EQ(Count(dom, "class=\"bar answer-memory\""), 5);
  EXPECT_EQ(Count(dom, "class=\"bar answer-time\""), 3);
  EXPECT_TRUE(absl::StrContains(dom, "-bound on the modelled clock: ")) << "the verdict";
  // The loss curve: a line of the run's steps and a circle an evaluation.
  EXPECT_EQ(Count(dom, "class=\"loss\""), 1);
  EXPECT_GE(Count(dom, "class=\"val-loss\""), 1);
  // The grid as a picture, a cell a rank; its table folded.
  EXPECT_EQ(Count(dom, "class=\"rank\""), 8);
  EXPECT_TRUE(absl::StrContains(dom, "<details><summary>every rank's coordinates</summary>"));
  // The dp group's reduce-scatter: its measured bar carries the busiest rank's bytes, and
  // the exact formula's bar the same number.
  const int64_t scatter = Busiest(json, "dp", "reduce_scatter", "backward");
  ASSERT_GT(scatter, 0);
  const std::string run1 = "dp=2 tp=2 pp=2 zero=1";
  EXPECT_TRUE(absl::StrContains(dom, "<title>tally report: " + run1 + "</title>"));
  const std::string bar = absl::StrCat("class=\"bar measured\" data-row=\"dp reduce_scatter backward\" "
                                       "data-run=\"", run1, "\" data-bytes=\"", scatter, "\"");
  EXPECT_TRUE(absl::StrContains(dom, bar)) << bar;
  EXPECT_TRUE(absl::StrContains(dom, "dp reduce_scatter backward · " + run1 + " · measured: "))
      << "the bar's title";
  EXPECT_TRUE(absl::StrContains(dom, absl::StrCat("(", scatter, " B)</title>")));
  EXPECT_TRUE(absl::StrContains(
      dom, absl::StrCat("class=\"bar exact\" data-row=\"dp reduce_scatter backward\" data-run=\"",
                        run1, "\" data-bytes=\"", scatter, "\"")));
  // tp's all-reduces and the pipeline's sends have rows too, in their own colours.
  EXPECT_TRUE(absl::StrContains(dom, "data-row=\"tp all_reduce forward\"")) << "tp rows";
  EXPECT_TRUE(absl::StrContains(dom, "fill=\"#E69F00\"")) << "tp's orange";
  EXPECT_TRUE(absl::StrContains(dom, "fill=\"#0072B2\"")) << "dp's blue";
  // Every rank's memory (5 categories) and time (3 parts), the 8 × 8 peers, the schedule.
  EXPECT_EQ(Count(dom, "class=\"bar memory\""), 8 * 5);
  EXPECT_EQ(Count(dom, "class=\"formula\""), 8);
  EXPECT_GE(Count(dom, "class=\"bar time\""), 8 * 3);
  EXPECT_EQ(Count(dom, "class=\"peer\""), 64);
  EXPECT_GE(Count(dom, "class=\"span\""), 8 * 2 * 2);  // 2 micro-batches each way, at least
  EXPECT_TRUE(absl::StrContains(dom, ">KiB<") || absl::StrContains(dom, ">MiB<")) << "axis units";
  EXPECT_FALSE(absl::StrContains(loaded.log, "CONSOLE")) << loaded.log;

  // ZeRO-1 against ZeRO-3, side by side.
  const std::string z1 = dir + "/page_z1.json", z3 = dir + "/page_z3.json";
  const std::string both = dir + "/page_compare.html";
  ASSERT_EQ(RunCommand(kTrain + kTiny + " --dp=4 --zero=1 --traffic_json=" + z1).exit_code, 0);
  ASSERT_EQ(RunCommand(kTrain + kTiny + " --dp=4 --zero=3 --traffic_json=" + z3).exit_code, 0);
  Result compared = RunCommand(kCompare + " --html=" + both + " " + z1 + " " + z3);
  ASSERT_EQ(compared.exit_code, 0) << compared.output;
  EXPECT_TRUE(absl::StrContains(compared.output, "report page written to '" + both + "'")) << compared.output;
  const Loaded side = Load(chromium, both, OutputDir() + "/report_page_compare.png");
  EXPECT_TRUE(absl::StrContains(side.dom, "<title>tally comparison: zero=1 vs zero=3</title>"));
  EXPECT_TRUE(absl::StrContains(side.dom, absl::StrCat(
      "data-row=\"dp reduce_scatter backward\" data-run=\"zero=3\" data-bytes=\"",
      Busiest(z3, "dp", "reduce_scatter", "backward"), "\"")));
  EXPECT_TRUE(absl::StrContains(side.dom, "data-row=\"dp all_gather forward\" data-run=\"zero=3\""));
  EXPECT_EQ(Count(side.dom, "class=\"peer\""), 2 * 16);
  EXPECT_EQ(Count(side.dom, "<tr class=\"differs\"><td>zero</td>"), 1);
  // Only the keys that differ are shown; the rest are folded.
  EXPECT_TRUE(absl::StrContains(side.dom, "(the same in every run)</summary>"));
  EXPECT_EQ(Count(side.dom, "class=\"bar answer-bytes\""), 2);  // dp alone, in each run
  EXPECT_FALSE(absl::StrContains(side.log, "CONSOLE")) << side.log;
}

}  // namespace
}  // namespace tally
