// tally_train and tally_bench under mpirun, as a user runs them (ctest label mpi): a 3D
// run on 8 processes trains exactly as on 8 threads; a wrong process count, a failing
// rank, a killed rank and a stopped rank each end the job with a message, not a hang.
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "core/runtime/clock.h"
#include "core/runtime/json_reader.h"
#include "tests/e2e/run_command.h"

namespace tally {
namespace {

const std::string kMpirun = TALLY_MPIRUN;
const std::string kTrain = TALLY_TRAIN_BINARY;
const std::string kBench = TALLY_BENCH_BINARY;
const std::string kTiny =
    " --n_layer=2 --n_head=2 --n_embd=32 --seq_len=32 --threads=1 --sample_bytes=0";

std::string Mpirun(int processes, const std::string& program_and_flags) {
  return absl::StrCat(kMpirun, " -np ", processes, " ", program_and_flags);
}

// Each JSON line of a --metrics_json file.
std::vector<JsonValue> MetricsLines(const std::string& path) {
  std::vector<JsonValue> lines;
  std::string text = RunCommand("cat " + path).output;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    absl::StatusOr<JsonValue> doc = ParseJson(std::string(line));
    EXPECT_TRUE(doc.ok()) << line;
    if (doc.ok()) lines.push_back(*doc);
  }
  return lines;
}

int Occurrences(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// The report's traffic rows up to the bytes (the times differ from run to run).
std::vector<std::string> TrafficRows(const std::string& output) {
  std::vector<std::string> rows;
  for (absl::string_view line : absl::StrSplit(output, '\n')) {
    for (const char* group : {"dp ", "tp ", "pp ", "embedding ", "world "}) {
      if (absl::StartsWith(line, group)) rows.push_back(std::string(line.substr(0, 110)));
    }
  }
  return rows;
}

TEST(MpiTrain, ThreeDRunIsBitIdenticalToTheThreadsRun) {
  const std::string flags = kTiny +
                            " --dp=2 --tp=2 --pp=2 --zero=1 --sequence_parallel --schedule=1f1b "
                            "--global_batch_size=8 --micro_batch_size=2 --steps=3 --eval_every=3 --report=full";
  const std::string on_mpi = ::testing::TempDir() + "/mpi_metrics.json";
  const std::string on_threads = ::testing::TempDir() + "/threads_metrics.json";
  Result mpi = RunCommand(Mpirun(8, kTrain + " --backend=mpi" + flags + " --metrics_json=" + on_mpi));
  ASSERT_EQ(mpi.exit_code, 0) << mpi.output;
  Result threads = RunCommand(kTrain + flags + " --metrics_json=" + on_threads);
  ASSERT_EQ(threads.exit_code, 0) << threads.output;

  std::vector<JsonValue> a = MetricsLines(on_mpi), b = MetricsLines(on_threads);
  ASSERT_EQ(a.size(), 4u);  // 3 steps and an evaluation
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    for (const char* field : {"loss", "grad_norm", "val_loss"}) {
      const JsonValue* x = a[i].Find(field);
      const JsonValue* y = b[i].Find(field);
      ASSERT_EQ(x == nullptr, y == nullptr) << field;
      if (x != nullptr) {
        EXPECT_EQ(x->number, y->number) << field << " line " << i;
      }
    }
  }
  // The report is printed once, by rank 0, and books the same bytes on every row.
  EXPECT_EQ(Occurrences(mpi.output, "traffic over"), 1) << mpi.output;
  std::vector<std::string> rows = TrafficRows(mpi.output);
  EXPECT_GT(rows.size(), 10u);
  EXPECT_EQ(rows, TrafficRows(threads.output));
}

// Nodes placed by --gpus_per_node override the real one: under mpirun the hierarchical
// all-reduce books, row by row and link by link, what it books on threads.
TEST(MpiTrain, PlacedNodesAndTheHierarchicalAllReduceBookTheThreadsBytes) {
  const std::string flags = kTiny + " --dp=4 --gpus_per_node=2 --allreduce=hierarchical "
                                    "--global_batch_size=4 --steps=2 --eval_every=0 --report=full";
  Result mpi = RunCommand(Mpirun(4, kTrain + " --backend=mpi" + flags));
  ASSERT_EQ(mpi.exit_code, 0) << mpi.output;
  Result threads = RunCommand(kTrain + flags);
  ASSERT_EQ(threads.exit_code, 0) << threads.output;
  EXPECT_TRUE(absl::StrContains(mpi.output, "dp        all_reduce      hier   backward")) << mpi.output;
  EXPECT_TRUE(absl::StrContains(mpi.output, "bytes sent per rank by link (2 nodes")) << mpi.output;
  EXPECT_EQ(TrafficRows(mpi.output), TrafficRows(threads.output));
}

TEST(MpiTrain, NativeCollectivesAreMarkedModelled) {
  Result r = RunCommand(Mpirun(2, kTrain + " --backend=mpi --native_collectives --dp=2" + kTiny +
                                      " --global_batch_size=4 --steps=2 --eval_every=0 --report=full"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "dp        all_reduce      native backward")) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "booked as the ring's, not observed")) << r.output;
}

