// The machinery of tally_bench: the configuration, the size sweep on thread ranks or MPI
// processes (over their own transport or NCCL, on host or GPU buffers), and the
// nccl-tests style table and JSON rows.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/runtime/comm/types.h"

namespace tally {

struct BenchConfig {
  static constexpr int kMaxRanks = 4096;

  int64_t min_bytes = 8, max_bytes = int64_t(64) << 20;
  int factor = 2;
  int iterations = 20, warmup = 5;
  bool check = true;
  int ranks = 2;
  int root = 0;
  int64_t max_chunk_bytes = int64_t(1) << 20;
  int64_t small_allreduce_bytes = 0;  // CommOptions': all-reduces up to it run recursive doubling
  double timeout_s = 60;
  bool mpi = false;   // one MPI process per rank (under mpirun) instead of threads
  bool nccl = false;  // the bytes over NCCL, a GPU per rank (threads, or under mpirun)
  bool gpu = false;   // the buffers in GPU memory (the rank's transport's GPU, or GPU 0)
  // Ranks per node (core/runtime/comm/nodes.h): 0 is one node for thread ranks and the real
  // nodes under mpirun. With more than one node the table adds the inter-node bytes.
  int gpus_per_node = 0;
  std::vector<comm::Primitive> ops;
  std::vector<comm::Algorithm> algorithms;

  absl::Status Validate() const;
};

// "8", "1K", "64M", "1G" (powers of 1024) -> bytes.
absl::StatusOr<int64_t> ParseBytes(const std::string& text);

struct BenchRow {
  comm::Primitive op;
  comm::Algorithm algorithm;
  int ranks = 0;
  int root = -1;
  int64_t size_bytes = 0;
  int64_t count = 0;
  double time_us = 0;
  double algbw_gbps = 0;
  double busbw_gbps = 0;
  int64_t wrong = 0;
  std::vector<int64_t> sent_bytes_per_rank, recv_bytes_per_rank, exact_sent_bytes_per_rank;
  int64_t sent_max = 0, exact_sent_max = 0;
  // The part that crossed a node, by the ledger and by the formula (ExactSentByLink).
  std::vector<int64_t> inter_bytes_per_rank, exact_inter_bytes_per_rank;
  int64_t inter_max = 0, exact_inter_max = 0;
  int nodes = 1;
};

// Runs every size of the sweep for one op and algorithm. Under MPI the process that holds
// rank 0 gets (and prints) the rows; the others get none.
absl::StatusOr<std::vector<BenchRow>> RunSweep(const BenchConfig& config, comm::Primitive op,
                                               comm::Algorithm algorithm);

// glibc memcpy of `bytes` on `threads` threads at once (each its own buffers): GB/s copied
// per thread, best of a few runs. The memory system's ceiling for the collectives above.
double MemcpyGBps(int64_t bytes, int threads);

std::string FormatHeader(const BenchConfig& config);
std::string FormatRow(const BenchRow& row);
std::string FormatSummary(const std::vector<BenchRow>& rows);
absl::Status WriteBenchJson(const std::string& path, const std::vector<BenchRow>& rows);

}  // namespace tally
