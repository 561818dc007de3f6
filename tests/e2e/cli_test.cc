// The programs as a user runs them: bad input is one clear line on stderr and a non-zero
// exit, never a crash; a small run writes its log, metrics and checkpoint.
#include <algorithm>
#include <fstream>
#include <map>
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
const std::string kBench = TALLY_BENCH_BINARY;
const std::string kPlan = TALLY_PLAN_BINARY;
const std::string kTiny = " --n_layer=1 --n_head=2 --n_embd=32 --seq_len=32 --threads=1";

// Whether a run's output says, in CUDA's words, that there is no GPU to run on.
bool SaysThereIsNoGpu(const std::string& output) {
  return absl::StrContains(output, "[cuda] no GPU") ||
         absl::StrContains(output, "[cuda] this build has no CUDA");
}

TEST(TallyTrain, BadInputIsOneClearLineAndExitCodeOne) {
  std::string truncated = ::testing::TempDir() + "/truncated.safetensors";
  std::ofstream(truncated, std::ios::binary) << std::string("\x40\x00\x00\x00\x00\x00\x00\x00{\"a\"", 12);
  struct Case {
    std::string flags, message;
  };
  Case cases[] = {
      {"--n_head=3", "n_embd (256) must be divisible by n_head (3)"},
      {"--n_embd=0", "n_embd must be positive"},
      {"--steps=-1", "--steps must be >= 0"},
      {"--micro_batch_size=3", "must be a multiple of --dp x --micro_batch_size"},
      {"--optimizer=lamb", "--optimizer must be adamw or sgd"},
      {"--device=tpu", "--device must be cpu or cuda"},
      {"--backend=gloo", "--backend must be threads, mpi or nccl"},
      {"--backend=nccl", "--backend=nccl needs --device=cuda"},
      {"--native_collectives", "--native_collectives needs --backend=mpi or nccl"},
      {"--data=/no/such/file", "cannot open '/no/such/file'"},
      {"--load=" + truncated, "is not a valid safetensors file"},
      {"--steps=abc", "Illegal value"},
      {"--tp=3", "--n_head=4 must be divisible by --tp=3"},
      {"--tp=2 --sequence_parallel --seq_len=33", "--seq_len=33 must be divisible by --tp=2"},
      {"--zero=4", "--zero must be 0, 1, 2 or 3"},
      {"--sample_only", "--sample_only samples a checkpoint's model: give --load=PATH"},
      {"--prompt=", "--prompt is empty: leave it out to sample after a newline"},
      {"--sample_only --load=" + truncated + " --trace=t.json", "--trace with --sample_only"},
      {"--report=xml", "--report must be text, full, json or csv"},
      {"--pp=5", "--pp=5 is more stages than the 4 layers"},
      {"--pp=2 --pp_layers=3,2", "--pp_layers sums to 5 layers"},
      {"--pp=2 --pp_layers=3,x", "--pp_layers wants integers, got 'x'"},
      {"--pp=2 --schedule=zb", "--schedule must be gpipe, 1f1b or interleaved"},
      {"--pp=2 --schedule=interleaved", "--schedule=interleaved needs --virtual_stages >= 2"},
      {"--pp=2 --virtual_stages=2", "--virtual_stages=2 needs --schedule=interleaved"},
      {"--pp=2 --schedule=interleaved --virtual_stages=2147483647",
       "is 4294967294 chunks, more than the 4 layers"},
      {"--n_experts=4 --capacity_factor=nan", "capacity_factor must be a finite number >= 0"},
      {"--pp=4 --schedule=interleaved --virtual_stages=2 --global_batch_size=16",
       "8 chunks, more than the 4 layers"},
      {"--pp=2 --schedule=interleaved --virtual_stages=2 --global_batch_size=12 "
       "--micro_batch_size=4",
       "3 micro-batches a step (--global_batch_size / (--dp x --micro_batch_size)) is not a "
       "multiple of --pp=2"},
      {"--dp=0", "--dp must be >= 1"},
      {"--dp=2 --ep=2", "--ep=2 splits experts over ranks: it needs --n_experts"},
      {"--n_experts=4 --dp=2 --ep=4", "--ep=4 must divide --dp=2"},
      {"--n_experts=6 --dp=4 --ep=4", "--n_experts=6 must be divisible by --ep=4"},
      {"--n_experts=4 --tp=2 --sequence_parallel", "--n_experts with --sequence_parallel"},
      {"--vocab_size=32000", "--vocab_size=32000 needs --dry_run"},
      {"--dry_run --save=x.safetensors", "--save with --dry_run: a dry run has no values"},
      {"--dry_run --check_against_serial", "--check_against_serial with --dry_run"},
      {"--dry_run --device=cuda", "--dry_run runs on --backend=threads --device=cpu"},
      {"--cluster=tpu", "--cluster must be a100, h100 or a JSON file"},
      {"--no_such_flag=1", "Unknown command line flag 'no_such_flag'"},
      {"--stesp=3", "Unknown command line flag 'stesp' (did you mean --steps?)"},
      {"--micro_batch=2", "(did you mean --micro_batch_size?)"},
  };
  for (const Case& c : cases) {
    Result r = RunCommand(kTrain + " " + c.flags);
    EXPECT_NE(r.exit_code, 0) << c.flags;
    EXPECT_TRUE(absl::StrContains(r.output, c.message)) << c.flags << ": " << r.output;
    EXPECT_FALSE(absl::StrContains(r.output, "CHECK failed")) << r.output;
  }
}

