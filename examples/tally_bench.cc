// tally_bench: the collective benchmark, in nccl-tests' conventions.
//
//   tally_bench --op=all_reduce --algorithm=ring --ranks=2 -b 8 -e 64M -f 4 -n 20 -w 5 -c 1
//
//   mpirun -np 4 tally_bench --backend=mpi --algorithm=all -b 1M -e 64M
//   tally_bench --backend=nccl --device=cuda --ranks=8 --algorithm=all   # 8 GPUs
//
// For each size it runs -w warm-up calls and -n timed calls on --ranks ranks, then
// one checked call with closed-form data (-c 1) whose bytes it takes from the ledger and
// sets beside the exact formula. Columns: size (bytes of the full buffer), count
// (elements), type, redop, root, time (us, the slowest rank's mean), algbw = size/time,
// busbw = algbw x nccl-tests' bus factor, #wrong, and bytes sent per rank (the busiest
// rank) by the ledger and by the formula.
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "examples/example_main.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "examples/bench_report.h"
#include "core/runtime/comm/check/collective_check.h"
#include "core/runtime/comm/ledger/exact_traffic.h"
#include "core/runtime/comm/launch.h"
#include "core/runtime/comm/transport/mpi/mpi_launch.h"
#include "core/runtime/cuda/cuda.h"
#include "core/runtime/files.h"
#include "core/runtime/status_macros.h"

ABSL_FLAG(std::string, b, "8", "minimum size in bytes (K, M, G suffixes allowed)");
ABSL_FLAG(std::string, e, "64M", "maximum size in bytes");
ABSL_FLAG(int, f, 2, "multiplication factor between sizes");
ABSL_FLAG(int, n, 20, "timed iterations per size");
ABSL_FLAG(int, w, 5, "warm-up iterations per size");
ABSL_FLAG(int, c, 1, "check results (1) or not (0)");
ABSL_FLAG(std::string, op, "all_reduce",
          "all_reduce, all_gather, reduce_scatter, alltoall, alltoallv (uneven blocks of the "
          "size: rank i sends rank j floor(count/ranks)*((i+2j) mod 3)/2 elements), broadcast, "
          "reduce, gather, scatter, sendrecv, or all");
ABSL_FLAG(std::string, algorithm, "ring",
          "ring, naive, hierarchical (rings inside each node, then across: all_reduce, "
          "reduce_scatter and all_gather with --gpus_per_node), recursive_doubling (all_reduce: "
          "whole buffers in log2(ranks) rounds), native (--backend=mpi or nccl: the library's "
          "own collectives), or all");
ABSL_FLAG(int64_t, small_allreduce_bytes, 0,
          "all-reduces of at most this many bytes that would run the ring run "
          "recursive_doubling (and are booked so); 0: never");
ABSL_FLAG(int, gpus_per_node, 0,
          "ranks per node: ranks r and r' share a node iff r/G == r'/G, and the table adds the "
          "bytes that crossed a node (0: one node for thread ranks, the real nodes under mpirun)");
ABSL_FLAG(std::string, backend, "threads",
          "threads (ranks are threads of this process), mpi (one rank per process: "
          "mpirun -np N tally_bench --backend=mpi ...) or nccl (--device=cuda, a GPU per rank; "
          "threads, or processes under mpirun)");
ABSL_FLAG(std::string, device, "cpu",
          "where the buffers are: cpu, or cuda (--backend=threads: GPU 0, shared; nccl: each "
          "rank's GPU)");
ABSL_FLAG(int, ranks, 0, "ranks (0: 2 threads, or every process of the MPI job)");
ABSL_FLAG(int, root, 0, "root of the rooted collectives");
ABSL_FLAG(int64_t, max_chunk_bytes, int64_t(1) << 20, "largest message; larger transfers are split");
ABSL_FLAG(double, timeout_s, 60, "the longest any single wait may take, in seconds");
ABSL_FLAG(std::string, J, "", "write the rows as JSON to this file");
ABSL_FLAG(bool, memcpy_baseline, false,
          "first measure glibc memcpy of the largest size on 1 and on --ranks threads");

