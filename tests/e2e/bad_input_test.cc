// What bad input gets, as a user meets it (the README's table "What bad input gets"):
// one clear line on stderr and exit code 1, never a crash, a hang, a run that eats the
// machine, a silent NaN, or a lost or clobbered file. How a run stops (a loss no longer
// finite, SIGINT, SIGTERM) is stops_test.cc; the other tools' flags (tally_plan,
// tally_claims, tally_bench, tally_model_bench) bad_input_tools_test.cc.
#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <new>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "examples/example_main.h"
#include "gtest/gtest.h"
#include "core/runtime/clock.h"
#include "tests/e2e/one_clear_line.h"
#include "tests/e2e/run_command.h"

namespace tally {
namespace {

const std::string kTrain = TALLY_TRAIN_BINARY;
const std::string kPlan = TALLY_PLAN_BINARY;
const std::string kModelBench = TALLY_MODEL_BENCH_BINARY;
const std::string kTiny =
    " --n_layer=1 --n_head=2 --n_embd=32 --seq_len=32 --threads=1 --eval_every=0 --sample_bytes=0";

TEST(BadInput, SizesThatWouldOverflowOrNotFitAreRefusedAtOnce) {
  ExpectOneClearLine(kTrain + kTiny, {
      {"--dp=65536 --micro_batch_size=65536", "65536 ranks; tally runs at most 4096"},
      {"--dp=46341 --micro_batch_size=46341", "46341 ranks; tally runs at most 4096"},
      {"--dp=4096 --global_batch_size=2147483647", "must be a multiple of --dp (4096)"},
      {"--dp=2 --global_batch_size=3", "--global_batch_size (3) must be a multiple of --dp (2)"},
      {"--n_layer=1000000000", "GiB of memory, and this machine has"},
      {"--order=tp-dp", "--order must name tp, dp and pp once each"},
      {"--gpus_per_node=-1", "--gpus_per_node must be at least 1"},
      {"--link_inter=fast", "--link_inter must be BANDWIDTH,LATENCY"},
      {"--allreduce=tree", "--allreduce must be ring, naive or hierarchical, got 'tree'"},
      {"--global_batch_size=1000000000", "GiB of memory, and this machine has"},
      {"--n_embd=2000000000 --n_head=1", "parameters; tally counts at most"},
      // A vocabulary of 2^31 - 1 rows: the parameter count is summed in double, no int wraps.
      {"--dry_run --vocab_size=2147483647 --n_embd=1000000 --n_head=1000", "parameters; tally counts at most"},
      {"--pp=2 --n_layer=2 --pp_layers=2147483647,2147483647", "--pp_layers sums to 4294967294 layers"},
  });
}

// A dry run's own bookkeeping (its thread ranks, layers, micro-batches and calls) is
// estimated before it starts: what cannot finish in this machine's memory is refused,
// with both figures, within seconds.
TEST(BadInput, ADryRunThatCannotFitThisMachineIsRefusedAtOnce) {
  ExpectOneClearLine(kTrain + " --dry_run --steps=1", {
      {"--n_layer=1000000000", "[train] this dry run (1 rank(s) x 1000000000 layer(s)"},
      {"--global_batch_size=2147483647", "GiB of memory, and this machine has"},
      {"--dp=4096 --global_batch_size=4096", "this dry run (4096 rank(s) x 4 layer(s) x 1 micro-batch(es)"},
  }, 5);
}

// Flags that would be ignored are refused or named in a warning; a warning names the
// flags as the user gave them, not as a dry run resolves them.
TEST(BadInput, NoFlagIsIgnoredInSilence) {
  ExpectOneClearLine(kTrain + kTiny, {
      {"--dry_run --metrics_json=" + Temp("dry.jsonl"), "--metrics_json with --dry_run: a dry run has no values"},
      {"--grad_comm_dtype= --dp=2", "--grad_comm_dtype must be fp32 or bf16, got ''"},
      {"--cluster=a100 --link_intra=600,1 --dp=2", "--cluster names its links: give it or --link_intra"},
      {"--link_inter=1e-320,0", "--link_inter must be BANDWIDTH,LATENCY[,EFFICIENCY]: GB/s one way (in [0.001, 1e+06])"},
      {"--link_intra=25,1e300", "microseconds per message (in [0, 1e+07])"},
      {"--sample_bytes=10 --top_k=300", "--top_k must be in [0, --vocab_size = 256], got 300"},
  });
  ExpectOneClearLine(kPlan, {
      {"--seed_examples --cluster=/dev/zero", "--seed_examples prints the seed's own examples and takes no flag but --json; got --cluster"},
      {"--seed_examples --model=bogus", "got --model"},
      {"--seed_examples --dp=4 --search", "got --dp --search"},
      {"--sweep=dp:1,2 --search", "--sweep prints CSV rows of the plan; it takes neither --search nor --json"},
      {"--sweep=dp:1,2 --json", "it takes neither --search nor --json"},
      {"--world=64", "--world is --search's: give --search too"},
      {"--explain --world=8", "[flags] --explain walks the seed's flow for a model: give --model"},
      {"--explain --model=toy --search", "[flags] --explain puts the search's fastest grid beside "
                                         "the flow's; it takes none of --search"},
      {"--explain --model=toy --world=-3", "[flags] --explain wants --world in [1, 65536]"},
      {"--explain --model=toy --global_batch_size=-1", "--global_batch_size in [1, 2^30]"},
      {"--explain --model=toy --gpu_memory_gb=nan", "a finite --gpu_memory_gb > 0, got 4 and nan"},
      {"--cluster=a100 --link_inter=50,2", "--cluster names its links"},
      {"--link_inter=1e-320,0", "GB/s one way (in [0.001, 1e+06])"},
  }, 5);
  struct Warned {
    std::string flags, line;
  };
  for (const Warned& w : std::vector<Warned>{
           {"--dry_run --eval_every=10", "--eval_every has no effect with --dry_run"},
           {"--dry_run --eval_batches=3", "--eval_batches has no effect with --dry_run"},
           {"--dry_run --top_k=5", "--top_k has no effect with --dry_run"},
           {"--temperature=0.5", "--temperature has no effect with --sample_bytes=0"}}) {
    const Result r = RunCommand(kTrain + kTiny + " --steps=1 " + w.flags);
    EXPECT_EQ(r.exit_code, 0) << w.flags << ": " << r.output;
    EXPECT_TRUE(absl::StrContains(r.output, "[flags] warning: " + w.line)) << w.flags << ": " << r.output;
    EXPECT_FALSE(absl::StrContains(r.output, "with --eval_every=0")) << w.flags << ": " << r.output;
  }
  // Sampling is off in a dry run: a vocabulary under --top_k's default is no error.
  const Result small = RunCommand(kTrain + " --dry_run --steps=1 --n_layer=1 --n_embd=32 --n_head=2 --vocab_size=39");
  EXPECT_EQ(small.exit_code, 0) << small.output;
  EXPECT_FALSE(absl::StrContains(small.output, "top_k")) << small.output;
}

// --search refuses, before costing any grid, a search that would not answer in seconds.
// Context parallelism: a split it cannot make, a name it does not know, and what it does
// not run with yet, each before any work.
TEST(BadInput, ContextParallelismSaysWhatItCannotSplitOrRunWith) {
  ExpectOneClearLine(kTrain + kTiny, {
      {"--cp=0", "[flags] --cp must be >= 1, got 0"},
      {"--cp=-2", "[flags] --cp must be >= 1, got -2"},
      {"--cp=3", "--cp=3 with --cp_load_balance=zigzag cuts each sequence into 6 pieces: "
                 "seq_len 32 is not divisible by 6"},
      {"--cp=4 --seq_len=36", "cuts each sequence into 8 pieces: seq_len 36 is not divisible by 8"},
      {"--cp=4 --cp_comm=a2a", "--cp_comm=a2a splits each tp rank's 2 heads over --cp=4"},
      {"--cp=2 --cp_comm=ring", "[flags] --cp_comm=ring is not one of p2p, allgather, a2a"},
      {"--cp=2 --cp_load_balance=headtail",
       "[flags] --cp_load_balance=headtail is not one of none, zigzag"},
      {"--cp=2 --recompute_granularity=selective",
       "[flags] --recompute_granularity=selective makes attention's probabilities again"},
      {"--cp=2 --n_experts=4 --capacity_factor=1.25",
       "[flags] --capacity_factor=1.25 with --cp=2: an expert's capacity ranks every token"},
      {"--cp=2 --n_experts=4 --ep=3", "[flags] --n_experts=4 must be divisible by --ep=3"},
      {"--cp=2 --device=cuda", "[flags] --cp=2 runs on --device=cpu only so far"},
  });
  // tally_plan: the same splits, and what tally_train does not run.
  ExpectOneClearLine(kPlan + " --model=toy --seq_len=64", {
      {"--cp=0", "[flags] --cp must be >= 1, got 0"},
      {"--cp=3", "[flags] --cp=3 with --cp_load_balance=zigzag cuts each sequence into 6 pieces: "
                 "seq_len 64 is not divisible by 6"},
      {"--cp=8 --cp_comm=a2a", "--cp_comm=a2a gives each of the 8 cp ranks n_head/cp heads: "
                               "n_head 4 is not divisible by 8"},
      {"--cp=2 --cp_comm=ring", "[flags] --cp_comm=ring is not one of p2p, allgather, a2a"},
      {"--cp=2 --cp_load_balance=even", "[flags] --cp_load_balance=even is not one of none, zigzag"},
      {"--cp=2 --dp=2 --n_experts=6 --ep=3", "[flags] --ep=3 needs --n_experts divisible by it "
                                              "and --dp x --cp divisible by it"},
      {"--cp=2 --recompute_granularity=selective",
       "[flags] --recompute_granularity=selective has nothing to make again under --cp"},
      {"--cp=2048 --dp=1024", "[flags] dp 1024 x cp 2048 x tp 1 x pp 1 = 2097152 GPUs; tally_plan "
                              "plans at most 1048576"},
  }, 5);
}

// HSDP, ZeRO++ and compressed gradients: what each needs, and values that mean nothing.
TEST(BadInput, ShardingAndCompressionFlagsSayWhatTheyNeed) {
  ExpectOneClearLine(kTrain + kTiny + " --dp=4", {
      {"--zero=3 --zero_shard=rack", "[flags] --zero_shard must be dp or node, got 'rack'"},
      {"--zero=2 --zero_shard=node", "[flags] --zero_shard=node needs --gpus_per_node"},
      {"--zero=2 --zero_hpz", "[flags] --zero_hpz keeps ZeRO-3's secondary copy: it needs --zero=3"},
      {"--zero=2 --zero_quantized_weights",
       "[flags] --zero_quantized_weights quantises ZeRO-3's parameter gathers: it needs --zero=3"},
      {"--zero=3 --zero_quantized_weights --zero_quant_block=0",
       "[flags] --zero_quant_block must be at least 1 value a block, got 0"},
      {"--zero=1 --zero_quantized_gradients",
       "[flags] --zero_quantized_gradients quantises ZeRO-3's gradient reduce-scatters: it needs --zero=3"},
      {"--zero=3 --zero_quantized_gradients --gpus_per_node=3",
       "[flags] --zero_quantized_gradients cuts the dp group by its nodes, and dp group [0 1 2 3] "
       "has 3 on node 0 but 1 on node 1"},
      {"--zero=3 --zero_quantized_gradients --zero_quant_grad_bits=2",
       "[flags] --zero_quant_grad_bits must be 8 or 4, got 2"},
      {"--zero=3 --zero_quant_block=-8",
       "[flags] --zero_quant_block must be at least 1 value a block, got -8"},
      {"--grad_compression=powersgd --powersgd_rank=0", "[flags] --powersgd_rank must be at least 1"},
      {"--grad_compression=powersgd --zero=1", "it needs --zero=0"},
      {"--grad_compression=topk",
       "[flags] --grad_compression must be none, powersgd or onebit_adam, got 'topk'"},
      {"--grad_compression=onebit_adam --onebit_warmup_steps=0",
       "[flags] --onebit_warmup_steps must be at least 1"},
      {"--grad_compression=onebit_adam --optimizer=sgd",
       "[flags] --grad_compression=onebit_adam needs --optimizer=adamw, got --optimizer=sgd"},
      {"--grad_compression=onebit_adam --dp=72 --global_batch_size=72 --micro_batch_size=1 "
       "--save=x.safetensors",
       "[flags] --grad_compression=onebit_adam with --save: a checkpoint holds the error buffers "
       "of at most 64 ranks, and this grid has 72"},
  });
  ExpectOneClearLine(kPlan + " --model=toy --dp=4", {
      {"--zero=3 --zero_quantized_weights --zero_quant_block=0",
       "[flags] --zero_quant_block must be at least 1 value a block, got 0"},
      {"--zero=3 --zero_quantized_gradients --gpus_per_node=3",
       "[flags] --zero_quantized_gradients cuts the dp group by its nodes"},
      {"--zero=1 --grad_compression=onebit_adam",
       "[flags] --grad_compression=onebit_adam compresses data parallelism's all-reduce: it needs --zero=0"},
  }, 5);
  Result warned = RunCommand(kTrain + kTiny + " --steps=1 --zero_quant_block=64");
  EXPECT_EQ(warned.exit_code, 0) << warned.output;
  EXPECT_TRUE(absl::StrContains(warned.output, "[flags] warning: --zero_quant_block has no effect"))
      << warned.output;
}

TEST(BadInput, EveryRealFlagIsFinite) {
  std::vector<Case> cases;
  for (const char* flag : {"lr", "min_lr", "weight_decay", "grad_clip", "temperature", "bucket_mb", "timeout_s"}) {
    cases.push_back({absl::StrCat("--", flag, "=inf"), absl::StrCat("--", flag, " must be a finite number, got inf")});
  }
  cases.push_back({"--lr=1e39", "--lr must be a finite number, got inf"});  // beyond a float
  cases.push_back({"--lr=nan", "--lr must be a finite number, got nan"});
  ExpectOneClearLine(kTrain + kTiny, cases);
}

TEST(BadInput, InputsAreRegularFilesReadWithoutBlocking) {
  const std::string fifo = Temp("data.fifo");
  ::unlink(fifo.c_str());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string dir = ::testing::TempDir();
  ExpectOneClearLine(kTrain + kTiny, {
      {"--data=" + dir, "is a directory; a regular file is needed"},
      {"--data=" + fifo, "is a FIFO; a regular file is needed"},
      {"--data=/dev/zero", "'/dev/zero' is a character device; a regular file is needed"},
      {"--data=/no/such/file", "[data] cannot open '/no/such/file'"},
      {"--load=" + dir, "[checkpoint] '" + dir + "' is a directory"},
      {"--load=" + fifo, "is a FIFO"},
      {"--load=/dev/zero", "is a character device"},
  });
  // A file far larger than any checkpoint of the model is refused before it is read.
  const std::string big = Temp("big.safetensors");
  { std::ofstream(big, std::ios::binary | std::ios::trunc) << std::string(4 << 20, 'x'); }
  ExpectOneClearLine(kTrain + kTiny, {{"--load=" + big, "this run can read"}});
}

TEST(BadInput, OutputPathsAreCheckedBeforeTheFirstStep) {
  const std::string dir = ::testing::TempDir();
  for (const char* flag : {"--save", "--metrics_json", "--traffic_json", "--trace"}) {
    ExpectOneClearLine(kTrain + kTiny + " --steps=100000", {
        {absl::StrCat(flag, "=/dev/null"), "'/dev/null' is a character device; tally writes only regular files"},
        {absl::StrCat(flag, "=", dir), "is a directory; tally writes only regular files"},
        {absl::StrCat(flag, "=/no/such/dir/out"), "no directory '/no/such/dir'"},
    });
  }
}

TEST(BadInput, MessagesSayTheRealCause) {
  const std::string ckpt = Temp("at_step_3.safetensors");
  Result saved = RunCommand(kTrain + kTiny + " --steps=3 --save=" + ckpt);
  ASSERT_EQ(saved.exit_code, 0) << saved.output;
  ExpectOneClearLine(kTrain + kTiny, {
      {"--steps=2 --load=" + ckpt, "is at step 3: --steps=2 is before it (--steps counts from the first step: --steps=3 trains no more steps, --steps=4 one more)"},
      {"--n_head=4 --load=" + ckpt, "was saved with n_head=2; the flags ask for --n_head=4"},
  });
  // The same step count resumes to nothing but still runs (to sample, or save again).
  Result same = RunCommand(kTrain + kTiny + " --steps=3 --load=" + ckpt);
  EXPECT_EQ(same.exit_code, 0) << same.output;
}

TEST(BadInput, AFlagWithoutEffectIsNamedInAWarning) {
  struct Warned {
    std::string flags, flag;
  };
  for (const Warned& w : std::vector<Warned>{{"--sequence_parallel", "--sequence_parallel"},
                                             {"--schedule=gpipe", "--schedule"},
                                             {"--pp_layers=1", "--pp_layers"},
                                             {"--allreduce=naive", "--allreduce"},
                                             {"--bucket_mb=1", "--bucket_mb"},
                                             {"--grad_comm_dtype=bf16", "--grad_comm_dtype"},
                                             {"--fp32_grad_accum", "--fp32_grad_accum"},
                                             {"--cp_comm=a2a", "--cp_comm"},
                                             {"--cp_load_balance=none", "--cp_load_balance"},
                                             {"--cp=2 --cp_comm=a2a --cp_load_balance=none",
                                              "--cp_load_balance"}}) {
    Result r = RunCommand(kTrain + kTiny + " --steps=1 " + w.flags);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_TRUE(absl::StrContains(r.output, "[flags] warning: " + w.flag + " has no effect"))
        << w.flags << ": " << r.output;
  }
  Result quiet = RunCommand(kTrain + kTiny + " --steps=1 --dp=2 --allreduce=naive");
  EXPECT_FALSE(absl::StrContains(quiet.output, "warning")) << quiet.output;
  // The cp ranks' replicas sum their gradients: the dp group's flags have an effect.
  quiet = RunCommand(kTrain + kTiny + " --steps=1 --cp=2 --allreduce=naive --overlap=on");
  EXPECT_FALSE(absl::StrContains(quiet.output, "warning")) << quiet.output;
}

TEST(BadInput, PrecisionsAreFp32OrBf16) {
  ExpectOneClearLine(kTrain + kTiny, {
      {"--precision=fp16", "[flags] --precision must be fp32 or bf16, got 'fp16'"},
      {"--grad_comm_dtype=int8", "[flags] --grad_comm_dtype must be fp32 or bf16, got 'int8'"},
  });
  ExpectOneClearLine(kPlan, {{"--precision=fp8", "--precision must be fp32 or bf16, got 'fp8'"},
                             {"--grad_accum=fp16", "--grad_accum must be fp32 or bf16, got 'fp16'"}}, 5);
  ExpectOneClearLine(kModelBench, {{"--precision=fp32,half", "--precision must be fp32 or bf16, got 'half'"}}, 5);
  for (const char* flags : {"--fp32_grad_accum", "--grad_comm_dtype=bf16"}) {
    Result r = RunCommand(kTrain + kTiny + " --steps=1 " + flags);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_TRUE(absl::StrContains(r.output, "[flags] warning: ")) << flags << ": " << r.output;
  }
}

// --slow_rank names a rank of the run and milliseconds its peers can wait for; a cluster
// file's every figure is a positive, finite number.
TEST(BadInput, SlowRanksAndClusterFilesAreCheckedBeforeAnyWork) {
  ExpectOneClearLine(kTrain + kTiny + " --dp=2", {
      {"--slow_rank=2:20", "--slow_rank=2:20: rank 2 is not in the run's 2 ranks (0..1)"},
      {"--slow_rank=1:-5", "the milliseconds must be > 0 and below --timeout_s (60000 ms)"},
      {"--slow_rank=1:0", "the milliseconds must be > 0"},
      {"--slow_rank=1:nan", "the milliseconds must be > 0"},
      {"--slow_rank=1:inf", "the milliseconds must be > 0"},
      {"--slow_rank=1:60000", "below --timeout_s (60000 ms)"},
      {"--slow_rank=1", "--slow_rank must be RANK:MS"},
      {"--slow_rank=-1:5", "--slow_rank must be RANK:MS"},
      {"--slow_rank=one:5", "--slow_rank must be RANK:MS"},
  });
  ExpectOneClearLine(kTrain + kTiny, {{"--slow_rank=0:5", "--slow_rank needs more than one rank"}});
  ExpectOneClearLine(kTrain + kTiny + " --dp=2", {
      {"--repeat=0", "--repeat must be in [1, 100]"},
      {"--repeat=-3", "--repeat must be in [1, 100]"},
      {"--repeat=101", "--repeat must be in [1, 100]"},
      {"--repeat=2147483647", "--repeat must be in [1, 100]"},
      {"--repeat=2 --dry_run", "a dry run computes nothing to measure"},
      {"--recompute_granularity=attention", "--recompute_granularity must be full or selective"},
      {"--recompute_method=block", "--recompute_method must be stage or layer"},
  });
  // A flat-rate file and a roofline one, each made bad one way at a time.
  const std::string flat = R"({"gpus_per_node": 8, "tflops": 156, "intra": [600, 1], "inter": [25, 2]})";
  const std::string roofline =
      R"({"gpus_per_node": 8, "peak_tflops": 312, "hbm": [2039, 0.9], )"
      R"("matmul_efficiency": [[0.01, 0.1], [10, 0.62]], "intra": [300, 1, 0.8], "inter": [25, 2, 0.9]})";
  std::vector<Case> cases;
  int i = 0;
  for (const auto& [good, from, to, message] :
       std::vector<std::tuple<std::string, std::string, std::string, std::string>>{
           {roofline, "\"peak_tflops\": 312", "\"peak_tflops\": 0", "peak_tflops must be a number in [0.001, 1e+06]"},
           {roofline, "\"peak_tflops\": 312", "\"peak_tflops\": 312, \"tflops\": 156",
            "give one of tflops (a flat rate) and peak_tflops"},
           {roofline, "[2039, 0.9]", "[0, 0.9]", "hbm must be [GB/s in [0.001, 1e6], share in [0.001, 1]]"},
           {roofline, "[2039, 0.9]", "[2039, 1.5]", "hbm must be [GB/s in [0.001, 1e6], share in [0.001, 1]]"},
           {roofline, "[2039, 0.9]", "[1e999, 0.9]", "hbm must be [GB/s in [0.001, 1e6], share in [0.001, 1]]"},
           {roofline, "[10, 0.62]", "[0.001, 0.62]", "matmul_efficiency's sizes must increase"},
           {roofline, "[10, 0.62]", "[10, 0]", "matmul_efficiency must be a list of [GFLOP in [1e-9, 1e9]"},
           {roofline, "[10, 0.62]", "[10, 1.2]", "matmul_efficiency must be a list of [GFLOP in [1e-9, 1e9]"},
           {roofline, "[0.01, 0.1]", "[-1, 0.1]", "matmul_efficiency must be a list of [GFLOP in [1e-9, 1e9]"},
           {roofline, "[300, 1, 0.8]", "[300, 1, 0]", "intra must be [GB/s, microseconds] or"},
           {roofline, "[25, 2, 0.9]", "[25, 2, 2]", "inter must be [GB/s, microseconds] or"},
           {roofline, "\"hbm\": [2039, 0.9], ", "", "hbm must be [GB/s in [0.001, 1e6], share in [0.001, 1]]"},
           {flat, "\"tflops\": 156", "\"tflops\": 0", "tflops must be a number in [0.001, 1e+06]"},
           {flat, "\"tflops\": 156", "\"tflops\": -1", "tflops must be a number in [0.001, 1e+06]"},
           {flat, "\"tflops\": 156", "\"tflops\": 1e999", "tflops must be a number in [0.001, 1e+06]"},
           {flat, "[600, 1]", "[0, 1]", "intra must be [GB/s, microseconds] or"},
           {flat, "[600, 1]", "[600, 0]", "intra must be [GB/s, microseconds] or"},
           {flat, "[25, 2]", "[-25, 2]", "inter must be [GB/s, microseconds] or"},
           {flat, "[25, 2]", "[25, -2]", "inter must be [GB/s, microseconds] or"},
           {flat, "\"gpus_per_node\": 8", "\"gpus_per_node\": 0", "gpus_per_node must be an integer"},
           // Absurd but positive: refused, never a modelled time of inf or a -nan% share.
           {flat, "\"tflops\": 156", "\"tflops\": 1e-320", "tflops must be a number in [0.001, 1e+06]"},
           {flat, "[25, 2]", "[1e-320, 2]", "inter must be [GB/s, microseconds] or"},
           {flat, "[25, 2]", "[25, 1e300]", "inter must be [GB/s, microseconds] or"},
           {roofline, "[300, 1, 0.8]", "[300, 1, 1e-320]", "intra must be [GB/s, microseconds] or"},
           {roofline, "[2039, 0.9]", "[1e-320, 0.9]", "hbm must be [GB/s in [0.001, 1e6]"},
           {roofline, "[10, 0.62]", "[1e300, 0.62]", "matmul_efficiency must be a list of [GFLOP in [1e-9, 1e9]"},
       }) {
    const std::string file = Temp("cluster" + std::to_string(i++) + ".json");
    std::string text = good;
    text.replace(text.find(from), from.size(), to);
    std::ofstream(file) << text;
    cases.push_back({"--cluster=" + file, message});
  }
  ExpectOneClearLine(kTrain + kTiny + " --dp=2", cases);
  ExpectOneClearLine(kPlan, cases, 5);
}

// No exception escapes a program's main: RunExample turns it into one line and exit 1.
TEST(BadInput, AnExceptionIsOneLineAndExitCodeOne) {
  char program[] = "tally_test";
  char* argv[] = {program, nullptr};
  ::testing::internal::CaptureStderr();
  const int code = RunExample(1, argv, "test", []() -> absl::Status { throw std::bad_alloc(); });
  const std::string said = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(code, 1);
  EXPECT_EQ(said, "out of memory (std::bad_alloc); try smaller sizes\n");
}

}  // namespace
}  // namespace tally