// -h and --help print every flag with its default as written and exit 0, for each program.
TEST(TallyTrain, HelpListsTheFlagsAndExitsZero) {
  for (const char* help : {" --help", " -h"}) {
    Result r = RunCommand(kTrain + help);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_TRUE(absl::StrContains(r.output, "train a byte-level GPT")) << r.output;
    for (const char* line : {"  --steps=200\n", "  --lr=0.001\n", "  --temperature=0.8\n", "  --dp=1\n"}) {
      EXPECT_TRUE(absl::StrContains(r.output, line)) << line << r.output;
    }
    EXPECT_FALSE(absl::StrContains(r.output, "0.0010000000")) << r.output;
    EXPECT_FALSE(absl::StrContains(r.output, "--flagfile")) << r.output;  // abseil's own
    // By section, in order, each flag once, and none left over.
    size_t last = 0;
    for (const char* section : {"\nmodel:\n", "\ntraining:\n", "\ndata and evaluation:\n", "\nsampling:\n",
                                "\ncheckpoints:\n",
                                "\ndata parallelism and ZeRO:\n", "\npipeline parallelism and recompute:\n",
                                "\nreports and checks:\n"}) {
      const size_t at = r.output.find(section);
      ASSERT_NE(at, std::string::npos) << section << r.output;
      EXPECT_GT(at, last) << section;
      last = at;
    }
    EXPECT_FALSE(absl::StrContains(r.output, "\nother:\n")) << r.output;
    EXPECT_LT(r.output.find("  --n_layer="), r.output.find("\ntraining:\n"));
    EXPECT_GT(r.output.find("  --prompt="), r.output.find("\nsampling:\n"));
    EXPECT_EQ(r.output.find("  --dp="), r.output.rfind("  --dp="));
  }
}

// tally_plan's flags by section too, every one in a section.
TEST(TallyPlan, HelpListsTheFlagsBySection) {
  Result r = RunCommand(kPlan + " --help");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  size_t last = 0;
  for (const char* section : {"\nmodel:\n", "\nbatch and precision:\n", "\ndata parallelism and ZeRO:\n",
                              "\ntensor and expert parallelism:\n",
                              "\npipeline parallelism and recompute:\n", "\nthe cluster:\n",
                              "\nwhat to print:\n", "\n--search and --explain: the fastest grids that fit, the seed's flow:\n"}) {
    const size_t at = r.output.find(section);
    ASSERT_NE(at, std::string::npos) << section << r.output;
    EXPECT_GT(at, last) << section;
    last = at;
  }
  EXPECT_FALSE(absl::StrContains(r.output, "\nother:\n")) << r.output;
  EXPECT_GT(r.output.find("  --gpu_memory_gb=80\n"), last) << r.output;
}