TEST(MpiTrain, AProcessCountThatIsNotTheGridIsOneMessage) {
  Result r = RunCommand(Mpirun(3, kTrain + " --backend=mpi --dp=2 --tp=2" + kTiny + " --steps=1"));
  EXPECT_NE(r.exit_code, 0);
  const std::string message = "mpirun started 3 processes; the run needs 4";
  EXPECT_TRUE(absl::StrContains(r.output, message)) << r.output;
  EXPECT_EQ(Occurrences(r.output, message), 1) << r.output;  // said by rank 0 alone
}

// Under mpirun, a threads run (the default backend) in every process is refused, by rank 0
// alone: N copies of one job would interleave their output and all exit 0.
TEST(MpiTrain, ThreadsUnderMpirunIsOneMessage) {
  const std::string message = "mpirun started 2 processes, and --backend=threads would run the whole job in each";
  for (const std::string& program : {kTrain + kTiny + " --dp=2 --steps=1", kBench + " --op=all_reduce -b 4 -e 4"}) {
    Result r = RunCommand(Mpirun(2, program));
    EXPECT_NE(r.exit_code, 0) << r.output;
    EXPECT_EQ(Occurrences(r.output, message), 1) << r.output;
    EXPECT_FALSE(absl::StrContains(r.output, "step     1")) << r.output;  // nothing trained
  }
}

// --backend=nccl under mpirun (MPI bootstraps NCCL): without a GPU, or without one per
// process, the job ends in one line.
TEST(MpiTrain, NcclWithoutAGpuPerProcessIsOneMessage) {
  Result r = RunCommand(Mpirun(2, kTrain + kTiny +
                                      " --device=cuda --backend=nccl --dp=2 "
                                      "--global_batch_size=4 --steps=1 --eval_every=0"));
  if (r.exit_code == 0) GTEST_SKIP() << "two GPUs are here, and the job trained on them";
  EXPECT_NE(r.exit_code, 0) << r.output;
  const bool no_gpu = absl::StrContains(r.output, "[cuda] no GPU") ||
                      absl::StrContains(r.output, "[cuda] this build has no CUDA");
  EXPECT_TRUE(no_gpu || absl::StrContains(r.output, "needs GPU 1, and this machine has 1"))
      << r.output;
  if (no_gpu) {
    EXPECT_EQ(Occurrences(r.output, "[cuda]"), 1) << r.output;  // rank 0 alone
  }
}

TEST(MpiTrain, AFailingRankEndsTheJobWithItsMessage) {
  // A file that is there (checked before the run) but no checkpoint (found by the ranks).
  const std::string bad = ::testing::TempDir() + "/not_a_checkpoint.safetensors";
  std::ofstream(bad, std::ios::binary | std::ios::trunc) << "not a checkpoint";
  Result r = RunCommand(Mpirun(2, kTrain + " --backend=mpi --dp=2" + kTiny + " --steps=1 --load=" + bad));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(absl::StrContains(r.output, " failed: ")) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, bad)) << r.output;
  // A missing file is found before the run: one line, from rank 0.
  Result missing = RunCommand(Mpirun(2, kTrain + " --backend=mpi --dp=2" + kTiny +
                                            " --steps=1 --load=/no/such/checkpoint"));
  EXPECT_EQ(missing.exit_code, 1) << missing.output;
  EXPECT_TRUE(absl::StrContains(missing.output, "[checkpoint] cannot open '/no/such/checkpoint'"))
      << missing.output;
  EXPECT_EQ(missing.output.find("[checkpoint]"), missing.output.rfind("[checkpoint]")) << missing.output;
}

