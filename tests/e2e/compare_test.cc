// tally_compare as a user runs it: two runs whose difference is known give the ratios the
// formulas say, exactly; bad input is one clear line and exit code 1.
#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "core/runtime/json_reader.h"
#include "tests/e2e/run_command.h"

namespace tally {
namespace {

const std::string kTrain = TALLY_TRAIN_BINARY;
const std::string kCompare = TALLY_COMPARE_BINARY;
const std::string kTiny =
    " --n_layer=1 --n_head=2 --n_embd=32 --seq_len=32 --threads=1 --steps=2 --eval_every=0 "
    "--sample_bytes=0";

// A run's --traffic_json, written to `name` under the test's directory (prefixed: other
// tests write there at the same time).
std::string TrainRun(const std::string& name, const std::string& flags) {
  const std::string path = ::testing::TempDir() + "/compare_" + name;
  Result r = RunCommand(kTrain + kTiny + " " + flags + " --traffic_json=" + path);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return path;
}

int64_t Params(const std::string& path) {
  return ReadJson(path).Find("config")->Find("params")->AsInt();
}

// The text row of `key`: its line of the output.
std::string Line(const std::string& output, const std::string& key) {
  for (absl::string_view line : absl::StrSplit(output, '\n')) {
    if (absl::StartsWith(line, key + " ")) return std::string(line);
  }
  return "";
}

// The cells of that row after its key: run 1's, then run 2's and its ratio.
std::vector<std::string> Cells(const std::string& output, const std::string& key) {
  const std::string line = Line(output, key);
  if (line.empty()) return {};
  return absl::StrSplit(absl::string_view(line).substr(key.size()), ' ', absl::SkipEmpty());
}

TEST(TallyCompare, RingAgainstNaiveOnFourRanks) {
  const std::string ring = TrainRun("ring.json", "--dp=4");
  const std::string naive = TrainRun("naive.json", "--dp=4 --allreduce=naive");
  const int64_t m = 4 * Params(ring), steps = 2;
  Result r = RunCommand(kCompare + " " + ring + " " + naive);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "run 1: allreduce=ring")) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "run 2: allreduce=naive")) << r.output;
  // The ring: 2(p-1)/p·M from every rank; the star: (p-1)·M from rank 0, M from the others.
  const std::string row = Line(r.output, "dp all_reduce backward");
  EXPECT_TRUE(absl::StrContains(row, absl::StrCat(" ", steps * 3 * m / 2, " "))) << row;
  EXPECT_TRUE(absl::StrContains(row, absl::StrCat(steps * m, "..", steps * 3 * m))) << row;
  EXPECT_TRUE(absl::EndsWith(row, " 2.0000")) << row;  // (p-1)·M over 2(p-1)/p·M, p = 4
  EXPECT_TRUE(absl::EndsWith(Line(r.output, "params"), " 1.0000")) << r.output;

  Result csv = RunCommand(kCompare + " --csv " + ring + " " + naive);
  ASSERT_EQ(csv.exit_code, 0) << csv.output;
  EXPECT_TRUE(absl::StrContains(
      csv.output, absl::StrCat("traffic,dp all_reduce backward,2,allreduce=naive,", steps * m,
                               ",", steps * 3 * m, ",2\n")))
      << csv.output;
  Result json = RunCommand(kCompare + " --json " + ring + " " + naive);
  ASSERT_EQ(json.exit_code, 0) << json.output;
  absl::StatusOr<JsonValue> doc = ParseJson(json.output);
  ASSERT_TRUE(doc.ok()) << doc.status();
  EXPECT_EQ(doc->Find("runs")->array.size(), 2u);
}

