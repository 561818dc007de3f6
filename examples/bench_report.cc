#include "examples/bench_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/runtime/comm/check/collective_check.h"
#include "core/runtime/comm/ledger/exact_traffic.h"
#include "core/runtime/comm/launch.h"
#include "core/runtime/comm/transport/mpi/mpi_launch.h"
#include "core/runtime/comm/transport/nccl/nccl_transport.h"
#include "core/runtime/clock.h"
#include "core/runtime/memory_ledger.h"
#include "core/runtime/json_writer.h"
#include "core/runtime/tensor.h"
#include "core/runtime/status_macros.h"

namespace tally {

using comm::Algorithm;
using comm::Primitive;

absl::Status BenchConfig::Validate() const {
  auto bad = [](const std::string& what) {
    return absl::InvalidArgumentError("[tally_bench] " + what);
  };
  if (min_bytes < 0 || max_bytes < min_bytes) return bad("need 0 <= -b <= -e");
  if (factor < 2) return bad("-f must be at least 2");
  if (iterations < 1 || warmup < 0) return bad("-n must be >= 1 and -w >= 0");
  if (ranks < 1) return bad("--ranks must be >= 1");
  if (ranks > kMaxRanks) return bad(absl::StrCat("--ranks=", ranks, " is more than the ", kMaxRanks, " ranks tally runs"));
  if (root < 0 || root >= ranks) return bad("--root must be a rank in [0, --ranks)");
  if (max_chunk_bytes < 4) return bad("--max_chunk_bytes must be at least one element (4)");
  if (small_allreduce_bytes < 0) return bad("--small_allreduce_bytes must be >= 0 (0: never)");
  if (gpus_per_node < 0) return bad("--gpus_per_node must be at least 1 (or 0: the machine's own nodes)");
  if (!(timeout_s > 0) || !std::isfinite(timeout_s)) return bad("--timeout_s must be a positive number");
  if (nccl && !gpu) return bad("--backend=nccl needs --device=cuda (NCCL moves GPU memory)");
  if (mpi && gpu && !nccl) {
    return bad("--device=cuda runs on --backend=threads or nccl; MPI moving GPU memory is not built");
  }
  // Every rank of this process holds a send and a receive buffer of the largest size, and
  // a copy of each to check against (RunSweep): refuse what cannot fit.
  const int ranks_here = mpi ? 1 : ranks;
  if (gpu) return absl::OkStatus();
  return FitsInMemory(4.0 * double(max_bytes) * ranks_here,
                      absl::StrCat("[tally_bench] -e=", max_bytes, " on ", ranks_here, " rank(s) here"));
}

absl::StatusOr<int64_t> ParseBytes(const std::string& text) {
  int64_t scale = 1;
  std::string digits = text;
  if (!digits.empty()) {
    switch (digits.back()) {
      case 'K': case 'k': scale = int64_t(1) << 10; break;
      case 'M': case 'm': scale = int64_t(1) << 20; break;
      case 'G': case 'g': scale = int64_t(1) << 30; break;
      default: scale = 1;
    }
    if (scale != 1) digits.pop_back();
  }
  int64_t value = 0;
  if (!absl::SimpleAtoi(digits, &value) || value < 0) {
    return absl::InvalidArgumentError("[tally_bench] '" + text +
                                      "' is not a size; use bytes with an optional K, M or G");
  }
  if (value > std::numeric_limits<int64_t>::max() / scale) {
    return absl::InvalidArgumentError("[tally_bench] '" + text + "' is more bytes than 64 bits count");
  }
  return value * scale;
}

// Long, and kept whole: the sweep as nccl-tests runs it, one size after another on
// every rank (warm-up, timed calls, check), then the rows from every rank's times and
// ledger; splitting it would scatter one timed loop over several functions.
absl::StatusOr<std::vector<BenchRow>> RunSweep(const BenchConfig& config, Primitive op,
                                               Algorithm algorithm) {
  std::vector<int64_t> counts;
  for (int64_t bytes = config.min_bytes; bytes <= config.max_bytes;
       bytes = bytes > config.max_bytes / config.factor ? config.max_bytes + 1
                                                        : std::max<int64_t>(bytes * config.factor, bytes + 1)) {
    int64_t count = bytes / 4;
    if (counts.empty() || counts.back() != count) counts.push_back(count);
  }
  int p = config.ranks;
  int root = config.root;
  std::vector<BenchRow> rows(counts.size());
  // seconds[size][rank]: the mean time of one call on that rank.
  std::vector<std::vector<double>> seconds(counts.size(), std::vector<double>(p));
  comm::LaunchOptions launch;
  launch.world_size = p;
  launch.timeout = absl::Seconds(config.timeout_s);
  launch.comm.algorithm = algorithm;
  launch.comm.max_chunk_bytes = size_t(config.max_chunk_bytes);
  launch.comm.small_allreduce_bytes = config.small_allreduce_bytes;
  if (config.gpus_per_node > 0) {
    ASSIGN_OR_RETURN(comm::Nodes placed, comm::Nodes::Blocks(p, config.gpus_per_node));
    launch.comm.nodes = std::make_shared<const comm::Nodes>(std::move(placed));
  }
  std::shared_ptr<const comm::Nodes> nodes;  // where the ranks ran, as rank 0 saw it
  if (config.nccl) launch.world_transport = comm::nccl::WorldTransport;
  for (BenchRow& row : rows) {
    row.sent_bytes_per_rank.assign(p, 0);
    row.recv_bytes_per_rank.assign(p, 0);
    row.inter_bytes_per_rank.assign(p, 0);
  }
  constexpr int kFigures = 4;  // sent, received, wrong elements, sent across nodes

  bool holds_rank0 = false;
  auto run_rank = [&](comm::Communicator& world) -> absl::Status {
    int r = world.rank();
    // This rank's times and ledger bytes, by size; gathered to rank 0 at the end.
    const int64_t sizes = int64_t(counts.size());
    Allocator unaccounted(nullptr);
    ASSIGN_OR_RETURN(Tensor my_seconds, Tensor::Empty({sizes}, DType::kF64, unaccounted));
    // sent, received, wrong elements and sent across nodes, by size
    ASSIGN_OR_RETURN(Tensor mine, Tensor::Empty({kFigures * sizes}, DType::kI64, unaccounted));
    const comm::Nodes here = world.options().nodes != nullptr ? *world.options().nodes
                                                              : comm::Nodes::One(p);
    int64_t* figures = mine.data<int64_t>();
    // The calls' memory: the host, or the GPU of the rank's transport (NCCL), else GPU 0.
    Allocator gpu(&world.memory(), Device{DeviceType::kCUDA, std::max(0, world.gpu())});
    for (size_t i = 0; i < counts.size(); ++i) {
      int64_t n = counts[i];
      ASSIGN_OR_RETURN(comm::CallBuffers host, comm::MakeCallBuffers(world, op, n, root));
      comm::CallBuffers buffers = host;
      if (config.gpu) {
        ASSIGN_OR_RETURN(buffers, comm::CopyCallBuffers(host, gpu));
      }
      for (int k = 0; k < config.warmup; ++k) {
        RETURN_IF_ERROR(comm::Call(world, op, algorithm, buffers, n, root));
      }
      RETURN_IF_ERROR(world.Barrier());
      int64_t start = MonotonicNanos();
      for (int k = 0; k < config.iterations; ++k) {
        RETURN_IF_ERROR(comm::Call(world, op, algorithm, buffers, n, root));
      }
      my_seconds.data<double>()[i] = SecondsSince(start) / config.iterations;

      // One more call, alone in the ledger, with closed-form data when checking.
      if (config.check) {
        comm::FillInputs(world, op, host, n, root);
        if (config.gpu) RETURN_IF_ERROR(comm::CopyContents(host, buffers));
      }
      world.ledger().Clear();
      RETURN_IF_ERROR(comm::Call(world, op, algorithm, buffers, n, root));
      if (config.check && config.gpu) RETURN_IF_ERROR(comm::CopyContents(buffers, host));
      figures[kFigures * i + 2] = config.check ? comm::CountWrong(world, op, host, n, root) : 0;
      comm::TransferTotals t = world.ledger().Total();
      figures[kFigures * i] = t.bytes_sent;
      figures[kFigures * i + 1] = t.bytes_recv;
      figures[kFigures * i + 3] =
          world.ledger().SentByLink(here, [](const comm::LedgerKey&) { return true; }).inter;
      world.ledger().Clear();
    }
    // Thread ranks and processes alike: every rank's figures to rank 0 (which checks them
    // too, so a wrong result anywhere counts).
    const bool root_rank = r == 0;
    auto on_root = [&](int64_t n, DType dtype) {
      return Tensor::Empty({root_rank ? n : 0}, dtype, unaccounted);
    };
    ASSIGN_OR_RETURN(Tensor all_seconds, on_root(p * sizes, DType::kF64));
    ASSIGN_OR_RETURN(Tensor all, on_root(kFigures * p * sizes, DType::kI64));
    RETURN_IF_ERROR(world.Gather(my_seconds, all_seconds, p * sizes, 0, Algorithm::kNaive));
    RETURN_IF_ERROR(world.Gather(mine, all, kFigures * p * sizes, 0, Algorithm::kNaive));
    if (!root_rank) return absl::OkStatus();
    holds_rank0 = true;
    nodes = std::make_shared<const comm::Nodes>(here);
    for (int q = 0; q < p; ++q) {
      for (int64_t i = 0; i < sizes; ++i) {
        const int64_t* f = all.data<int64_t>() + kFigures * (q * sizes + i);
        BenchRow& row = rows[size_t(i)];
        seconds[size_t(i)][size_t(q)] = all_seconds.data<double>()[q * sizes + i];
        row.sent_bytes_per_rank[size_t(q)] = f[0];
        row.recv_bytes_per_rank[size_t(q)] = f[1];
        row.wrong += f[2];
        row.inter_bytes_per_rank[size_t(q)] = f[3];
      }
    }
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(config.mpi ? comm::mpi::RunMpiRank(launch, run_rank)
                             : comm::RunThreadRanks(launch, run_rank));
  if (!holds_rank0) return std::vector<BenchRow>();

  const std::vector<int>& group_nodes = nodes->node_of();  // the group is the world
  for (size_t i = 0; i < counts.size(); ++i) {
    BenchRow& row = rows[i];
    row.op = op;
    row.algorithm = comm::EffectiveAlgorithm(op, algorithm, group_nodes, counts[i] * 4,
                                             config.small_allreduce_bytes);  // what ran
    row.nodes = nodes->count();
    row.ranks = p;
    row.root = (op == Primitive::kBroadcast || op == Primitive::kReduce ||
                op == Primitive::kGather || op == Primitive::kScatter)
                   ? root
                   : -1;
    row.count = counts[i];
    row.size_bytes = counts[i] * 4;
    row.time_us = *std::max_element(seconds[i].begin(), seconds[i].end()) * 1e6;
    row.algbw_gbps = row.time_us > 0 ? row.size_bytes / (row.time_us * 1e3) : 0;
    row.busbw_gbps = row.algbw_gbps * comm::BusFactor(op, p);
    for (int r = 0; r < p; ++r) {
      row.exact_sent_bytes_per_rank.push_back(
          comm::ExactTraffic(op, row.algorithm, p, r, root, row.count, 4, group_nodes).sent);
      row.exact_inter_bytes_per_rank.push_back(
          comm::ExactSentByLink(op, row.algorithm, group_nodes, r, root, row.count, 4).inter);
    }
    row.inter_max = *std::max_element(row.inter_bytes_per_rank.begin(), row.inter_bytes_per_rank.end());
    row.exact_inter_max = *std::max_element(row.exact_inter_bytes_per_rank.begin(),
                                            row.exact_inter_bytes_per_rank.end());
    row.sent_max = *std::max_element(row.sent_bytes_per_rank.begin(), row.sent_bytes_per_rank.end());
    row.exact_sent_max = *std::max_element(row.exact_sent_bytes_per_rank.begin(),
                                           row.exact_sent_bytes_per_rank.end());
    std::printf("%s", FormatRow(row).c_str());
    std::fflush(stdout);
  }
  return rows;
}

double MemcpyGBps(int64_t bytes, int threads) {
  MemoryLedger ledger;
  Allocator alloc(&ledger);
  std::vector<Tensor> from, to;
  for (int t = 0; t < threads; ++t) {
    from.push_back(Tensor::Empty({bytes}, DType::kBF16, alloc).value());
    to.push_back(Tensor::Empty({bytes}, DType::kBF16, alloc).value());
  }
  double best = 0;
  for (int run = 0; run < 5; ++run) {
    int64_t start = MonotonicNanos();
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; ++t) {
      workers.emplace_back([&, t] { std::memcpy(to[t].raw_data(), from[t].raw_data(), size_t(bytes)); });
    }
    for (std::thread& w : workers) w.join();
    best = std::max(best, bytes / (SecondsSince(start) * 1e9));
  }
  return best;
}

std::string FormatHeader(const BenchConfig& config) {
  return absl::StrFormat(
      "# tally_bench: %d %s, f32, redop sum, max_chunk_bytes %d, %d warm-up + %d timed "
      "iterations, check %d\n"
      "# time: the slowest rank's mean per call; busbw: nccl-tests' bus factors; sent/rank: the "
      "busiest rank's bytes, by the ledger and by the exact formula\n"
      "#\n"
      "# %-14s %-5s %12s %11s %4s %5s %4s %11s %10s %10s %6s %14s %14s%s\n",
      config.ranks,
      absl::StrCat(config.mpi ? "MPI processes" : "thread ranks",
                   config.nccl ? " over NCCL" : "", config.gpu ? ", buffers on GPUs" : ""),
      config.max_chunk_bytes, config.warmup, config.iterations, config.check ? 1 : 0,
      "op", "algo", "size", "count", "type", "redop", "root", "time(us)", "algbw(GB/s)",
      "busbw(GB/s)", "#wrong", "sent/rank", "exact",
      config.gpus_per_node > 0 && config.gpus_per_node < config.ranks
          ? absl::StrFormat(" %14s %14s", "inter/rank", "exact")
          : "");
}

std::string FormatRow(const BenchRow& row) {
  bool reduces = row.op == Primitive::kAllReduce || row.op == Primitive::kReduceScatter ||
                 row.op == Primitive::kReduce;
  std::string line = absl::StrFormat(
      "  %-14s %-5s %12d %11d %4s %5s %4d %11.2f %10.3f %10.3f %6d %14d %14d",
      comm::Name(row.op),
      row.algorithm == Algorithm::kHierarchical         ? "hier"
      : row.algorithm == Algorithm::kRecursiveDoubling ? "rec_dbl"
                                                        : comm::Name(row.algorithm),
      row.size_bytes, row.count, "f32", reduces ? "sum" : "none", row.root, row.time_us,
      row.algbw_gbps, row.busbw_gbps, row.wrong, row.sent_max, row.exact_sent_max);
  if (row.nodes > 1) line += absl::StrFormat(" %14d %14d", row.inter_max, row.exact_inter_max);
  return line + "\n";
}

std::string FormatSummary(const std::vector<BenchRow>& rows) {
  double busbw = 0;
  int64_t wrong = 0, mismatched = 0;
  for (const BenchRow& row : rows) {
    busbw += row.busbw_gbps;
    wrong += row.wrong;
    mismatched += row.sent_bytes_per_rank != row.exact_sent_bytes_per_rank ||
                  row.inter_bytes_per_rank != row.exact_inter_bytes_per_rank;
  }
  return absl::StrFormat(
      "# Out of bounds values : %d %s\n# Avg bus bandwidth    : %.3f GB/s\n"
      "# Ledger vs exact formula: %d of %d rows differ (every rank compared)\n",
      wrong, wrong == 0 ? "OK" : "WRONG", rows.empty() ? 0.0 : busbw / rows.size(), mismatched,
      rows.size());
}

absl::Status WriteBenchJson(const std::string& path, const std::vector<BenchRow>& rows) {
  JsonWriter w;
  w.BeginArray();
  for (const BenchRow& row : rows) {
    w.BeginObject();
    w.Key("op").String(comm::Name(row.op));
    w.Key("algorithm").String(comm::Name(row.algorithm));
    w.Key("ranks").Int(row.ranks);
    w.Key("root").Int(row.root);
    w.Key("size_bytes").Int(row.size_bytes);
    w.Key("count").Int(row.count);
    w.Key("time_us").Double(row.time_us);
    w.Key("algbw_gbps").Double(row.algbw_gbps);
    w.Key("busbw_gbps").Double(row.busbw_gbps);
    w.Key("wrong").Int(row.wrong);
    w.Key("sent_bytes_per_rank").IntArray(row.sent_bytes_per_rank);
    w.Key("recv_bytes_per_rank").IntArray(row.recv_bytes_per_rank);
    w.Key("exact_sent_bytes_per_rank").IntArray(row.exact_sent_bytes_per_rank);
    w.Key("nodes").Int(row.nodes);
    w.Key("inter_sent_bytes_per_rank").IntArray(row.inter_bytes_per_rank);
    w.Key("exact_inter_sent_bytes_per_rank").IntArray(row.exact_inter_bytes_per_rank);
    w.EndObject();
  }
  w.EndArray();
  return WriteTextFile(path, w.str() + "\n");
}

}  // namespace tally
