// tally_model_bench: training throughput of one rank next to the machine's matmul peak.
//
//   tally_model_bench --threads=1,2 --steps=10
//   tally_model_bench --device=cuda --tf32 --n_layer=12 --n_head=12 --n_embd=768
//       --seq_len=1024 --batch=8                             # GPT-2 small on a GPU
//
// On the CPU, for each precision and thread count it first measures the matmul the
// model's products run in on square matrices (the best GFLOP/s over a few sizes and runs:
// the peak a GEMM-bound trainer can approach): oneDNN's sgemm for fp32, its bf16 x bf16 ->
// fp32 matmul for bf16. On a GPU it measures cuBLAS the same way (fp32, TF32 with --tf32,
// or bf16), through the same Kernels the model uses. Then it trains the model (default L=4, H=4,
// C=256, T=128, global batch 8, AdamW) for --warmup + --steps steps on the embedded
// corpus and reports the timed steps' tokens/s and model GFLOP/s (6·params + 12·L·C·T per
// token), and that as a fraction of the peak (MFU against the measured peak), and each
// thread count's tokens/s over one thread's of the same precision (when 1 is measured).
// On the CPU it also times the step's own matmuls where they run (cpu::TimeMatmuls) and
// gives their share of the step ("in matmuls") and the fraction of the peak the step would
// reach were everything else free ("matmul-bound": of the peak / in matmuls).
// With --rounds=N every configuration is measured N times, round after round, and each
// figure is the median of its N (the ratios are ratios of medians).
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "examples/example_main.h"
#include "core/runtime/clock.h"
#include "core/runtime/cuda/cuda.h"
#include "core/runtime/files.h"
#include "core/runtime/json_writer.h"
#include "core/runtime/kernels/cpu/convert.h"
#include "core/runtime/kernels/cpu/gemm.h"
#include "core/runtime/kernels/kernels.h"
#include "core/runtime/status_macros.h"
#include "core/train/before_training.h"
#include "core/train/trainer.h"

ABSL_FLAG(std::string, threads, "1,2", "comma-separated intra-op thread counts to measure");
ABSL_FLAG(int, steps, 10, "timed training steps per thread count");
ABSL_FLAG(int, warmup, 2, "untimed steps first");
ABSL_FLAG(int, n_layer, 4, "transformer blocks");
ABSL_FLAG(int, n_head, 4, "attention heads");
ABSL_FLAG(int, n_embd, 256, "channels");
ABSL_FLAG(int, seq_len, 128, "sequence length");
ABSL_FLAG(int, batch, 8, "sequences per step (one micro-batch)");
ABSL_FLAG(std::string, json, "", "also write the rows as JSON here");
ABSL_FLAG(std::string, device, "cpu", "cpu, or cuda (GPU 0; --threads is then ignored)");
ABSL_FLAG(std::string, precision, "fp32",
          "fp32, bf16, or both (fp32,bf16): the runs' --precision (bf16: bf16 parameters, "
          "gradients and matmul operands, fp32 sums, master weights and optimizer state)");
ABSL_FLAG(bool, tf32, false, "--device=cuda: train with TF32 matmuls (and measure that peak too)");
ABSL_FLAG(int, rounds, 1,
          "measure every precision and thread count this many times, taking turns, and "
          "report the median of each (a noisy host's slow spells then fall on all alike)");

