// Sampling and what checkpoints know, as a user runs them: a resume on other text warns,
// and --sample_only samples a checkpoint on any grid without training.
#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "tests/e2e/run_command.h"

namespace tally {
namespace {

const std::string kTrain = TALLY_TRAIN_BINARY;
const std::string kTiny = " --n_layer=1 --n_head=2 --n_embd=32 --seq_len=32 --threads=1";

// A checkpoint records its data: resuming on other text warns in one line, on the same
// text not at all. --sample_only samples it on any grid without training, the same bytes
// on dp ranks as on one.
TEST(TallyTrain, CheckpointsKnowTheirDataAndSampleOnlyJobsTrainNothing) {
  const std::string dir = ::testing::TempDir();
  const std::string ckpt = dir + "/sample_only.safetensors", text = dir + "/other.txt";
  std::ofstream(text) << std::string(4000, 'x');
  const std::string quiet = " --eval_every=0 --sample_bytes=0";
  ASSERT_EQ(RunCommand(kTrain + kTiny + quiet + " --steps=2 --save=" + ckpt).exit_code, 0);
  Result other = RunCommand(kTrain + kTiny + quiet + " --steps=3 --load=" + ckpt + " --data=" + text);
  ASSERT_EQ(other.exit_code, 0) << other.output;
  EXPECT_TRUE(absl::StrContains(other.output, "[train] warning: '" + ckpt + "' was trained on embedded "
                                "corpus (2000000 bytes); this run trains on " + text +
                                " (4000 bytes), other text\n"))
      << other.output;
  Result same = RunCommand(kTrain + kTiny + quiet + " --steps=3 --load=" + ckpt);
  ASSERT_EQ(same.exit_code, 0) << same.output;
  EXPECT_FALSE(absl::StrContains(same.output, "warning")) << same.output;

  const std::string sample = " --sample_only --sample_bytes=32 --load=" + ckpt;
  Result one = RunCommand(kTrain + kTiny + sample);
  Result dp = RunCommand(kTrain + kTiny + sample + " --dp=2");
  Result tp = RunCommand(kTrain + kTiny + sample + " --tp=2 --pp=1");
  for (const Result* r : {&one, &dp, &tp}) {
    ASSERT_EQ(r->exit_code, 0) << r->output;
    EXPECT_TRUE(absl::StrContains(r->output, "sampling from '" + ckpt + "' (saved at step 2")) << r->output;
    EXPECT_FALSE(absl::StrContains(r->output, "| loss")) << r->output;  // no step trained
    EXPECT_FALSE(absl::StrContains(r->output, "traffic")) << r->output;  // and no report
  }
  const std::string marker = "sample (temperature 0.8, top-k 40):\n";
  ASSERT_NE(one.output.find(marker), std::string::npos) << one.output;
  EXPECT_EQ(dp.output.substr(dp.output.find(marker)), one.output.substr(one.output.find(marker)));
}

}  // namespace
}  // namespace tally