namespace tally {
namespace {

using comm::Algorithm;
using comm::Primitive;

absl::StatusOr<std::vector<Primitive>> ParseOps(const std::string& text) {
  if (text == "all") {
    return std::vector<Primitive>{Primitive::kAllReduce, Primitive::kAllGather,
                                  Primitive::kReduceScatter, Primitive::kAllToAll,
                                  Primitive::kBroadcast, Primitive::kReduce,
                                  Primitive::kGather, Primitive::kScatter, Primitive::kSendRecv,
                                  Primitive::kAllToAllV};
  }
  ASSIGN_OR_RETURN(Primitive p, comm::ParsePrimitive(text));
  if (p == Primitive::kBarrier) {
    return absl::InvalidArgumentError("[tally_bench] --op=barrier moves no bytes; nothing to measure");
  }
  return std::vector<Primitive>{p};
}

// `native`: whether the backend has collectives of its own (MPI, NCCL).
// `nodes`: whether --gpus_per_node places the ranks on several nodes (all adds the
// hierarchical algorithm then).
absl::StatusOr<std::vector<Algorithm>> ParseAlgorithms(const std::string& text, bool native,
                                                       bool nodes) {
  if (text == "all") {
    std::vector<Algorithm> all = {Algorithm::kRing, Algorithm::kNaive,
                                  Algorithm::kRecursiveDoubling};
    if (nodes) all.push_back(Algorithm::kHierarchical);
    if (native) all.push_back(Algorithm::kNative);
    return all;
  }
  ASSIGN_OR_RETURN(Algorithm a, comm::ParseAlgorithm(text));
  if (a == Algorithm::kNative && !native) {
    return absl::InvalidArgumentError(
        "[tally_bench] --algorithm=native needs --backend=mpi or nccl");
  }
  return std::vector<Algorithm>{a};
}

absl::StatusOr<BenchConfig> ConfigFromFlags() {
  BenchConfig config;
  ASSIGN_OR_RETURN(config.min_bytes, ParseBytes(absl::GetFlag(FLAGS_b)));
  ASSIGN_OR_RETURN(config.max_bytes, ParseBytes(absl::GetFlag(FLAGS_e)));
  config.factor = absl::GetFlag(FLAGS_f);
  config.iterations = absl::GetFlag(FLAGS_n);
  config.warmup = absl::GetFlag(FLAGS_w);
  config.check = absl::GetFlag(FLAGS_c) != 0;
  const std::string backend = absl::GetFlag(FLAGS_backend);
  if (backend != "threads" && backend != "mpi" && backend != "nccl") {
    return absl::InvalidArgumentError(
        "[tally_bench] --backend must be threads, mpi or nccl, got '" + backend + "'");
  }
  const std::string device = absl::GetFlag(FLAGS_device);
  if (device != "cpu" && device != "cuda") {
    return absl::InvalidArgumentError("[tally_bench] --device must be cpu or cuda, got '" +
                                      device + "'");
  }
  config.nccl = backend == "nccl";
  config.gpu = device == "cuda";
  // NCCL's ranks are processes under mpirun, else threads of this one.
  config.mpi = backend == "mpi" || (config.nccl && comm::mpi::LaunchedByMpirun());
  if (backend == "threads") RETURN_IF_ERROR(comm::mpi::RefuseThreadsUnderMpirun("[tally_bench]"));
  if (config.mpi && !comm::mpi::Available()) {
    return absl::FailedPreconditionError(
        "[tally_bench] this build has no MPI transport: install libopenmpi-dev and openmpi-bin "
        "(scripts/setup.sh does) and build again");
  }
  config.ranks = absl::GetFlag(FLAGS_ranks);
  if (config.ranks == 0) config.ranks = config.mpi ? comm::mpi::ProcessCount() : 2;
  config.root = absl::GetFlag(FLAGS_root);
  config.max_chunk_bytes = absl::GetFlag(FLAGS_max_chunk_bytes);
  config.small_allreduce_bytes = absl::GetFlag(FLAGS_small_allreduce_bytes);
  config.timeout_s = absl::GetFlag(FLAGS_timeout_s);
  ASSIGN_OR_RETURN(config.ops, ParseOps(absl::GetFlag(FLAGS_op)));
  config.gpus_per_node = absl::GetFlag(FLAGS_gpus_per_node);
  ASSIGN_OR_RETURN(config.algorithms,
                   ParseAlgorithms(absl::GetFlag(FLAGS_algorithm), backend != "threads",
                                   config.gpus_per_node > 0));
  RETURN_IF_ERROR(config.Validate());
  if (!absl::GetFlag(FLAGS_J).empty()) RETURN_IF_ERROR(CheckOutputFile(absl::GetFlag(FLAGS_J), "[tally_bench] -J"));
  if (config.gpu) RETURN_IF_ERROR(cuda::DeviceCount().status());  // says why there is none
  return config;
}

absl::Status Main() {
  absl::StatusOr<BenchConfig> parsed = ConfigFromFlags();
  // Under MPI every process reads the same flags; the one with rank 0 speaks.
  const bool speaks = comm::mpi::ProcessRank() == 0;
  if (!parsed.ok()) return speaks ? parsed.status() : absl::Status(parsed.status().code(), "");
  const BenchConfig& config = *parsed;
  if (speaks) std::printf("%s", FormatHeader(config).c_str());
  double memcpy_gbps = 0;  // one thread's, the bound of a copy through shared memory
  if (absl::GetFlag(FLAGS_memcpy_baseline)) {
    memcpy_gbps = MemcpyGBps(config.max_bytes, 1);
    std::printf("# memcpy baseline, %lld bytes: %.2f GB/s on 1 thread, %.2f GB/s per thread on %d\n",
                (long long)config.max_bytes, memcpy_gbps,
                MemcpyGBps(config.max_bytes, config.ranks), config.ranks);
  }
  std::vector<BenchRow> all_rows;
  for (Primitive op : config.ops) {
    for (Algorithm algorithm : config.algorithms) {
      // Recursive doubling is an all-reduce; asked of the others it would run the ring again.
      if (algorithm == Algorithm::kRecursiveDoubling && op != Primitive::kAllReduce &&
          config.algorithms.size() > 1) {
        continue;
      }
      ASSIGN_OR_RETURN(std::vector<BenchRow> rows, RunSweep(config, op, algorithm));
      for (const BenchRow& row : rows) all_rows.push_back(row);
    }
  }
  if (!speaks) return absl::OkStatus();
  std::printf("%s", FormatSummary(all_rows).c_str());
  if (memcpy_gbps > 0) {  // the largest size of each sweep against the copy it cannot beat
    for (const BenchRow& row : all_rows) {
      if (row.size_bytes != all_rows.back().size_bytes) continue;
      std::printf("# %s %s at %lld bytes: busbw %.2f GB/s, %.0f%% of one thread's memcpy\n",
                  comm::Name(row.op), comm::Name(row.algorithm), (long long)row.size_bytes,
                  row.busbw_gbps, 100.0 * row.busbw_gbps / memcpy_gbps);
    }
  }
  if (!absl::GetFlag(FLAGS_J).empty()) {
    RETURN_IF_ERROR(WriteBenchJson(absl::GetFlag(FLAGS_J), all_rows));
  }
  int64_t wrong = 0;
  for (const BenchRow& row : all_rows) wrong += row.wrong + (row.sent_max != row.exact_sent_max);
  if (wrong > 0) return absl::DataLossError(absl::StrCat("[tally_bench] ", wrong, " wrong results"));
  return absl::OkStatus();
}

}  // namespace
}  // namespace tally

int main(int argc, char** argv) {
  return tally::RunExample(argc, argv, "collective benchmark: tally_bench --op=all_reduce --algorithm=ring --ranks=2 -b 8 -e 64M", tally::Main);
}
