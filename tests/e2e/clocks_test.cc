// The report's two clocks as a user meets them: the verdict is the modelled clock's and so
// the same on every run; --slow_rank's rank is the one the others waited for, on both
// clocks; a dry run has no measured time, and stops at once on SIGTERM.
#include <sys/stat.h>

#include <fstream>
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
const std::string kQuiet = " --eval_every=0 --sample_bytes=0";

// The report's verdict: its line that starts "compute-bound" or "communication-bound".
std::string VerdictLine(const std::string& output) {
  for (const absl::string_view line : absl::StrSplit(output, '\n')) {
    if (absl::StartsWith(line, "compute-bound") || absl::StartsWith(line, "communication-bound")) {
      return std::string(line);
    }
  }
  return "";
}

// The demo's grid on 8 thread ranks of a 2-core host: its measured split follows the
// host's load, its verdict does not.
TEST(Clocks, TheDemosCommandGivesTheSameVerdictTwice) {
  const std::string demo = kTrain + " --dp=2 --tp=2 --pp=2 --zero=1 --sequence_parallel "
                                    "--schedule=1f1b --micro_batch_size=2 --steps=3 --report=full" + kQuiet;
  const Result first = RunCommand(demo), second = RunCommand(demo);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  ASSERT_EQ(second.exit_code, 0) << second.output;
  const std::string verdict = VerdictLine(first.output);
  EXPECT_TRUE(absl::StrContains(verdict, "on the modelled clock, a100, the default")) << first.output;
  EXPECT_EQ(verdict, VerdictLine(second.output));
  // The measured clock is named as such, and so is the model's.
  EXPECT_TRUE(absl::StrContains(first.output, "\nmeasured on this host (wall clock), ms per step"))
      << first.output;
  EXPECT_TRUE(absl::StrContains(first.output, "\nmodelled on the cluster a100, the default"))
      << first.output;
  EXPECT_TRUE(absl::StrContains(first.output, "\nmeasured on this host (its load moves it; the "
                                              "verdict is the model's)"))
      << first.output;
  // On a cluster given, the verdict says so.
  const Result h100 = RunCommand(demo + " --cluster=h100");
  EXPECT_TRUE(absl::StrContains(VerdictLine(h100.output), "on the modelled clock, h100:")) << h100.output;
}

// --repeat=3 runs the same configuration three times: one report (the last run's), then
// each clock's min, median and max; the modelled clock's three are one figure.
TEST(Clocks, RepeatGivesEachClocksSpreadOverTheRuns) {
  const Result run = RunCommand(kTrain + " --dp=2 --steps=2 --repeat=3 --report=full" + kQuiet);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_TRUE(absl::StrContains(run.output, "\n--repeat=3: the same run 3 times")) << run.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(run.output, m,
                                std::regex("modelled step ms \\(the default cluster\\) +([0-9.]+) +"
                                           "([0-9.]+) +([0-9.]+)")))
      << run.output;
  EXPECT_GT(std::stod(m[1]), 0);
  EXPECT_EQ(m[1], m[2]);
  EXPECT_EQ(m[2], m[3]);
  ASSERT_TRUE(std::regex_search(run.output, m,
                                std::regex("measured step ms \\(this host, slowest rank\\) +([0-9.]+) +"
                                           "([0-9.]+) +([0-9.]+)")))
      << run.output;
  EXPECT_LE(std::stod(m[1]), std::stod(m[2]));
  EXPECT_LE(std::stod(m[2]), std::stod(m[3]));
  // One report: the memory table once.
  size_t tables = 0;
  for (size_t at = run.output.find("\nmemory per rank"); at != std::string::npos;
       at = run.output.find("\nmemory per rank", at + 1)) {
    ++tables;
  }
  EXPECT_EQ(tables, 1u) << run.output;
}

