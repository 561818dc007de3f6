// What a run that cannot or must not go on gets (the README's table "What bad input
// gets"): a loss that is no longer finite stops it before anything is saved; SIGINT and
// SIGTERM stop it at a step boundary, save, say so, and exit 128 + the signal.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <regex>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "tests/e2e/run_command.h"

namespace tally {
namespace {

const std::string kTrain = TALLY_TRAIN_BINARY;
const std::string kTiny =
    " --n_layer=1 --n_head=2 --n_embd=32 --seq_len=32 --threads=1 --eval_every=0 --sample_bytes=0";

bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

int Lines(const std::string& text) { return int(std::count(text.begin(), text.end(), '\n')); }

TEST(NonFinite, ALossThatOverflowsStopsTheRunAndSavesNothing) {
  for (const std::string grid : {"", " --dp=2 --tp=2"}) {
    const std::string ckpt = Temp("nan.safetensors"), metrics = Temp("nan.jsonl");
    ::unlink(ckpt.c_str());
    Result r = RunCommand(kTrain + kTiny + grid + " --steps=20 --lr=1e30 --grad_clip=0 --save=" +
                          ckpt + " --metrics_json=" + metrics);
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_TRUE(absl::StrContains(r.output, "[train] step 2 (rank ")) << r.output;
    EXPECT_TRUE(absl::StrContains(r.output, "loss is nan")) << r.output;
    EXPECT_TRUE(absl::StrContains(r.output, "stopping (try a lower --lr)")) << r.output;
    EXPECT_FALSE(Exists(ckpt)) << r.output;
    std::ifstream in(metrics);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_EQ(Lines(text), 1) << text;  // the row of step 1
    EXPECT_TRUE(absl::StrContains(text, "\"step\":1,")) << text;
  }
  Result checked = RunCommand(kTrain + kTiny + " --steps=5 --lr=1e30 --grad_clip=0 --check_against_serial");
  EXPECT_EQ(checked.exit_code, 1) << checked.output;
  EXPECT_FALSE(absl::StrContains(checked.output, "largest relative difference")) << checked.output;
}

// Starts `command` in the background, waits for its step 2, sends `signal`, and returns
// what it printed and its exit code (as the last line, "exit code N").
Result SignalAt(const std::string& command, const std::string& signal, const std::string& name) {
  const std::string log = Temp(name + ".log"), script = Temp(name + ".sh");
  std::ofstream(script) << "rm -f " << log << "\n" << command << " > " << log << " 2>&1 &\npid=$!\n"
                        << "for i in $(seq 600); do grep -q 'step     2/' " << log
                        << " 2>/dev/null && break; sleep 0.1; done\n"
                        << "kill -" << signal << " $pid\nwait $pid\necho \"exit code $?\" >> " << log
                        << "\ncat " << log << "\n";
  return RunCommand("bash " + script);
}

TEST(Signals, SigintStopsAtAStepBoundarySavesAndResumes) {
  const std::string ckpt = Temp("interrupted.safetensors");
  ::unlink(ckpt.c_str());
  Result r = SignalAt(kTrain + kTiny + " --steps=1000000 --save=" + ckpt, "INT", "sigint");
  EXPECT_TRUE(absl::StrContains(r.output, "exit code 130")) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "[train] stopped by SIGINT after step ")) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "saved '" + ckpt + "' at step ")) << r.output;
  // The checkpoint's step is the last step trained and logged.
  std::smatch stopped;
  ASSERT_TRUE(std::regex_search(r.output, stopped, std::regex("after step (\\d+) of")));
  const int64_t step = std::stoll(stopped[1]);
  EXPECT_TRUE(absl::StrContains(r.output, absl::StrFormat("step %5d/1000000 | loss", step))) << r.output;
  EXPECT_FALSE(absl::StrContains(r.output, absl::StrFormat("step %5d/1000000 | loss", step + 1))) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, absl::StrCat("saved '", ckpt, "' at step ", step))) << r.output;
  Result resumed = RunCommand(kTrain + kTiny + " --steps=" + std::to_string(step + 1) + " --load=" + ckpt);
  EXPECT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_TRUE(absl::StrContains(resumed.output, absl::StrCat("resumed from '", ckpt, "' at step ", step)))
      << resumed.output;
}

TEST(Signals, SigtermStopsEveryThreadRankTogether) {
  const std::string ckpt = Temp("terminated.safetensors");
  ::unlink(ckpt.c_str());
  Result r = SignalAt(kTrain + " --n_layer=2 --n_head=2 --n_embd=32 --seq_len=32 --threads=1 --eval_every=0 "
                               "--sample_bytes=0 --dp=2 --tp=2 --pp=2 --zero=1 --steps=1000000 --save=" + ckpt,
                      "TERM", "sigterm");
  EXPECT_TRUE(absl::StrContains(r.output, "exit code 143")) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "[train] stopped by SIGTERM after step ")) << r.output;
  EXPECT_FALSE(absl::StrContains(r.output, "failed")) << r.output;
  EXPECT_TRUE(Exists(ckpt)) << r.output;
}

}  // namespace
}  // namespace tally