namespace tally {
namespace {

// Best GFLOP/s of the CPU's matmul over square sizes 512..2048 and three runs each: sgemm
// (T = float), or bf16 operands with fp32 output (T = BFloat16).
template <typename T>
double CpuPeakGflops() {
  double best = 0;
  for (int n : {512, 1024, 2048}) {
    auto value = [](float x) {
      if constexpr (std::is_same_v<T, float>) return x;
      else return BFloat16::FromFloat(x);
    };
    std::vector<T> a(size_t(n) * n, value(0.5f)), b(size_t(n) * n, value(0.25f));
    std::vector<float> c(size_t(n) * n);
    for (int run = 0; run < 3; ++run) {
      int64_t start = MonotonicNanos();
      cpu::Gemm(cpu::Trans::kNo, cpu::Trans::kNo, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f,
                c.data(), n);
      best = std::max(best, 2.0 * n * n * double(n) / SecondsSince(start) / 1e9);
    }
  }
  return best;
}

// Best cuBLAS GFLOP/s over square sizes 2048..8192 and three runs each, through the
// CUDA Kernels (a linear layer y = x·wᵀ is one GEMM of 2·n³ flops).
absl::StatusOr<double> CublasPeakGflops(MatmulInputs inputs) {
  ASSIGN_OR_RETURN(std::unique_ptr<Kernels> k, Kernels::Create({DeviceType::kCUDA, 0}, inputs));
  Allocator alloc(nullptr, k->device());
  double best = 0;
  for (int n : {2048, 4096, 8192}) {
    const size_t bytes = sizeof(float) * size_t(n) * n;
    ASSIGN_OR_RETURN(auto x, alloc.Allocate(bytes, MemoryCategory::kOther));
    ASSIGN_OR_RETURN(auto w, alloc.Allocate(bytes, MemoryCategory::kOther));
    ASSIGN_OR_RETURN(auto y, alloc.Allocate(bytes, MemoryCategory::kOther));
    std::vector<float> ones(size_t(n) * n, 0.01f);
    RETURN_IF_ERROR(k->FromHost(x->data(), ones.data(), bytes));
    RETURN_IF_ERROR(k->FromHost(w->data(), ones.data(), bytes));
    for (int run = 0; run < 4; ++run) {  // the first warms cuBLAS up
      RETURN_IF_ERROR(cuda::Synchronize());
      int64_t start = MonotonicNanos();
      RETURN_IF_ERROR(k->LinearForward(static_cast<float*>(y->data()),
                                       static_cast<const float*>(x->data()),
                                       static_cast<const float*>(w->data()), nullptr, n, n, n));
      RETURN_IF_ERROR(cuda::Synchronize());
      if (run > 0) best = std::max(best, 2.0 * n * n * double(n) / SecondsSince(start) / 1e9);
    }
  }
  return best;
}

// The processor's name, from /proc/cpuinfo ("unknown" where there is none).
std::string CpuName() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (absl::StartsWith(line, "model name")) {
      return std::string(absl::StripAsciiWhitespace(line.substr(line.find(':') + 1)));
    }
  }
  return "unknown";
}

struct Row {
  std::string device, precision;
  int threads = 0;
  double peak_gflops = 0, tokens_per_s = 0, gflops = 0;
  // CPU: the part of the timed steps' wall time spent in the matmuls (cpu::MatmulSeconds);
  // 0 on a GPU, whose matmuls run asynchronously.
  double matmul_share = 0;
};

// "64.2%", or "-" for 0 (not measured).
std::string Percent(double fraction) {
  return fraction > 0 ? absl::StrFormat("%.1f%%", 100.0 * fraction) : "-";
}

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

// One configuration's rounds as one row: the median peak and tokens/s (the model GFLOP/s
// follow the tokens/s).
Row MedianRow(const std::vector<Row>& rounds) {
  Row row = rounds.front();
  std::vector<double> peaks, tokens, shares;
  for (const Row& r : rounds) {
    peaks.push_back(r.peak_gflops);
    tokens.push_back(r.tokens_per_s);
    shares.push_back(r.matmul_share);
  }
  row.peak_gflops = Median(peaks);
  row.matmul_share = Median(shares);
  row.gflops *= Median(tokens) / row.tokens_per_s;
  row.tokens_per_s = Median(tokens);
  return row;
}

// The bench's model and batch as training options.
train::TrainOptions BenchOptions(DeviceType device, int threads, DType precision) {
  train::TrainOptions o;
  o.model.n_layer = absl::GetFlag(FLAGS_n_layer);
  o.model.n_head = absl::GetFlag(FLAGS_n_head);
  o.model.n_embd = absl::GetFlag(FLAGS_n_embd);
  o.model.seq_len = absl::GetFlag(FLAGS_seq_len);
  o.training.global_batch_size = o.training.micro_batch_size = absl::GetFlag(FLAGS_batch);
  o.training.steps = absl::GetFlag(FLAGS_warmup) + absl::GetFlag(FLAGS_steps);
  o.data.eval_every = 0;
  o.sampling.sample_bytes = 0;
  o.training.threads = threads;
  o.placement.device = device;
  o.precision.tf32 = absl::GetFlag(FLAGS_tf32);
  o.precision.dtype = precision;
  return o;
}

