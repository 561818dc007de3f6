#include "core/runtime/comm/launch.h"

#include <exception>
#include <memory>
#include <mutex>
#include <numeric>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/runtime/comm/ledger/names.h"
#include "core/runtime/comm/transport/threads/threads_transport.h"

namespace tally::comm {

absl::Status CallRank(const RankFunction& fn, Communicator& world) {
  try {
    return fn(world);
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("threw an exception: ", e.what()));
  } catch (...) {
    return absl::InternalError("threw an exception of unknown type");
  }
}

absl::StatusOr<std::unique_ptr<Transport>> MakeWorldTransport(const LaunchOptions& options,
                                                              std::unique_ptr<Transport> launcher,
                                                              int local_rank) {
  if (!options.world_transport) return launcher;
  return options.world_transport(std::move(launcher), local_rank, options.timeout);
}

absl::Status RunThreadRanks(const LaunchOptions& options, const RankFunction& fn) {
  int n = options.world_size;
  if (n < 1) {
    return absl::InvalidArgumentError(absl::StrCat("[launch] world size must be >= 1, got ", n));
  }
  if (options.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("[launch] the wait timeout must be positive");
  }
  auto session = std::make_shared<threads::Session>(n, options.timeout);
  std::vector<int> ranks(n);
  std::iota(ranks.begin(), ranks.end(), 0);
  auto world = std::make_shared<threads::Hub>(session, ranks, group::kWorld);

  // A run that every rank stops together (kCancelled: a signal, core/runtime/signals.h) is no
  // failure: no rank waits for another, so the session is not aborted; rank 0's message
  // is returned.
  std::mutex stopped_mu;
  absl::Status stopped;
  auto run_rank = [&](int rank) {
    RankResources resources(rank);
    std::unique_ptr<Communicator> comm;
    absl::StatusOr<std::unique_ptr<Transport>> transport =
        MakeWorldTransport(options, std::make_unique<threads::ThreadsTransport>(world, rank), rank);
    absl::Status status = transport.status();
    if (status.ok()) {
      comm = std::make_unique<Communicator>(*std::move(transport), &resources, options.comm);
      status = CallRank(fn, *comm);
    }
    if (absl::IsCancelled(status)) {
      std::lock_guard<std::mutex> lock(stopped_mu);
      if (stopped.ok() || rank == 0) stopped = status;
    } else if (!status.ok()) {
      // The first failure names its rank; ranks that fail because of it keep its message.
      session->Abort(absl::Status(status.code(), absl::StrCat("rank ", rank, " failed: ",
                                                              status.message())));
    }
    comm.reset();  // after the abort, so that a transport closing down does not wait for peers
    session->MarkExited(rank);
  };

  std::vector<std::thread> threads;
  threads.reserve(n);
  for (int rank = 0; rank < n; ++rank) threads.emplace_back(run_rank, rank);
  for (std::thread& t : threads) t.join();

  if (session->aborted()) return session->abort_status();
  return stopped;
}

}  // namespace tally::comm