TEST(TallyTrain, SmallRunLogsWritesMetricsAndSamples) {
  std::string metrics = ::testing::TempDir() + "/metrics.jsonl";
  std::string ckpt = ::testing::TempDir() + "/run.safetensors";
  Result r = RunCommand(kTrain + kTiny + " --steps=4 --eval_every=2 --sample_bytes=20 --metrics_json=" +
                 metrics + " --save=" + ckpt);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "step     4/4 | loss")) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "val loss")) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "sample (temperature 0.8, top-k 40)")) << r.output;
  std::ifstream in(metrics);
  std::string line;
  int steps = 0, evals = 0;
  while (std::getline(in, line)) {
    JsonValue v = ParseJson(line).value();
    if (v.Find("val_loss") != nullptr) {
      ++evals;
      continue;
    }
    ++steps;
    for (const char* key : {"step", "loss", "lr", "grad_norm", "ms", "tokens_per_s"}) {
      EXPECT_NE(v.Find(key), nullptr) << key << " in " << line;
    }
  }
  EXPECT_EQ(steps, 4);
  EXPECT_EQ(evals, 2);
  // Resuming from the final checkpoint with more steps continues at step 5.
  Result more = RunCommand(kTrain + kTiny + " --steps=5 --eval_every=0 --sample_bytes=0 --load=" + ckpt);
  ASSERT_EQ(more.exit_code, 0) << more.output;
  EXPECT_TRUE(absl::StrContains(more.output, "resumed from")) << more.output;
  EXPECT_TRUE(absl::StrContains(more.output, "step     5/5")) << more.output;
  EXPECT_FALSE(absl::StrContains(more.output, "step     4/5")) << more.output;
}

// Without a GPU: one line that says why (no driver, no device, no CUDA in the build).
// With one the run trains (cuda_train_test checks it against the CPU).
TEST(TallyTrain, DeviceCudaWithoutAGpuSaysWhy) {
  Result r =
      RunCommand(kTrain + kTiny + " --device=cuda --steps=1 --eval_every=0 --sample_bytes=0");
  if (r.exit_code == 0) GTEST_SKIP() << "a GPU is here, and the run trained on it";
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(SaysThereIsNoGpu(r.output)) << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
}

// What the GPU path does not run is refused in one line, GPU or not.
TEST(TallyTrain, DeviceCudaRefusesMpi) {
  Result r = RunCommand(kTrain + kTiny + " --device=cuda --backend=mpi --steps=1");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "MPI moving GPU memory is not built")) << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
}

// NCCL takes a GPU per rank: without a GPU, or with fewer than the ranks, one line says so.
TEST(TallyTrain, BackendNcclWithoutAGpuPerRankSaysWhy) {
  Result r = RunCommand(kTrain + kTiny +
                        " --device=cuda --backend=nccl --dp=2 --global_batch_size=4 --steps=1 "
                        "--eval_every=0 --sample_bytes=0");
  if (r.exit_code == 0) GTEST_SKIP() << "two GPUs are here, and the run trained on them";
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(SaysThereIsNoGpu(r.output) ||
              absl::StrContains(r.output, "2 ranks need 2 GPUs, and this machine has 1"))
      << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
}

TEST(TallyBench, BadInputIsOneClearLineAndExitCodeOne) {
  struct Case {
    std::string flags, message;
  };
  Case cases[] = {
      {"--backend=gloo", "--backend must be threads, mpi or nccl"},
      {"--device=tpu", "--device must be cpu or cuda"},
      {"--backend=nccl", "--backend=nccl needs --device=cuda"},
      {"--algorithm=native", "--algorithm=native needs --backend=mpi or nccl"},
      {"-b 1K -e 8", "need 0 <= -b <= -e"},
  };
  for (const Case& c : cases) {
    Result r = RunCommand(kBench + " " + c.flags);
    EXPECT_EQ(r.exit_code, 1) << c.flags << ": " << r.output;
    EXPECT_TRUE(absl::StrContains(r.output, c.message)) << c.flags << ": " << r.output;
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << c.flags << ": " << r.output;
  }
}

// GPU buffers, over the threads transport or NCCL: without a GPU, one line says why.
// Two nodes of 3 ranks: every algorithm's bytes across nodes, per rank, as the formula
// says; the hierarchical all-reduce sends a third of the ring's busiest rank's.
TEST(TallyBench, NodesSplitEveryRowAndTheHierarchicalRingCrossesLess) {
  Result r = RunCommand(kBench + " --ranks=6 --gpus_per_node=3 --algorithm=all -b 6K -e 6K -n 1 -w 0");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "inter/rank")) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "0 of 4 rows differ")) << r.output;
  // 6 KiB: the ring's edge ranks send 2·5/6·6144 = 10240 bytes across; hierarchical
  // 2·(2-1)/2·6144/3 = 2048 on every rank.
  EXPECT_TRUE(absl::StrContains(r.output, "10240          10240          10240          10240"))
      << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "10240           2048           2048")) << r.output;
}