// Starts a 2-process run in the background, waits for its second step, sends `signal` to
// one rank (a process whose command line starts with tally_train: not mpirun), and
// returns what the job printed by the time it ended.
Result SignalARank(const std::string& signal, const std::string& extra_flags) {
  const std::string log = ::testing::TempDir() + "/signal_" + signal + ".log";
  const std::string script = ::testing::TempDir() + "/signal_" + signal + ".sh";
  // The seed tells this job's ranks from those of a test running beside it.
  const int seed = signal == "KILL" ? 101 : signal == "STOP" ? 202 : 303;
  const std::string command = absl::StrCat(kTrain, " --backend=mpi --seed=", seed);
  std::ofstream(script) << "rm -f " << log << "\n("
                        << Mpirun(2, command + " --dp=2" + kTiny +
                                         " --global_batch_size=4 --steps=20000 --eval_every=0" + extra_flags)
                        << " > " << log << " 2>&1; echo \"exit code $?\" >> " << log << ") &\n"
                        << "for i in $(seq 600); do grep -q 'step     2/' " << log
                        << " 2>/dev/null && break; sleep 0.1; done\n"
                        << "kill -" << signal << " $(pgrep -f '^" << command << " ' | head -1)\n"
                        << "wait\ncat " << log << "\n";
  return RunCommand("bash " + script);
}

TEST(MpiFaults, AKilledRankEndsTheJobNamingIt) {
  const int64_t start = MonotonicNanos();
  Result r = SignalARank("KILL", "");
  EXPECT_LT(SecondsSince(start), 60);
  EXPECT_TRUE(absl::StrContains(r.output, "step     2/")) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "exited on signal 9")) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "process rank ")) << r.output;
  EXPECT_FALSE(absl::StrContains(r.output, "exit code 0")) << r.output;
}

TEST(MpiFaults, AStoppedRankEndsTheJobAtTheDeadline) {
  const int64_t start = MonotonicNanos();
  Result r = SignalARank("STOP", " --timeout_s=3");
  EXPECT_LT(SecondsSince(start), 60);
  EXPECT_TRUE(absl::StrContains(r.output, "deadline exceeded")) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "failed: [")) << r.output;
  EXPECT_FALSE(absl::StrContains(r.output, "exit code 0")) << r.output;
}

// A signal to one rank stops every rank at the same step boundary (they agree before
// each step); the job saves, says so once, and exits 128 + the signal.
TEST(MpiFaults, AnInterruptedRankStopsTheJobTogether) {
  const std::string ckpt = ::testing::TempDir() + "/mpi_interrupted.safetensors";
  std::remove(ckpt.c_str());
  Result r = SignalARank("INT", " --save=" + ckpt);
  EXPECT_TRUE(absl::StrContains(r.output, "[train] stopped by SIGINT after step ")) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "saved '" + ckpt + "' at step ")) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "exit code 130")) << r.output;
  EXPECT_FALSE(absl::StrContains(r.output, "failed")) << r.output;
  Result resumed = RunCommand(Mpirun(2, kTrain + " --backend=mpi --dp=2" + kTiny +
                                            " --global_batch_size=4 --eval_every=0 --steps=1 --load=" + ckpt));
  EXPECT_TRUE(absl::StrContains(resumed.output, "is before it")) << resumed.output;
}

TEST(MpiBench, OurAlgorithmsAndMpisOwnCheckOut) {
  Result r = RunCommand(Mpirun(3, kBench + " --backend=mpi --op=all --algorithm=all -b 4 -e 64K -f 16 -n 2 -w 1"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "3 MPI processes")) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "Out of bounds values : 0 OK")) << r.output;
  EXPECT_TRUE(absl::StrContains(r.output, "all_reduce     native")) << r.output;
  // Every rank's ledger equals the exact formula (native: the ring's, by construction).
  EXPECT_TRUE(absl::StrContains(r.output, "Ledger vs exact formula: 0 of")) << r.output;
}

}  // namespace
}  // namespace tally
