// A training job (job.h): one rank, or every rank on threads or MPI processes; then, on
// rank 0, the report, the files it writes, and the check against a single rank.

#include "examples/job.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cmath>
#include <iostream>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "lab/report/compare.h"
#include "lab/report/page.h"
#include "lab/report/rank_records.h"
#include "lab/report/replay.h"
#include "lab/report/report.h"
#include "lab/report/trace.h"
#include "core/runtime/comm/launch.h"
#include "core/runtime/comm/transport/mpi/mpi_launch.h"
#include "core/runtime/comm/transport/nccl/nccl_transport.h"
#include "core/runtime/cuda/cuda.h"
#include "core/runtime/json_writer.h"
#include "core/runtime/memory_ledger.h"
#include "core/runtime/signals.h"
#include "core/runtime/status_macros.h"
#include "core/train/before_training.h"
#include "core/train/trainer.h"

namespace tally::train {

namespace {

// --check_against_serial: the single-rank model trained on the same batches (from the
// same checkpoint, if any), its loss next to the run's at every step.
absl::Status CheckAgainstSerial(const TrainOptions& options, int64_t start_step,
                                const std::vector<float>& losses, std::ostream& log) {
  TrainOptions serial = options;
  serial.parallel.dp = serial.parallel.tp = serial.parallel.pp = serial.parallel.ep = 1;
  serial.parallel.cp = 1;
  serial.parallel.zero = 0;
  serial.parallel.zero_shard = parallel::ZeroShard::kDp;
  serial.parallel.zero3_reshard_after_forward = true;
  serial.parallel.zero_hpz = false;
  serial.parallel.zero_quantized_weights = false;
  serial.parallel.zero_quantized_gradients = false;
  serial.parallel.grad_compression = parallel::GradCompression::kNone;
  serial.parallel.sequence_parallel = false;
  serial.parallel.recompute = false;
  serial.parallel.recompute_attention = false;
  serial.checkpoint.save.clear();
  serial.output.metrics_json.clear();
  serial.output.traffic_json.clear();
  SetIntraOpThreads(serial, 1);
  ASSIGN_OR_RETURN(auto trainer, Trainer::Create(serial));
  log << "\ncheck against the single-rank run on the same batches:\n"
      << absl::StrFormat("%6s %12s %12s %12s\n", "step", "this run", "single rank", "rel. diff");
  double worst = 0;
  for (size_t i = 0; i < losses.size(); ++i) {
    const int64_t step = start_step + int64_t(i);
    ASSIGN_OR_RETURN(StepStats s, trainer->TrainStep(step));
    if (!std::isfinite(losses[i]) || !std::isfinite(s.loss)) {
      return absl::InternalError(absl::StrFormat(
          "[check] step %d: the loss is %g in this run and %g on one rank; a non-finite loss "
          "compares with nothing",
          step + 1, losses[i], s.loss));
    }
    const double diff = std::abs(double(losses[i]) - s.loss) / std::max(1e-30, std::abs(double(s.loss)));
    worst = std::max(worst, diff);
    log << absl::StrFormat("%6d %12.6f %12.6f %12.2e\n", step + 1, losses[i], s.loss, diff);
  }
  // What the layouts may differ by: fp32 sums in another order, 1e-5; with bf16 anywhere,
  // roundings at other places, 2·n_layer·2⁻⁸ (derived in tests/train/mixed_precision_test.cc).
  const model::Precision p = options.Precision();
  const bool bf16 = p.params == DType::kBF16 || p.grad_comm == DType::kBF16;
  const double tolerance = bf16 ? 2.0 * options.model.n_layer / 256 : 1e-5;
  log << absl::StrFormat("largest relative difference %.2e (%s %s)\n", worst,
                         worst <= tolerance ? "within" : "NOT within",
                         bf16 ? absl::StrFormat("%.3f, bf16", tolerance) : "1e-5");
  if (options.parallel.PowerSgd()) {
    log << "(PowerSGD's sum is a low-rank approximation after its warm-up: no tolerance "
           "holds it to the single-rank run)\n";
  }
  if (options.parallel.OneBitAdam()) {
    log << "(1-bit Adam's momentum is one bit a value after its warm-up: no tolerance "
           "holds it to the single-rank run)\n";
  }
  return absl::OkStatus();
}

// What rank 0 keeps of a run of many ranks, for the report.
struct JobRecords {
  int64_t start_step = 0;
  std::vector<float> losses;
  std::vector<std::pair<int64_t, float>> val_losses;
  std::vector<double> compression_errors;
  std::vector<double> expert_tokens;  // Trainer::expert_tokens
  std::vector<report::RankRecord> ranks;     // every rank's, on the process that holds rank 0
  std::shared_ptr<const comm::Nodes> nodes;  // where the ranks ran
};

// Every rank of the run, on threads or MPI processes (`mpi`), each training and then
// sending its record to rank 0.
absl::StatusOr<JobRecords> RunRanks(const TrainOptions& options, bool mpi, StopAgreement& stop,
                                    std::ostream& log) {
  comm::LaunchOptions launch;
  launch.world_size = options.world();
  launch.timeout = absl::Seconds(options.placement.timeout_s);
  launch.comm.native_collectives = options.placement.native_collectives;
  launch.comm.nodes = options.PlacedNodes();
  if (options.placement.backend == Backend::kNccl) {
    launch.world_transport = comm::nccl::WorldTransport;
    if (!mpi) {  // threads: one rank per GPU of this machine
      ASSIGN_OR_RETURN(int gpus, cuda::DeviceCount());
      if (options.world() > gpus) {
        return absl::InvalidArgumentError(absl::StrCat(
            "[train] --backend=nccl puts each rank on a GPU of its own: ", options.world(),
            " ranks need ", options.world(), " GPUs, and this machine has ", gpus,
            " (--backend=threads shares one GPU among all the ranks)"));
      }
    }
  }
  JobRecords job;
  auto rank_main = [&](comm::Communicator& world) -> absl::Status {
    const std::shared_ptr<const comm::Nodes> nodes =
        world.options().nodes != nullptr
            ? world.options().nodes
            : std::make_shared<const comm::Nodes>(comm::Nodes::One(world.size()));
    if (world.rank() == 0 && options.output.print_topology) {
      log << options.topology().Describe(nodes.get());
    }
    world.ledger().set_tracing(!options.output.trace.empty());
    ASSIGN_OR_RETURN(auto trainer, Trainer::Create(options, &world));
    trainer->set_stop(&stop);
    RETURN_IF_ERROR(trainer->Run(log));
    report::RankRecord mine{world.ledger(),        world.memory(),         trainer->busy_nanos(),
                            trainer->step_nanos(), trainer->train_nanos(), trainer->cpu_nanos(),
                            trainer->spans()};
    ASSIGN_OR_RETURN(std::vector<report::RankRecord> all, report::GatherRecords(world, mine));
    if (world.rank() == 0) {
      job.ranks = std::move(all);
      job.start_step = trainer->start_step();
      job.losses = trainer->losses();
      job.val_losses = trainer->val_losses();
      job.compression_errors = trainer->compression_errors();
      job.expert_tokens = trainer->expert_tokens();
      job.nodes = nodes;
    }
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(mpi ? comm::mpi::RunMpiRank(launch, rank_main)
                      : comm::RunThreadRanks(launch, rank_main));
  return job;
}

// Calls `use` with the report's inputs over rank 0's records of `job` (moved out of it).
template <typename Use>
absl::Status WithReportInputs(const TrainOptions& options, JobRecords& job, int ranks_here,
                              const Use& use) {
  std::vector<comm::TrafficLedger> traffic;
  std::vector<MemoryLedger> memory;
  std::vector<int64_t> busy, step_time, train_time, cpu_time;
  std::vector<std::vector<Trainer::Span>> spans;
  for (report::RankRecord& r : job.ranks) {
    traffic.push_back(std::move(r.traffic));
    memory.push_back(r.memory);
    busy.push_back(r.busy_nanos);
    step_time.push_back(r.step_nanos);
    train_time.push_back(r.train_nanos);
    cpu_time.push_back(r.cpu_nanos);
    spans.push_back(std::move(r.spans));
  }
  const int64_t steps =
      std::max<int64_t>(0, options.training.steps - job.start_step);  // this run's
  report::ReportInputs report{options,    steps,     traffic,           memory, busy, step_time,
                              train_time, job.nodes, job.expert_tokens, &spans};
  report.cpu_nanos = std::move(cpu_time);
  report.ranks_here = ranks_here;
  report.first_step = job.start_step + 1;
  report.losses = job.losses;
  report.val_losses = job.val_losses;
  report.compression_errors = job.compression_errors;
  report.cores = int(std::max(1u, std::thread::hardware_concurrency()));
  return use(report);
}

// Lines printed after the report: on stderr when the report is JSON or CSV on `log`, so
// that standard output is the log and the report alone (what tally_compare reads).
std::ostream& NotesStream(const TrainOptions& options, std::ostream& log) {
  return options.output.report == ReportFormat::kJson || options.output.report == ReportFormat::kCsv
             ? std::cerr
             : log;
}

// The ranks from which a dry run says it is starting (its set-up then takes seconds).
constexpr int kDryRunProgressRanks = 64;

// Rank 0's end of the run: the report in the asked format, the peer matrix, and the
// files (--traffic_json, --trace).
absl::Status Report(const report::ReportInputs& report, std::ostream& log) {
  const TrainOptions& options = report.options;
  // What follows the report goes where it does not break a JSON report on stdout.
  std::ostream& after = NotesStream(options, log);
  const std::vector<comm::TrafficLedger>& traffic = report.traffic;
  // The JSON report, written once for whichever outputs ask for it.
  const bool wants_json = options.output.report == ReportFormat::kJson ||
                          !options.output.traffic_json.empty() ||
                          !options.output.report_html.empty();
  const std::string json = wants_json ? report::ReportJson(report) : std::string();
  if (options.output.report == ReportFormat::kJson) {
    log << "\n" << json << "\n";
  } else if (options.output.report == ReportFormat::kCsv) {
    log << "\n" << report::ReportCsv(report);
  } else if (options.output.report == ReportFormat::kFull) {
    log << "\n" << report::FormatReport(report);
  } else {
    log << "\n" << report::FormatSummaryReport(report);
  }
  if (!options.output.traffic_json.empty()) {
    RETURN_IF_ERROR(WriteTextFile(options.output.traffic_json, json + "\n"));
  }
  if (!options.output.report_html.empty()) {  // the page of the run, drawn from its JSON
    ASSIGN_OR_RETURN(report::RunReport run,
                     report::ParseRunReport(json, options.output.report_html));
    ASSIGN_OR_RETURN(report::Comparison page, report::Compare({run}));
    RETURN_IF_ERROR(WriteTextFile(options.output.report_html, report::ReportPage({run}, page)));
    after << "report page written to '" << options.output.report_html
          << "' (open it in a browser)\n";
  }
  if (options.output.peer_matrix) {
    after << "\nover the run, " << comm::FormatPeerMatrix(comm::PeerMatrix(traffic), report.nodes.get());
  }
  if (!options.output.trace.empty() && options.dry_run) {
    // A dry run's own times are of code that computes nothing: its predicted timeline.
    const absl::StatusOr<std::vector<report::ReplayedRank>>& replayed = report::ModelledRun(report);
    if (!replayed.ok()) return replayed.status();
    RETURN_IF_ERROR(
        WriteTextFile(options.output.trace, PredictedTraceJson(options, *replayed) + "\n"));
    after << "predicted trace written to '" << options.output.trace
          << "' (open it in Perfetto or chrome://tracing)\n";
  } else if (!options.output.trace.empty()) {
    RETURN_IF_ERROR(WriteTextFile(options.output.trace,
                                  report::TraceJson(options, traffic, *report.spans) + "\n"));
    after << "trace written to '" << options.output.trace
          << "' (open it in Perfetto or chrome://tracing)\n";
  }
  return absl::OkStatus();
}

}  // namespace

namespace {

// A dry run has nothing to lose in the middle of a step (no values, no files until its
// report), and its one step can take minutes at a thousand ranks: while it lives, a
// SIGINT or SIGTERM ends the process within a poll's 10 ms, with one line and 128 + the
// signal, without waiting for the step to end or the ranks' state to be freed (freeing a
// thousand ranks' messages alone takes seconds).
class DryRunStop {
 public:
  explicit DryRunStop(bool dry_run) {
    if (!dry_run) return;
    watcher_ = std::thread([this] {
      while (!done_.load(std::memory_order_acquire)) {
        if (const int signal = StopSignal(); signal != 0) {
          const std::string line = absl::StrCat("[train] stopped by ", SignalName(signal),
                                                " during the dry run (it has nothing to save)\n");
          std::cerr << line << std::flush;
          std::_Exit(128 + signal);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    });
  }
  ~DryRunStop() {
    done_.store(true, std::memory_order_release);
    if (watcher_.joinable()) watcher_.join();
  }
  DryRunStop(const DryRunStop&) = delete;
  DryRunStop& operator=(const DryRunStop&) = delete;

 private:
  std::atomic<bool> done_{false};
  std::thread watcher_;
};

// Whether the job may start: the options, the files and the device, each mistake said by
// rank 0 alone under MPI; then the warnings of flags that have no effect.
absl::Status ReadyToStart(const TrainOptions& requested, const TrainOptions& options, bool mpi,
                          int ranks_here) {
  if (options.placement.backend == Backend::kThreads) {
    RETURN_IF_ERROR(comm::mpi::RefuseThreadsUnderMpirun("[train]"));
  }
  // Every process of an MPI job finds the same mistake; rank 0 says it.
  auto said_once = [mpi](const absl::Status& s) {
    return mpi && comm::mpi::ProcessRank() != 0 ? absl::Status(s.code(), "") : s;
  };
  if (absl::Status s = options.Validate(); !s.ok()) return said_once(s);
  // Rank 0 writes every file; under MPI the other processes may be on other machines.
  const bool writes_outputs = !mpi || comm::mpi::ProcessRank() == 0;
  if (absl::Status s = CheckBeforeTraining(options, ranks_here, writes_outputs); !s.ok()) {
    return said_once(s);
  }
  if (options.placement.device == DeviceType::kCUDA) {
    // No GPU, or no CUDA in this build: the message says which.
    if (absl::Status s = cuda::DeviceCount().status(); !s.ok()) return said_once(s);
  }
  // Flags without effect, once the run is going to start (a refused run says only why).
  if (!mpi || comm::mpi::ProcessRank() == 0) {
    // From the flags as given, not as the dry run resolves them.
    for (const std::string& warning : requested.Warnings()) std::cerr << warning << "\n";
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Train(const TrainOptions& requested, std::ostream& log) {
  const TrainOptions options = requested.Resolved();
  // NCCL's ranks are processes under mpirun, else threads of this one.
  const bool mpi = options.placement.backend == Backend::kMpi ||
                   (options.placement.backend == Backend::kNccl && comm::mpi::LaunchedByMpirun());
  // The ranks on this machine: every rank of a threads run, one per local MPI process.
  const int ranks_here = mpi ? comm::mpi::LocalProcesses() : options.world();
  RETURN_IF_ERROR(ReadyToStart(requested, options, mpi, ranks_here));
  // SIGINT and SIGTERM stop the run at a step boundary every rank agrees on.
  StopSignals signals;
  StopAgreement stop(/*across_processes=*/mpi, absl::Seconds(options.placement.timeout_s));
  // --repeat: every run but the last is timed only; a stop ends the repeats too.
  std::vector<report::RunTimes> repeats;
  auto last_run = [&](int k) { return k + 1 == options.output.repeat || StopSignal() != 0; };
  SetIntraOpThreads(options, ranks_here);
  // A large dry run sets up for long before its first line: say what it is doing.
  if (options.dry_run && options.world() >= kDryRunProgressRanks) {
    std::cerr << "[train] dry run: starting " << options.world()
              << " thread ranks; each sets up its part of the model on meta tensors, then they "
                 "run the step\n"
              << std::flush;
  }
  for (int k = 0;; ++k) {
    JobRecords job;
    {
      DryRunStop dry_run_stop(options.dry_run);
      ASSIGN_OR_RETURN(job, RunRanks(options, mpi, stop, log));
    }
    if (options.sampling.sample_only) return absl::OkStatus();  // a sample is its whole output
    const bool last = last_run(k);
    if (job.ranks.empty()) {  // another process reports
      if (last) return absl::OkStatus();
      continue;
    }
    RETURN_IF_ERROR(
        WithReportInputs(options, job, ranks_here, [&](const report::ReportInputs& report) {
          repeats.push_back(TimesOf(report));
          return last ? Report(report, log) : absl::OkStatus();
        }));
    if (!last) continue;
    if (options.output.repeat > 1) {
      NotesStream(options, log) << report::RepeatsTable(options, repeats);
    }
    if (!options.output.check_against_serial) return absl::OkStatus();
    return CheckAgainstSerial(options, job.start_step, job.losses, NotesStream(options, log));
  }
}

}  // namespace tally::train