TEST(TallyBench, GpuBuffersWithoutAGpuSayWhy) {
  for (const char* flags : {" --device=cuda", " --device=cuda --backend=nccl --ranks=1"}) {
    Result r = RunCommand(kBench + flags + " -b 4 -e 64 -n 1 -w 0");
    if (r.exit_code == 0) GTEST_SKIP() << "a GPU is here, and the sweep ran on it";
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_TRUE(SaysThereIsNoGpu(r.output)) << r.output;
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  }
}

// A short tally_model_bench run: its rows in the JSON, each precision against its peak,
// the matmuls' share of the step, and the matmul-bound ceiling that share gives.
TEST(TallyModelBench, RowsGiveThePeakTheMatmulShareAndTheCeiling) {
  const std::string json = ::testing::TempDir() + "/model_bench.json";
  Result r = RunCommand(std::string(TALLY_MODEL_BENCH_BINARY) +
                        " --threads=1 --steps=2 --warmup=1 --precision=fp32,bf16 --n_layer=1 "
                        "--n_head=2 --n_embd=64 --seq_len=32 --batch=2 --json=" + json);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "of the peak    x 1 thread  in matmuls  matmul-bound"))
      << r.output;
  JsonValue doc = ReadJson(json);
  ASSERT_EQ(doc.array.size(), 2u) << r.output;
  for (const JsonValue& row : doc.array) {
    SCOPED_TRACE(row.Find("precision")->string);
    EXPECT_GT(row.Find("tokens_per_s")->number, 0.0);
    const double of_peak = row.Find("fraction_of_peak")->number;
    const double share = row.Find("matmul_share")->number;
    EXPECT_GT(of_peak, 0.0);
    EXPECT_GT(share, 0.0);
    EXPECT_LT(share, 1.0);
    EXPECT_NEAR(row.Find("matmul_bound_fraction_of_peak")->number, of_peak / share,
                1e-8 * of_peak / share);  // the JSON keeps 9 significant digits
  }
}

TEST(TallyTrain, DataParallelRunPrintsTheTrafficReportAndWritesJson) {
  std::string json = ::testing::TempDir() + "/traffic.json";
  Result r = RunCommand(kTrain + kTiny + " --dp=2 --global_batch_size=4 --steps=2 --eval_every=0 "
                        "--sample_bytes=0 --report=full --traffic_json=" + json);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "dp=2 (zero=0) x tp=1 x pp=1")) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "measured on this host (wall clock), ms per step: the step; "
                                          "communication exposed"))
      << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "bound on the modelled clock, a100, the default")) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "traffic over 2 steps")) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "memory per rank")) << r.output;
  JsonValue doc = ReadJson(json);
  EXPECT_EQ(doc.Find("config")->Find("dp")->AsInt(), 2);
  EXPECT_EQ(doc.Find("steps")->AsInt(), 2);
  ASSERT_EQ(doc.Find("ranks")->array.size(), 2u);
  const JsonValue& rank1 = doc.Find("ranks")->array[1];
  EXPECT_GT(rank1.Find("memory")->Find("peak_total")->AsInt(), 0);
  // The time split: its parts add up to the step.
  const JsonValue& time = *rank1.Find("time");
  EXPECT_GT(time.Find("step_ms")->number, 0.0);
  EXPECT_NEAR(time.Find("compute_ms")->number + time.Find("comm_exposed_ms")->number +
                  time.Find("idle_ms")->number,
              time.Find("step_ms")->number, 1e-6 * time.Find("step_ms")->number);
  EXPECT_LE(time.Find("comm_hidden_ms")->number, time.Find("compute_ms")->number);
  bool found = false;
  for (const JsonValue& row : rank1.Find("traffic")->array) {
    if (row.Find("group")->string == "dp" && row.Find("phase")->string == "backward") {
      found = true;
      EXPECT_GT(row.Find("bytes_sent")->AsInt(), 0);
      EXPECT_GT(row.Find("busbw_gbps")->number, 0.0);
      EXPECT_GT(row.Find("seconds")->number, 0.0);
    }
  }
  EXPECT_TRUE(found) << "no dp backward row for rank 1";
}

