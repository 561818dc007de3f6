// What tally never does with files, as a user meets it (the README's "What tally never
// does"): it replaces nothing but the regular file it was asked to write, never writes two
// outputs to one file or an output onto an input, keeps a JSON report on standard output
// alone, and never prints a figure it could not compute from a report (no wrapped
// integers, negative bytes, inf, or bytes that are not UTF-8).
#include <unistd.h>

#include <fstream>
#include <iterator>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/e2e/run_command.h"

namespace tally {
namespace {

const std::string kTrain = TALLY_TRAIN_BINARY;
const std::string kCompare = TALLY_COMPARE_BINARY;
const std::string kTiny =
    " --n_layer=1 --n_head=2 --n_embd=32 --seq_len=32 --threads=1 --eval_every=0 --sample_bytes=0";

std::string Read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void Write(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

// Exit code 1 and one line on stderr that says `message`.
void ExpectRefused(const std::string& command, const std::string& message) {
  const Result r = RunCommand(command);
  EXPECT_EQ(r.exit_code, 1) << command << ": " << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, message)) << command << ": " << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << command << ": " << r.output;
}

// A two-rank report (with an evaluation), written once for the tests below.
const std::string& Report() {
  static const std::string path = [] {
    const std::string p = Temp("two_ranks.json");
    const Result r = RunCommand(kTrain + kTiny + " --dp=2 --steps=1 --eval_every=1 --traffic_json=" + p);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return p;
  }();
  return path;
}

TEST(BadFiles, TallyCompareNeverWritesThePageOntoAnInput) {
  const std::string a = Report();
  const std::string before = Read(a);
  ExpectRefused(kCompare + " --html=" + a + " " + a + " " + a, "are one file: the page would replace the run it reads");
  // The same file by another name: a hard link, and ./ in front.
  const std::string hard = Temp("hard_link.json");
  ::unlink(hard.c_str());
  ASSERT_EQ(::link(a.c_str(), hard.c_str()), 0);
  ExpectRefused(kCompare + " --html=" + hard + " " + a, "are one file");
  EXPECT_EQ(Read(a), before);
  // A page of its own is written, and the program says where.
  const std::string page = Temp("own_page.html");
  const Result r = RunCommand(kCompare + " --json --html=" + page + " " + a);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "report page written to '" + page + "'")) << r.output;
  EXPECT_TRUE(absl::StrContains(Read(page), "<html")) << page;
}

// Before the first step: a name whose temporary file would not fit, and two outputs on
// one file or an output on an input, for every output flag.
TEST(BadFiles, NoRunTrainsToLoseItsWorkToAFileName) {
  const std::string dir = ::testing::TempDir();
  const std::string long_name = dir + "/" + std::string(245, 'x');  // + ".partial.XXXXXX" passes 255
  for (const char* flag : {"--save", "--metrics_json", "--traffic_json", "--trace", "--report_html"}) {
    ExpectRefused(kTrain + kTiny + " --dp=2 --steps=100000 " + flag + "=" + long_name,
                  "its name is 245 characters");
  }
  const std::string data = Temp("clobber_data.txt");
  Write(data, std::string(4096, 'a'));
  const std::string f = Temp("clobber_one.json");
  ::unlink(f.c_str());
  ExpectRefused(kTrain + kTiny + " --dp=2 --steps=100000 --traffic_json=" + f + " --report_html=" + f,
                "--report_html would replace what --traffic_json writes");
  ExpectRefused(kTrain + kTiny + " --dp=2 --steps=100000 --save=" + f + " --metrics_json=" + dir + "/./clobber_one.json",
                "are one file");
  ExpectRefused(kTrain + kTiny + " --dp=2 --steps=100000 --data=" + data + " --report_html=" + data,
                "--report_html would replace --data's file");
  EXPECT_EQ(Read(data), std::string(4096, 'a'));
}

TEST(BadFiles, AnOutputOntoASymbolicLinkIsRefusedAndTheLinkKept) {
  const std::string target = Temp("link_target.safetensors"), link = Temp("link.safetensors");
  Write(target, "not a checkpoint");
  ::unlink(link.c_str());
  ASSERT_EQ(::symlink(target.c_str(), link.c_str()), 0);
  for (const char* flag : {"--save", "--metrics_json", "--traffic_json", "--trace", "--report_html"}) {
    ExpectRefused(kTrain + kTiny + " --dp=2 --steps=100000 " + flag + "=" + link,
                  "is a symbolic link to '" + target + "'; tally replaces only a regular file");
  }
  ExpectRefused(kCompare + " --html=" + link + " " + Report(), "is a symbolic link");
  char buffer[4096] = {};
  ASSERT_GT(::readlink(link.c_str(), buffer, sizeof(buffer) - 1), 0);  // still a link
  EXPECT_EQ(std::string(buffer), target);
  EXPECT_EQ(Read(target), "not a checkpoint");
}

TEST(BadFiles, AJsonReportOnStandardOutputIsTheReportAlone) {
  const std::string out = Temp("stdout_report.json"), trace = Temp("stdout_trace.json");
  // Standard output to the file, standard error to the result (a subshell keeps them apart).
  const Result r = RunCommand("(" + kTrain + kTiny + " --dp=2 --steps=2 --report=json --peer_matrix "
                              "--check_against_serial --trace=" + trace + " > " + out + ")");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // What follows the report went to stderr: the peer matrix, the trace's line, the check.
  EXPECT_TRUE(absl::StrContains(r.output, "trace written to")) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "largest relative difference")) << r.output;
  const std::string text = Read(out);
  ASSERT_FALSE(text.empty());
  EXPECT_EQ(text.substr(text.rfind('\n', text.size() - 2) + 1, 1), "{") << "the last line is not the report";
  const Result compared = RunCommand(kCompare + " " + out + " " + Report());
  EXPECT_EQ(compared.exit_code, 0) << compared.output;
}