TEST(TallyCompare, ZeroOneAgainstZeroThree) {
  // --report=json to stdout, the log lines first, as a user redirects it.
  const std::string z1 = ::testing::TempDir() + "/compare_z1.json";
  ASSERT_EQ(RunCommand(kTrain + kTiny + " --dp=4 --zero=1 --report=json > " + z1).exit_code, 0);
  const std::string z3 = TrainRun("z3.json", "--dp=4 --zero=3");
  const int64_t m = 4 * Params(z3), steps = 2;
  Result r = RunCommand(kCompare + " " + z1 + " " + z3);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "run 1: zero=1")) << r.output;
  // Both reduce-scatter the gradients once a step: (p-1)/p·M; ZeRO-1 gathers the updated
  // parameters after the optimizer, ZeRO-3 before each forward and backward.
  const std::string piece = absl::StrCat(steps * 3 * m / 4);
  using Row = std::vector<std::string>;
  EXPECT_EQ(Cells(r.output, "dp reduce_scatter backward"), (Row{piece, piece, "1.0000"}))
      << r.output;
  EXPECT_EQ(Cells(r.output, "dp all_gather optimizer"), (Row{piece, "-", "-"})) << r.output;
  EXPECT_EQ(Cells(r.output, "dp all_gather forward"), (Row{"-", piece, "-"})) << r.output;
  EXPECT_EQ(Cells(r.output, "dp all_gather backward"), (Row{"-", piece, "-"})) << r.output;
}

// Runs told apart by flags written only where they are on (zero_quantized_weights, ...):
// each label names what its run has, and a run that has none of them says so.
TEST(TallyCompare, OptionalFlagsLabelTheRunsThatHaveThem) {
  const std::string plain = TrainRun("plain_z3.json", "--dp=2 --zero=3");
  const std::string qwz = TrainRun("qwz_z3.json", "--dp=2 --zero=3 --zero_quantized_weights");
  const std::string qgz =
      TrainRun("qgz_z3.json", "--dp=2 --zero=3 --zero_quantized_gradients --zero_quant_grad_bits=4");
  Result r = RunCommand(kCompare + " " + plain + " " + qwz + " " + qgz);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(absl::StrContains(
      r.output, "run 1: without zero_quant_block zero_quant_grad_bits zero_quantized_gradients "
                "zero_quantized_weights  ("))
      << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "run 2: zero_quant_block=256 zero_quantized_weights=true  ("))
      << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "run 3: zero_quant_block=256 zero_quant_grad_bits=4 "
                                          "zero_quantized_gradients=true  ("))
      << r.output;
  EXPECT_FALSE(absl::StrContains(r.output, "(none)")) << r.output;
}

// The serial run beside a parallel one, and a model twice as deep beside it: compared,
// with the difference of the models said; the deeper model's dp bytes are twice the
// shallower's (every layer's gradients cross once more).
TEST(TallyCompare, TheSerialRunAndAnotherModelSizeCompare) {
  const std::string serial = TrainRun("serial.json", "");
  const std::string dp = TrainRun("dp2.json", "--dp=2");
  Result r = RunCommand(kCompare + " " + serial + " " + dp);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "run 1: dp=1")) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "run 2: dp=2")) << r.output;
  EXPECT_FALSE(absl::StrContains(r.output, "different models")) << r.output;
  EXPECT_EQ(ReadJson(serial).Find("ranks")->array.size(), 1u);

  const std::string deeper = TrainRun("deeper.json", "--dp=2 --n_layer=2");
  Result sizes = RunCommand(kCompare + " " + dp + " " + deeper);
  ASSERT_EQ(sizes.exit_code, 0) << sizes.output;
  EXPECT_TRUE(absl::StrContains(sizes.output, "run 1: n_layer=1 params=")) << sizes.output;
  EXPECT_TRUE(absl::StrContains(sizes.output, "the runs are of different models (n_layer 1 / 2; params "))
      << sizes.output;
  const std::vector<std::string> cells = Cells(sizes.output, "dp all_reduce backward");
  ASSERT_EQ(cells.size(), 3u) << sizes.output;
  const double ratio = double(Params(deeper)) / double(Params(dp));
  EXPECT_NEAR(std::stod(cells[2]), ratio, 1e-4) << sizes.output;
}