// ZeRO-3 from the command line: every rank evaluates and samples (no rank holds the
// model), rank 0 alone prints; the whole checkpoint resumes on one plain rank.
TEST(TallyTrain, ZeroThreeEvaluatesSamplesAndSavesAWholeCheckpoint) {
  std::string ckpt = ::testing::TempDir() + "/zero3.safetensors";
  Result r = RunCommand(kTrain + kTiny + " --dp=2 --zero=3 --global_batch_size=4 --steps=2 "
                        "--eval_every=1 --sample_bytes=16 --report=full --save=" + ckpt);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto count = [&](const std::string& needle) {
    size_t n = 0;
    for (size_t at = r.output.find(needle); at != std::string::npos; at = r.output.find(needle, at + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count("val loss"), 2u) << r.output;
  EXPECT_EQ(count("sample (temperature"), 1u) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "all_gather      ring   forward")) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "all_gather      ring   eval")) << r.output;
  Result more = RunCommand(kTrain + kTiny + " --steps=3 --eval_every=0 --sample_bytes=0 --load=" + ckpt);
  ASSERT_EQ(more.exit_code, 0) << more.output;
  EXPECT_TRUE(absl::StrContains(more.output, "resumed from")) << more.output;
  EXPECT_TRUE(absl::StrContains(more.output, "step     3/3")) << more.output;
}

// dp x tp from the command line: the tensor-parallel rows per layer in the report and
// the grid coordinates in the JSON.
TEST(TallyTrain, TensorParallelRunReportsPerLayerRows) {
  std::string json = ::testing::TempDir() + "/tp.json";
  Result r = RunCommand(kTrain + kTiny + " --dp=2 --tp=2 --sequence_parallel --global_batch_size=4 "
                        "--steps=2 --eval_every=0 --sample_bytes=8 --report=full --traffic_json=" + json);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "dp=2 (zero=0) x tp=2 x pp=1")) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "tp        all_gather      ring   forward    layer0.attn")) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "tp        reduce_scatter  ring   backward   layer0.mlp")) << r.output;
  JsonValue doc = ReadJson(json);
  EXPECT_EQ(doc.Find("config")->Find("world")->AsInt(), 4);
  EXPECT_EQ(doc.Find("config")->Find("tp")->AsInt(), 2);
  const JsonValue& rank3 = doc.Find("ranks")->array[3];
  EXPECT_EQ(rank3.Find("dp")->AsInt(), 1);
  EXPECT_EQ(rank3.Find("tp")->AsInt(), 1);
}

// A pipeline from the command line: the schedule's chart, the boundary rows, the bubble.
TEST(TallyTrain, PipelineRunShowsTheScheduleBoundariesAndBubble) {
  Result r = RunCommand(kTrain + kTiny + " --n_layer=2 --pp=2 --global_batch_size=4 "
                        "--micro_batch_size=1 --schedule=gpipe --recompute --show_schedule "
                        "--steps=2 --eval_every=2 --sample_bytes=8 --report=full");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "stage 0 | F0 F1 F2 F3 .. .. B0 B1 B2 B3 |  20% idle")) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "pp        sendrecv        ring   forward    stage0->1")) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "theory (N-1)/(m+N-1) = 0.200")) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "val loss")) << r.output;
}

// The 8-rank 3D grid from the command line, with its topology.
TEST(TallyTrain, ThreeDRunPrintsTheTopologyAndEveryGroupsRows) {
  Result r = RunCommand(kTrain + kTiny + " --n_layer=2 --dp=2 --tp=2 --pp=2 --zero=1 "
                        "--sequence_parallel --print_topology --check_against_serial --global_batch_size=4 "
                        "--micro_batch_size=1 --steps=2 --eval_every=0 --sample_bytes=0 --report=csv");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "rank 5: dp 0 pp 1 tp 1 node 0 | dp group [5 7] | tp group [4 5] | pp group [1 5]"))
      << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "check against the single-rank run")) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "(within 1e-5)")) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "group,op,algorithm,phase,scope,calls")) << r.output;
  for (const char* group : {"dp,reduce_scatter,ring,backward", "tp,all_gather,ring,forward,layer0.attn",
                            "pp,sendrecv,ring,forward,stage0->1", "embedding,all_reduce"}) {
    EXPECT_TRUE(absl::StrContains(r.output, group)) << group << "\n" << r.output;
  }
}