TEST(BadFiles, EveryNumberOfAReportIsOneTallyCouldHaveWritten) {
  const std::string good = Read(Report());
  struct Bad {
    std::regex pattern;
    std::string replacement, message;
  };
  const std::vector<Bad> cases = {
      {std::regex("\"bytes_sent\":[0-9]+"), "\"bytes_sent\":1e300", "\"bytes_sent\" is 1e+300; it must be an integer in [0, 2^53]"},
      {std::regex("\"bytes_sent\":[0-9]+"), "\"bytes_sent\":-5", "\"bytes_sent\" is -5; it must be an integer"},
      {std::regex("\"bytes_sent\":[0-9]+"), "\"bytes_sent\":1.5", "\"bytes_sent\" is 1.5; it must be an integer"},
      {std::regex("\"exact_bytes_sent\":[0-9]+"), "\"exact_bytes_sent\":1e17", "it must be an integer in [0, 2^53]"},
      {std::regex("\"peak_total\":[0-9]+"), "\"peak_total\":-1", "memory's \"peak_total\" is -1"},
      {std::regex("\"steps\":[0-9]+"), "\"steps\":1e20", "the report's \"steps\" is 1e+20"},
      {std::regex("\"peers\":\\[[0-9]+"), "\"peers\":[-7", "\"peers\" entry is -7"},
      {std::regex("\"rank\":0,\"dp\":0"), "\"rank\":0,\"dp\":100000", "tally runs at most 4096 ranks"},
      {std::regex("\"step_ms\":[0-9.e+-]+"), "\"step_ms\":-1", "time \"step_ms\" is -1; it must be a finite number of ms"},
      {std::regex("\"compute_ms\":[0-9.e+-]+"), "\"compute_ms\":1e999", "time \"compute_ms\" is inf"},
      // The loss curve and the verdict the page draws.
      {std::regex("\"losses\":\\[[0-9.e+-]+"), "\"losses\":[-3", "loss 0 is -3; it must be a finite loss in [0, 1e6]"},
      {std::regex("\"loss\":[0-9.e+-]+"), "\"loss\":1e999", "validation loss 0's \"loss\" is inf"},
      {std::regex("\"exposed_share\":[0-9.e+-]+"), "\"exposed_share\":2", "it must be a share in [0, 1]"},
      {std::regex("\"bound\":\"[a-z]+\""), "\"bound\":\"memory\"", "the verdict's \"bound\" is not compute or communication"},
      // Bytes that are not UTF-8, raw or escaped, are refused before they reach any output.
      {std::regex("\"group\":\"dp\""), "\"group\":\"dp\\ud800\"", "a high surrogate without its low surrogate"},
      {std::regex("\"group\":\"dp\""), "\"group\":\"dp\\udc00\"", "a lone low surrogate"},
      {std::regex("\"group\":\"dp\""), "\"group\":\"dp\xff\xfe\"", "invalid UTF-8 in a string"},
      {std::regex("\"group\":\"dp\""), "\"group\":\"dp\xc0\xaf\"", "invalid UTF-8 in a string"},  // overlong '/'
  };
  int i = 0;
  for (const Bad& c : cases) {
    const std::string bad = std::regex_replace(good, c.pattern, c.replacement, std::regex_constants::format_first_only);
    ASSERT_NE(bad, good) << c.replacement;
    const std::string path = Temp("bad_report" + std::to_string(i++) + ".json");
    Write(path, bad);
    for (const char* format : {"", " --json", " --csv"}) {
      ExpectRefused(kCompare + format + " " + path + " " + Report(), c.message);
    }
  }
  // A well-formed character outside ASCII passes through, escaped or raw.
  const std::string fine = Temp("utf8_report.json");
  Write(fine, std::regex_replace(good, std::regex("\"group\":\"dp\""), "\"group\":\"dp\\u00e9\\ud83d\\ude00\"",
                                 std::regex_constants::format_first_only));
  const Result r = RunCommand(kCompare + " --json " + fine + " " + Report());
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "dp\xc3\xa9\xf0\x9f\x98\x80 all_reduce")) << r.output;
}

TEST(BadFiles, AReportOfMoreRanksThanTallyRunsIsRefused) {
  // 4,097 copies of one rank's entry.
  const std::string good = Read(Report());
  const size_t ranks = good.find("\"ranks\":[") + 9;
  const size_t end = good.rfind("]}");
  const std::string all = good.substr(ranks, end - ranks);
  const std::string one = all.substr(0, all.find(",{\"rank\":"));
  std::string many = good.substr(0, ranks);
  for (int r = 0; r < 4097; ++r) absl::StrAppend(&many, r > 0 ? "," : "", one);
  absl::StrAppend(&many, good.substr(end));
  const std::string path = Temp("too_many_ranks.json");
  Write(path, many);
  ExpectRefused(kCompare + " " + path + " " + Report(), "4097 ranks; tally runs at most 4096");
}

}  // namespace
}  // namespace tally