absl::StatusOr<Row> Measure(DeviceType device, int threads, DType precision) {
  const train::TrainOptions o = BenchOptions(device, threads, precision);
  ASSIGN_OR_RETURN(auto trainer, train::Trainer::Create(o));  // sets the BLAS threads
  Row row;
  row.device = train::Name(device);
  row.precision = train::PrecisionName(precision);
  row.threads = threads;
  if (device == DeviceType::kCUDA) {
    ASSIGN_OR_RETURN(row.peak_gflops, CublasPeakGflops(o.matmul_inputs()));
  } else if (precision == DType::kBF16) {
    row.peak_gflops = CpuPeakGflops<BFloat16>();
  } else {
    row.peak_gflops = CpuPeakGflops<float>();
  }
  double seconds = 0, matmul_seconds = 0;
  for (int64_t k = 0; k < o.training.steps; ++k) {
    // A step's time ends when its loss and gradient norm are on the host; its optimizer
    // update may still run on a GPU, and then counts in the next step.
    const double matmuls_before = cpu::MatmulSeconds();
    ASSIGN_OR_RETURN(train::StepStats s, trainer->TrainStep(k));
    if (k >= absl::GetFlag(FLAGS_warmup)) {
      seconds += s.ms / 1e3;
      matmul_seconds += cpu::MatmulSeconds() - matmuls_before;
    }
  }
  if (device == DeviceType::kCPU) row.matmul_share = matmul_seconds / seconds;
  double tokens =
      double(absl::GetFlag(FLAGS_steps)) * o.training.global_batch_size * o.model.seq_len;
  row.tokens_per_s = tokens / seconds;
  row.gflops = o.model.FlopsPerToken() * row.tokens_per_s / 1e9;
  return row;
}

// --threads and --precision: the lists of counts and types to measure.
absl::StatusOr<std::vector<int>> ThreadCounts() {
  std::vector<int> counts;
  for (absl::string_view part : absl::StrSplit(absl::GetFlag(FLAGS_threads), ',')) {
    int t = 0;
    if (!absl::SimpleAtoi(part, &t) || t < 1) {
      return absl::InvalidArgumentError("[tally_model_bench] --threads must list positive integers");
    }
    counts.push_back(t);
  }
  return counts;
}

absl::StatusOr<std::vector<DType>> Precisions() {
  std::vector<DType> precisions;
  for (absl::string_view part : absl::StrSplit(absl::GetFlag(FLAGS_precision), ',')) {
    ASSIGN_OR_RETURN(DType p, train::ParsePrecision("precision", std::string(part)));
    precisions.push_back(p);
  }
  return precisions;
}

// A configuration's line of the table: its median row, the share of the peak it reaches,
// and its speed-up over one thread (0: not measured).
void PrintRow(const Row& row, double of_peak, double speedup) {
  std::printf("%8s %9s %8d %14.1f %12.0f %14.1f %11.1f%% %13s %11s %13s\n", row.device.c_str(),
              row.precision.c_str(), row.threads, row.peak_gflops, row.tokens_per_s, row.gflops,
              100.0 * of_peak, speedup > 0 ? absl::StrFormat("%.2fx", speedup).c_str() : "-",
              Percent(row.matmul_share).c_str(),
              Percent(row.matmul_share > 0 ? of_peak / row.matmul_share : 0).c_str());
  std::fflush(stdout);
}

// The same as one object of --json's array, with every round's tokens/s.
void WriteRow(JsonWriter& w, const Row& row, double of_peak, double speedup,
              const std::vector<Row>& rounds) {
  w.BeginObject().Key("device").String(row.device).Key("precision").String(row.precision);
  w.Key("threads").Int(row.threads);
  w.Key("peak_gflops").Double(row.peak_gflops).Key("tokens_per_s").Double(row.tokens_per_s);
  w.Key("model_gflops").Double(row.gflops);
  w.Key("fraction_of_peak").Double(of_peak);
  if (row.matmul_share > 0) {
    w.Key("matmul_share").Double(row.matmul_share);
    w.Key("matmul_bound_fraction_of_peak").Double(of_peak / row.matmul_share);
  }
  if (speedup > 0) w.Key("speedup_over_one_thread").Double(speedup);
  w.Key("rounds").Int(int64_t(rounds.size())).Key("tokens_per_s_each_round").BeginArray();
  for (const Row& each : rounds) w.Double(each.tokens_per_s);
  w.EndArray();
  w.EndObject();
}

// The machine's line (the GPU, or the CPU and its kernels) and the table's header; on a
// GPU the thread counts are the one the GPU runs.
absl::Status PrintHeader(DeviceType device, std::vector<int>& thread_counts) {
  if (device == DeviceType::kCUDA) {
    RETURN_IF_ERROR(cuda::DeviceCount().status());  // says why there is no GPU
    ASSIGN_OR_RETURN(std::string name, cuda::DeviceName(0));
    std::printf("GPU 0: %s, fp32 matmuls %s\n", name.c_str(),
                absl::GetFlag(FLAGS_tf32) ? "TF32" : "fp32");
    thread_counts = {0};
  } else {
    std::printf("CPU: %s, oneDNN kernels %s, bf16 rounding by %s\n", CpuName().c_str(),
                cpu::MatmulIsa(), cpu::RoundsWithInstruction() ? "instruction" : "loop");
    cpu::TimeMatmuls(true);
  }
  const char* peak = device == DeviceType::kCUDA ? "cuBLAS GFLOP/s" : "matmul GFLOP/s";
  std::printf("%8s %9s %8s %14s %12s %14s %12s %13s %11s %13s\n", "device", "precision",
              "threads", peak, "tokens/s", "model GFLOP/s", "of the peak", "x 1 thread",
              "in matmuls", "matmul-bound");
  return absl::OkStatus();
}

