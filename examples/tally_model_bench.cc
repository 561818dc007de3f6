// tally_model_bench: training throughput of one rank next to the machine's sgemm peak.
//
//   tally_model_bench --threads=1,2 --steps=10
//
// For each thread count it first measures OpenBLAS sgemm on square matrices (the best
// GFLOP/s over a few sizes and runs: the peak a GEMM-bound trainer can approach), then
// trains the model (default L=4, H=4, C=256, T=128, global batch 8, AdamW) for --warmup
// + --steps steps on the embedded corpus and reports the timed steps' tokens/s and model
// GFLOP/s (6·params + 12·L·C·T per token), and that as a fraction of the sgemm peak.
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "examples/example_main.h"
#include "runtime/clock.h"
#include "runtime/json_writer.h"
#include "runtime/kernels/cpu/gemm.h"
#include "runtime/status_macros.h"
#include "train/trainer.h"

ABSL_FLAG(std::string, threads, "1,2", "comma-separated intra-op thread counts to measure");
ABSL_FLAG(int, steps, 10, "timed training steps per thread count");
ABSL_FLAG(int, warmup, 2, "untimed steps first");
ABSL_FLAG(int, n_layer, 4, "transformer blocks");
ABSL_FLAG(int, n_head, 4, "attention heads");
ABSL_FLAG(int, n_embd, 256, "channels");
ABSL_FLAG(int, seq_len, 128, "sequence length");
ABSL_FLAG(int, batch, 8, "sequences per step (one micro-batch)");
ABSL_FLAG(std::string, json, "", "also write the rows as JSON here");

namespace tally {
namespace {

// Best sgemm GFLOP/s over square sizes 512..2048 and three runs each.
double SgemmPeakGflops() {
  double best = 0;
  for (int n : {512, 1024, 2048}) {
    std::vector<float> a(size_t(n) * n, 0.5f), b(size_t(n) * n, 0.25f), c(size_t(n) * n);
    for (int run = 0; run < 3; ++run) {
      int64_t start = MonotonicNanos();
      cpu::Gemm(cpu::Trans::kNo, cpu::Trans::kNo, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f,
                c.data(), n);
      best = std::max(best, 2.0 * n * n * double(n) / SecondsSince(start) / 1e9);
    }
  }
  return best;
}

struct Row {
  int threads = 0;
  double sgemm_gflops = 0, tokens_per_s = 0, gflops = 0;
};

absl::StatusOr<Row> Measure(int threads) {
  train::TrainOptions o;
  o.model.n_layer = absl::GetFlag(FLAGS_n_layer);
  o.model.n_head = absl::GetFlag(FLAGS_n_head);
  o.model.n_embd = absl::GetFlag(FLAGS_n_embd);
  o.model.seq_len = absl::GetFlag(FLAGS_seq_len);
  o.global_batch_size = o.micro_batch_size = absl::GetFlag(FLAGS_batch);
  o.steps = absl::GetFlag(FLAGS_warmup) + absl::GetFlag(FLAGS_steps);
  o.eval_every = 0;
  o.sample_bytes = 0;
  o.threads = threads;
  ASSIGN_OR_RETURN(auto trainer, train::Trainer::Create(o));  // sets the BLAS threads
  Row row;
  row.threads = threads;
  row.sgemm_gflops = SgemmPeakGflops();
  double seconds = 0;
  for (int64_t k = 0; k < o.steps; ++k) {
    ASSIGN_OR_RETURN(train::StepStats s, trainer->TrainStep(k));
    if (k >= absl::GetFlag(FLAGS_warmup)) seconds += s.ms / 1e3;
  }
  double tokens = double(absl::GetFlag(FLAGS_steps)) * o.global_batch_size * o.model.seq_len;
  row.tokens_per_s = tokens / seconds;
  row.gflops = o.model.FlopsPerToken() * row.tokens_per_s / 1e9;
  return row;
}

absl::Status Main() {
  std::vector<int> thread_counts;
  for (absl::string_view part : absl::StrSplit(absl::GetFlag(FLAGS_threads), ',')) {
    int t = 0;
    if (!absl::SimpleAtoi(part, &t) || t < 1) {
      return absl::InvalidArgumentError("[tally_model_bench] --threads must list positive integers");
    }
    thread_counts.push_back(t);
  }
  if (absl::GetFlag(FLAGS_steps) < 1 || absl::GetFlag(FLAGS_warmup) < 0) {
    return absl::InvalidArgumentError("[tally_model_bench] need --steps >= 1 and --warmup >= 0");
  }
  std::printf("%8s %14s %12s %14s %16s\n", "threads", "sgemm GFLOP/s", "tokens/s", "model GFLOP/s",
              "of sgemm peak");
  JsonWriter w;
  w.BeginArray();
  for (int t : thread_counts) {
    ASSIGN_OR_RETURN(Row row, Measure(t));
    std::printf("%8d %14.1f %12.0f %14.1f %15.1f%%\n", row.threads, row.sgemm_gflops,
                row.tokens_per_s, row.gflops, 100.0 * row.gflops / row.sgemm_gflops);
    std::fflush(stdout);
    w.BeginObject().Key("threads").Int(row.threads).Key("sgemm_gflops").Double(row.sgemm_gflops);
    w.Key("tokens_per_s").Double(row.tokens_per_s).Key("model_gflops").Double(row.gflops);
    w.Key("fraction_of_sgemm_peak").Double(row.gflops / row.sgemm_gflops).EndObject();
  }
  w.EndArray();
  if (!absl::GetFlag(FLAGS_json).empty()) {
    RETURN_IF_ERROR(WriteTextFile(absl::GetFlag(FLAGS_json), w.str() + "\n"));
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace tally

int main(int argc, char** argv) {
  return tally::RunExample(argc, argv, "training throughput vs sgemm peak: tally_model_bench",
                           tally::Main);
}