// Three runs of one configuration: the bytes are one figure, the measured time a spread
// (min..median..max of the busiest rank), and its ratios two significant figures.
TEST(TallyCompare, RepeatsOfOneConfigurationGiveTheSpreadOfTheMeasuredClock) {
  std::vector<std::string> paths;
  for (int i = 0; i < 3; ++i) paths.push_back(TrainRun(absl::StrCat("repeat", i, ".json"), "--dp=2"));
  const std::string args = absl::StrJoin(paths, " ");
  Result r = RunCommand(kCompare + " " + args);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "runs 1, 2, 3 are one configuration: measured ms per "
                                          "step of the busiest rank, min..median..max"))
      << r.output;
  const std::vector<std::string> traffic = Cells(r.output, "dp all_reduce backward");
  ASSERT_EQ(traffic.size(), 5u) << r.output;
  EXPECT_EQ(traffic[2], "1.0000");
  EXPECT_EQ(traffic[4], "1.0000");
  Result json = RunCommand(kCompare + " --json " + args);
  ASSERT_EQ(json.exit_code, 0) << json.output;
  const JsonValue doc = ParseJson(json.output).value();
  ASSERT_EQ(doc.Find("repeats")->array.size(), 1u) << json.output;
  const JsonValue& group = doc.Find("repeats")->array[0];
  EXPECT_EQ(group.Find("runs")->array.size(), 3u);
  bool step = false;
  for (const JsonValue& x : group.Find("time")->array) {
    EXPECT_LE(x.Find("min")->number, x.Find("median")->number) << json.output;
    EXPECT_LE(x.Find("median")->number, x.Find("max")->number) << json.output;
    step |= x.Find("key")->string == "step_ms" && x.Find("min")->number > 0;
  }
  EXPECT_TRUE(step) << json.output;
  // A measured ratio: two significant figures ("1.1", "0.97"), never four decimals.
  for (const char* key : {"step_ms", "compute_ms"}) {
    const std::vector<std::string> cells = Cells(r.output, key);
    ASSERT_EQ(cells.size(), 5u) << r.output;
    EXPECT_LE(cells[2].size(), 4u) << cells[2];
  }
}

TEST(TallyCompare, BadInputIsOneClearLine) {
  const std::string dir = ::testing::TempDir();
  const std::string run = TrainRun("good.json", "--dp=2");
  const std::string wider = ::testing::TempDir() + "/compare_wider.json";
  ASSERT_EQ(RunCommand(kTrain + " --n_layer=1 --n_head=2 --n_embd=64 --seq_len=32 --threads=1 "
                                "--dp=2 --steps=1 --eval_every=0 --sample_bytes=0 --traffic_json=" +
                       wider)
                .exit_code,
            0);
  std::ofstream(dir + "/compare_text.json") << "loss 3.2\nnot json at all\n";
  std::ofstream(dir + "/compare_broken.json") << "{\"config\": {\"dp\": 2";
  std::ofstream(dir + "/compare_other.json") << "[{\"op\": \"all_reduce\", \"time_us\": 3}]\n{\"a\": 1}\n";
  struct Case {
    std::string args, message;
  };
  const Case cases[] = {
      {"", "name the runs' JSON files"},
      {dir + "/compare_missing.json", "compare_missing.json"},
      {dir + "/compare_text.json", "is not JSON: no line starts with '{'"},
      {dir + "/compare_broken.json", "is not JSON: [json]"},
      {dir + "/compare_other.json", "is not a tally_train report"},
      {"--csv --json " + run, "--csv or --json, not both"},
  };
  for (const Case& c : cases) {
    Result r = RunCommand(kCompare + " " + c.args);
    EXPECT_EQ(r.exit_code, 1) << c.args << ": " << r.output;
    EXPECT_TRUE(absl::StrContains(r.output, c.message)) << c.args << ": " << r.output;
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << c.args << ": " << r.output;
  }
}

}  // namespace
}  // namespace tally