// The model and batch are valid and fit in memory, and --json can be written, before
// anything is measured.
absl::Status CheckBeforeMeasuring(DeviceType device, int threads, DType precision) {
  const train::TrainOptions options = BenchOptions(device, threads, precision).Resolved();
  RETURN_IF_ERROR(options.Validate());
  RETURN_IF_ERROR(train::CheckBeforeTraining(options, 1, /*writes_outputs=*/true));
  if (!absl::GetFlag(FLAGS_json).empty()) {
    RETURN_IF_ERROR(CheckOutputFile(absl::GetFlag(FLAGS_json), "[tally_model_bench] --json"));
  }
  return absl::OkStatus();
}

// A configuration's tokens/s in each round: "cpu fp32 2: 1234 / 1250 / 1241".
std::string EachRound(const Row& median, const std::vector<Row>& rounds) {
  std::vector<std::string> tokens;
  for (const Row& each : rounds) tokens.push_back(absl::StrFormat("%.0f", each.tokens_per_s));
  return absl::StrFormat("%s %s %d: %s", median.device, median.precision, median.threads,
                         absl::StrJoin(tokens, " / "));
}

absl::Status Main() {
  ASSIGN_OR_RETURN(std::vector<int> thread_counts, ThreadCounts());
  if (absl::GetFlag(FLAGS_steps) < 1 || absl::GetFlag(FLAGS_warmup) < 0 ||
      absl::GetFlag(FLAGS_rounds) < 1) {
    return absl::InvalidArgumentError(
        "[tally_model_bench] need --steps >= 1, --warmup >= 0 and --rounds >= 1");
  }
  ASSIGN_OR_RETURN(const std::vector<DType> precisions, Precisions());
  ASSIGN_OR_RETURN(const DeviceType device, train::ParseDevice(absl::GetFlag(FLAGS_device)));
  RETURN_IF_ERROR(CheckBeforeMeasuring(device, thread_counts.front(), precisions.front()));
  RETURN_IF_ERROR(PrintHeader(device, thread_counts));
  // Every precision and thread count once a round; a configuration's row is printed once
  // its last round is in.
  struct Config {
    DType precision;
    int threads;
    std::vector<Row> rounds;
  };
  std::vector<Config> configs;
  for (DType precision : precisions) {
    for (int t : thread_counts) configs.push_back({precision, t, {}});
  }
  const int rounds = absl::GetFlag(FLAGS_rounds);
  std::vector<std::string> each_round;
  JsonWriter w;
  w.BeginArray();
  for (int r = 0; r < rounds; ++r) {
    std::map<DType, double> one_thread;  // tokens/s of a precision on one thread, once measured
    for (Config& config : configs) {
      ASSIGN_OR_RETURN(Row measured, Measure(device, config.threads, config.precision));
      config.rounds.push_back(measured);
      if (r + 1 < rounds) continue;
      const Row row = MedianRow(config.rounds);
      if (config.threads == 1) one_thread[config.precision] = row.tokens_per_s;
      const auto one = one_thread.find(config.precision);
      const double speedup = one != one_thread.end() ? row.tokens_per_s / one->second : 0;
      const double of_peak = row.gflops / row.peak_gflops;
      PrintRow(row, of_peak, speedup);
      WriteRow(w, row, of_peak, speedup, config.rounds);
      each_round.push_back(EachRound(row, config.rounds));
    }
  }
  w.EndArray();
  if (rounds > 1) {
    std::printf("tokens/s of each round (the rows give their medians):\n");
    for (const std::string& line : each_round) std::printf("  %s\n", line.c_str());
  }
  if (!absl::GetFlag(FLAGS_json).empty()) {
    RETURN_IF_ERROR(WriteTextFile(absl::GetFlag(FLAGS_json), w.str() + "\n"));
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace tally

int main(int argc, char** argv) {
  return tally::RunExample(argc, argv, "training throughput vs the matmul peak: tally_model_bench",
                           tally::Main);
}