// Experts over ep of the dp ranks with ZeRO, in another rank order, from the command
// line: the single-rank check, the edp rows and the routing table.
TEST(TallyTrain, ExpertParallelZeroRunMatchesTheSingleRank) {
  Result r = RunCommand(kTrain + kTiny + " --n_layer=2 --n_experts=4 --capacity_factor=1.25 "
                        "--dp=4 --ep=2 --tp=2 --zero=1 --order=dp-tp-pp --print_topology "
                        "--check_against_serial --global_batch_size=8 --steps=2 --eval_every=0 "
                        "--sample_bytes=0 --report=full");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "rank 0: dp 0 pp 0 tp 0 node 0 | dp group [0 1 2 3] | "
                                          "tp group [0 4] | pp group [0] | ep 0: ep group [0 1] | "
                                          "edp group [0 2]"))
      << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "(within 1e-5)")) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "edp       reduce_scatter  ring   backward")) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "routing per step, over 2 steps (E = 4, top 2;")) << r.output;
}

// A dry run of a LLaMA-7B-sized GPT on 4 data-parallel ranks: seconds, every row exact
// at real size, the model states its formula's.
TEST(TallyTrain, DryRunOfASevenBillionParameterModel) {
  Result r = RunCommand(kTrain + " --dry_run --n_layer=32 --n_embd=4096 --n_head=32 "
                        "--seq_len=2048 --vocab_size=32000 --dp=4 --global_batch_size=4 --steps=1 --report=full");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "6583623680 parameters")) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "dry run (meta tensors: no values, no payload)")) << r.output;
  // 2(N−1)/N of Φ fp32 values, over 1005 buckets of 25 MiB.
  EXPECT_TRUE(absl::StrContains(r.output, "dp        all_reduce      ring   backward   -                   "
                                          "1005            39501742080            39501742080"))
      << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "  formula     26334494720  26334494720  52668989440"))
      << r.output;
  EXPECT_FALSE(absl::StrContains(r.output, "measured on this host")) << r.output;
  // fp32 AdamW states and one micro-batch of 2048 tokens: far over an 80 GB GPU, said so.
  EXPECT_TRUE(absl::StrContains(r.output, "  over the GPU\n")) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "does NOT fit the 80 GB of a GPU of a100, the default")) << r.output;
}

// --trace: one process per rank, and the schedules' different orders on stage 0.
TEST(TallyTrain, TraceShowsEachRankAndTheScheduleOrder) {
  std::map<std::string, std::vector<std::string>> stage0;  // schedule -> compute spans
  for (const std::string schedule : {"gpipe", "1f1b"}) {
    std::string trace = ::testing::TempDir() + "/" + schedule + ".trace.json";
    Result r = RunCommand(kTrain + kTiny + " --n_layer=2 --pp=2 --global_batch_size=4 "
                          "--micro_batch_size=1 --steps=1 --eval_every=0 --sample_bytes=0 "
                          "--peer_matrix --schedule=" + schedule + " --trace=" + trace);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_TRUE(absl::StrContains(r.output, "bytes sent from rank (row) to rank (column)")) << r.output;
    JsonValue doc = ReadJson(trace);
    int processes = 0, flows = 0;
    for (const JsonValue& e : doc.Find("traceEvents")->array) {
      const std::string ph = e.Find("ph")->string;
      if (ph == "M" && e.Find("name")->string == "process_name") ++processes;
      if (ph == "s") ++flows;
      if (ph == "X" && e.Find("pid")->AsInt() == 0 && e.Find("tid")->AsInt() == 1) {
        stage0[schedule].push_back(e.Find("name")->string);
      }
    }
    EXPECT_EQ(processes, 2);
    EXPECT_EQ(flows, 8);  // 4 activations forward, 4 gradients back
  }
  EXPECT_EQ(stage0["gpipe"], (std::vector<std::string>{"forward 0", "forward 1", "forward 2", "forward 3",
                                                        "backward 0", "backward 1", "backward 2", "backward 3"}));
  EXPECT_EQ(stage0["1f1b"], (std::vector<std::string>{"forward 0", "forward 1", "backward 0", "forward 2",
                                                       "backward 1", "forward 3", "backward 2", "backward 3"}));
}

}  // namespace
}  // namespace tally