// Rank 1 sleeps 20 ms at the start of every step: every other rank waits for it in the
// gradient all-reduce, and both clocks book that wait to rank 1.
TEST(Clocks, ASlowRanksPeersWaitForItOnBothClocks) {
  const std::string json = Temp("slow_rank.json");
  const Result r = RunCommand(kTrain + " --n_layer=2 --n_head=2 --n_embd=64 --seq_len=64 --dp=4 "
                                       "--threads=1 --steps=4 --slow_rank=1:20 --traffic_json=" +
                              json + kQuiet);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "--slow_rank=1:20: the other ranks waited ")) << r.output;
  const JsonValue report = ReadJson(json);
  const std::vector<JsonValue>& ranks = report.Find("ranks")->array;
  ASSERT_EQ(ranks.size(), 4u);
  double measured_total = 0;
  for (const JsonValue& rank : ranks) {
    const int64_t id = rank.Find("rank")->AsInt();
    const JsonValue& modelled = *rank.Find("modelled_time");
    const JsonValue& measured = *rank.Find("time")->Find("last_step");
    if (id == 1) {
      // The slow one computed 20 ms more on the model, and waited for nobody.
      EXPECT_GE(modelled.Find("compute_ms")->number, 20) << r.output;
      EXPECT_LT(modelled.Find("comm_waiting_ms")->number, 1e-3) << r.output;
      continue;
    }
    EXPECT_EQ(modelled.Find("waited_for_rank")->AsInt(), 1) << id << ": " << r.output;
    EXPECT_NEAR(modelled.Find("comm_waiting_ms")->number, 20, 1e-6) << id << ": " << r.output;
    EXPECT_EQ(measured.Find("waited_for_rank")->AsInt(), 1) << id << ": " << r.output;
    measured_total += measured.Find("comm_waiting_ms")->number;
  }
  // Three ranks each waited about 20 ms on this host (less where the host was slower to
  // them than to rank 1): together, at least one sleep's worth.
  EXPECT_GT(measured_total, 20) << r.output;
  const JsonValue& verdict = *report.Find("verdict");
  EXPECT_EQ(verdict.Find("clock")->string, "modelled");
  EXPECT_EQ(verdict.Find("waited_for_rank")->AsInt(), 1);
}

// A dry run's own time is that of code that computes nothing: the log and the report
// carry none of it, only the modelled clock.
TEST(Clocks, ADryRunHasOnlyTheModelledClock) {
  const std::string json = Temp("dry_clock.json");
  const Result r = RunCommand(kTrain + " --dry_run --dp=2 --pp=2 --steps=1 --traffic_json=" + json);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "step     1/1 | dry run (meta tensors: no values, no payload)\n"))
      << r.output;
  EXPECT_FALSE(absl::StrContains(r.output, "measured on this host")) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "\nstep, modelled: ")) << r.output;
  const JsonValue report = ReadJson(json);
  for (const JsonValue& rank : report.Find("ranks")->array) {
    EXPECT_EQ(rank.Find("time"), nullptr);
    EXPECT_EQ(rank.Find("modelled_time")->Find("clock")->string, "modelled");
    EXPECT_GT(rank.Find("modelled_time")->Find("step_ms")->number, 0);
  }
}

// SIGTERM in the middle of a dry run's long step ends it at once: the run of 1,024 ranks
// takes tens of seconds a step here; the signal comes a second after it starts.
TEST(Clocks, ADryRunStopsWithinASecondOfSigterm) {
  const std::string log = Temp("dry_stop.log"), script = Temp("dry_stop.sh");
  std::ofstream(script) << "rm -f " << log << "\n"
                        << kTrain << " --dry_run --dp=32 --tp=4 --pp=8 --n_layer=16 "
                        << "--global_batch_size=256 --steps=3 > " << log << " 2>&1 &\n"
                        << "pid=$!\nsleep 1\nstart=$(date +%s%N)\nkill -TERM $pid\nwait $pid\n"
                        << "code=$?\nend=$(date +%s%N)\n"
                        << "echo \"exit code $code after $(( (end - start) / 1000000 )) ms\" >> "
                        << log << "\ncat " << log << "\n";
  const Result r = RunCommand("bash " + script);
  EXPECT_TRUE(absl::StrContains(r.output, "[train] stopped by SIGTERM during the dry run")) << r.output;
  std::smatch stopped;
  ASSERT_TRUE(std::regex_search(r.output, stopped, std::regex("exit code (\\d+) after (\\d+) ms")))
      << r.output;
  EXPECT_EQ(stopped[1], "143") << r.output;
  EXPECT_LT(std::stoll(stopped[2]), 1000) << r.output;
  EXPECT_FALSE(absl::StrContains(r.output, "traffic over")) << r.output;  // no report: stopped
}

}  // namespace
}  // namespace tally
