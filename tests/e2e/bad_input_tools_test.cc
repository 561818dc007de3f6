// What bad input gets from the tools beside tally_train (the README's table "What bad
// input gets"): tally_plan, tally_claims, tally_bench and tally_model_bench answer with one
// clear line and exit code 1, before they plan, run a claim or measure.
#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "tests/e2e/one_clear_line.h"
#include "tests/e2e/run_command.h"

namespace tally {
namespace {

const std::string kBench = TALLY_BENCH_BINARY;
const std::string kPlan = TALLY_PLAN_BINARY;
const std::string kModelBench = TALLY_MODEL_BENCH_BINARY;
const std::string kClaims = TALLY_CLAIMS_BINARY;

// tally_claims: a name not in the catalogue, before any claim runs; a stray argument; an
// unknown flag.
TEST(BadInput, TallyClaimsNamesItsClaims) {
  ExpectOneClearLine(kClaims, {
      {"--only=zero4", "[claims] no claim is named 'zero4': the claims are ring, zero3, zero-memory, "
                       "optimizer-share, zero++, powersgd, onebit-adam, tp, pp, ulysses, bubble, seed"},
      {"--only=bubble,ZERO3", "[claims] no claim is named 'ZERO3'"},
      {"--onl=ring", "Unknown command line flag 'onl'"},
  }, 5);
  Result stray = RunCommand(kClaims + " ring");
  EXPECT_EQ(stray.exit_code, 2) << stray.output;
  EXPECT_TRUE(absl::StrContains(stray.output, "unexpected argument 'ring'")) << stray.output;
  // What it runs, it holds: the bubble's two results, exit 0.
  Result bubble = RunCommand(kClaims + " --only=bubble");
  EXPECT_EQ(bubble.exit_code, 0) << bubble.output;
  EXPECT_TRUE(absl::StrContains(bubble.output, "bubble/interleaved               0.1579             0.1579     1.0000  holds (1 check)"))
      << bubble.output;
  Result list = RunCommand(kClaims + " --list");
  EXPECT_EQ(list.exit_code, 0) << list.output;
  EXPECT_TRUE(absl::StrContains(list.output, "onebit-adam  1-bit Adam: up to 5× less communication"))
      << list.output;
}

TEST(BadInput, TallyPlanRefusesWhatItCannotPlan) {
  ExpectOneClearLine(kPlan, {
      {"--params=-5", "--params must be >= 1, got -5"},
      {"--params=0", "--params must be >= 1, got 0"},
      {"--layers=-1", "--layers must be >= 1"},
      {"--hidden=0", "--hidden must be >= 1"},
      {"--batch_size=0", "--batch_size must be >= 1"},
      {"--hidden=4000 --tp=3", "the hidden size 4000 is not divisible by --tp=3"},
      {"--bytes_per_value=3", "--bytes_per_value must be 1, 2, 4 or 8, got 3"},
      {"--bucket_mb=0", "--bucket_mb must be in (0, 2^20] MiB, got 0"},
      {"--bucket_mb=nan", "--bucket_mb must be in (0, 2^20] MiB"},
      {"--dp=65536 --tp=65536 --pp=2", "8589934592 GPUs; tally_plan plans at most 1048576"},
      {"--sweep=dp:2,2147483647", "2147483647 GPUs; tally_plan plans at most"},
      {"--params=1000000 --n_layer=4", "give them or --n_layer, --n_embd, --n_head, --vocab_size, not both"},
      {"--n_head=5", "n_embd (4096) must be divisible by n_head (5)"},
      {"--n_layer=0", "n_layer must be positive, got 0"},
      {"--cluster=tpu", "--cluster must be a100, h100 or a JSON file"},
      {"--search --gpu_memory_gb=-1", "--search wants --world in [1, 65536]"},
      {"--search --world=-3", "got -3, "},
      {"--search --global_batch_size=-8", ", -8 and 80"},
  }, 5);
  Result named = RunCommand(kPlan + " --model=llama-7b --params=1000000");
  EXPECT_EQ(named.exit_code, 0) << named.output;
  EXPECT_TRUE(absl::StrContains(named.output, "llama-7b with --params=1000000: Φ = 1000000")) << named.output;
}

TEST(BadInput, ASearchTooLargeToAnswerSoonIsRefused) {
  ExpectOneClearLine(kPlan + " --model=llama-70b --cluster=a100 --search", {
      {"--world=65536 --global_batch_size=65536", "grid-GPUs to cost (about"},
  }, 10);
}

TEST(BadInput, TallyBenchRefusesSizesAndRanksThatCannotRun) {
  ExpectOneClearLine(kBench, {
      {"--ranks=100000", "--ranks=100000 is more than the 4096 ranks"},
      {"-e 9999999999G", "is more bytes than 64 bits count"},
      {"-e 64G", "GiB of memory, and this machine has"},
      {"--ranks=3000 -e 64M", "on 3000 rank(s) here needs at least"},
      {"--timeout_s=nan", "--timeout_s must be a positive number"},
      {"-J /dev/null", "-J '/dev/null' is a character device"},
  }, 5);
}

TEST(BadInput, TallyModelBenchRefusesBeforeMeasuring) {
  ExpectOneClearLine(kModelBench, {
      {"--n_layer=100000000", "GiB of memory, and this machine has"},
      {"--batch=0", "--global_batch_size must be positive, got 0"},
      {"--threads=0", "--threads must list positive integers"},
      {"--rounds=0", "need --steps >= 1, --warmup >= 0 and --rounds >= 1"},
      {"--json=/dev/null", "--json '/dev/null' is a character device"},
  }, 5);
}

}  // namespace
}  // namespace tally
