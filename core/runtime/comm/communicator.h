// Communicator: a group of ranks, a transport, the rank's ledgers, an algorithm choice.
//
//   RETURN_IF_ERROR(world.AllReduce(grads, ReduceOp::kAvg));           // ring by default
//   RETURN_IF_ERROR(world.AllReduce(grads, ReduceOp::kSum, Algorithm::kNaive));
//   ASSIGN_OR_RETURN(auto dp, world.Split(/*color=*/tp_rank, /*key=*/rank, "dp"));
//
// Every collective is called by every rank of the group, in the same order, with matching
// arguments; a rank that differs (primitive, count, root, dtype, op, algorithm, order)
// makes the call fail on every rank with a message naming both sides. Buffers whose size
// the group does not divide are split by ChunkOf (partition.h): rank r's chunk is
// ChunkOf(n, size(), r). Bytes moved are in ring.h, naive.h and exact_traffic.h.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/runtime/comm/ledger/ledger.h"
#include "core/runtime/comm/nodes.h"
#include "core/runtime/comm/progress.h"
#include "core/runtime/comm/transport/transport.h"
#include "core/runtime/comm/types.h"
#include "core/runtime/comm/ledger/wire.h"
#include "core/runtime/memory_ledger.h"
#include "core/runtime/tensor.h"

namespace tally::comm {

struct CommOptions {
  Algorithm algorithm = Algorithm::kRing;  // used when a call names none
  // Messages are cut into pieces of at most this many bytes: the pipelining grain of the
  // chain broadcast and reduce, and a knob that lets a small test run a multi-piece ring.
  size_t max_chunk_bytes = size_t(1) << 20;
  // Every collective calls the transport's own (MPI_Allreduce, ...) instead of ring or
  // naive; the ledger books the ring's bytes for it under algorithm "native" (bytes_as_ring).
  bool native_collectives = false;
  // An all-reduce of at most this many bytes that would run the ring runs recursive
  // doubling instead (recursive_doubling.h: log2(p) rounds instead of 2(p-1)), and is
  // booked as such; 0: never. NCCL and MPI libraries switch the same way by size.
  int64_t small_allreduce_bytes = 0;
  // The world's nodes (nodes.h), shared by every communicator split from the world; null:
  // every rank on one node.
  std::shared_ptr<const Nodes> nodes;
};

// What one rank owns, shared by all its communicators: its ledgers and its allocator.
struct RankResources {
  explicit RankResources(int world_rank) : traffic(world_rank), allocator(&memory) {}
  MemoryLedger memory;
  TrafficLedger traffic;
  Allocator allocator;
  // How many communicators of each name and members the rank has made: their timeline
  // names (core/runtime/timeline.h) tell two groups of the same ranks apart.
  std::map<std::string, int> groups;
};

class Communicator;

// A non-blocking point-to-point transfer (Isend / Irecv).
class Work {
 public:
  absl::Status Wait();

 private:
  friend class Communicator;
  Work(std::unique_ptr<Wire> wire, size_t bytes);
  std::unique_ptr<Wire> wire_;
  Requests pending_;
  size_t bytes_;
  int64_t timeline_work_ = -1;  // its number on the rank's timeline (timeline.h)
};

// A non-blocking collective (IAllReduce, IReduceScatter, IAllGather): its algorithm runs
// on the communicator's communication thread (progress.h) while the caller goes on. The
// buffers must stay alive and untouched until Wait().
class CollectiveWork {
 public:
  // Waits for the call; returns its status, and books it: its time from the post to its
  // end, of which the part spent here held the caller up.
  absl::Status Wait();
  // Waits for a call nobody waited for (and books it).
  ~CollectiveWork();
  CollectiveWork(const CollectiveWork&) = delete;
  CollectiveWork& operator=(const CollectiveWork&) = delete;

 private:
  friend class Communicator;
  // Set by the thread that ran the call.
  struct Done {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    absl::Status status;
    int64_t ended_nanos = 0;
    void Set(absl::Status s, int64_t ended);
  };
  CollectiveWork(std::unique_ptr<Wire> wire, int64_t payload_bytes);

  std::unique_ptr<Wire> wire_;
  std::shared_ptr<Done> done_ = std::make_shared<Done>();
  int64_t payload_bytes_;
  bool waited_ = false;
  absl::Status status_;
  int64_t timeline_work_ = -1;  // its number on the rank's timeline (timeline.h)
};

class Communicator {
 public:
  // `resources` must outlive the communicator and every communicator split from it.
  Communicator(std::unique_ptr<Transport> transport, RankResources* resources,
               CommOptions options = {});

  int rank() const { return transport_->rank(); }
  int size() const { return transport_->size(); }
  int world_rank() const { return transport_->world_rank(rank()); }
  int world_rank_of(int group_rank) const { return transport_->world_rank(group_rank); }
  const std::string& name() const { return transport_->name(); }
  // The GPU this rank's transport is bound to (NCCL), where its tensors must live; -1: none.
  int gpu() const { return transport_->gpu(); }
  const CommOptions& options() const { return options_; }
  // The node of each rank of the group, by group rank (all 0 without options().nodes).
  const std::vector<int>& group_nodes() const { return group_nodes_; }
  void set_options(const CommOptions& options) {
    options_ = options;
    group_nodes_ = GroupNodes();
  }

  TrafficLedger& ledger() { return resources_->traffic; }
  MemoryLedger& memory() { return resources_->memory; }
  Allocator& allocator() { return resources_->allocator; }

  using AlgorithmChoice = std::optional<Algorithm>;  // nullopt: options().algorithm

  // data (n) on the root -> data (n) on every rank.
  absl::Status Broadcast(Tensor& data, int root, AlgorithmChoice algorithm = {});
  // input (n) on every rank -> output (n) = op over ranks, on the root (elsewhere unused).
  absl::Status Reduce(const Tensor& input, Tensor& output, ReduceOp op, int root,
                      AlgorithmChoice algorithm = {});
  // data (n) -> op over ranks, on every rank, in place.
  absl::Status AllReduce(Tensor& data, ReduceOp op, AlgorithmChoice algorithm = {});
  // One value, as a 1-element tensor of `dtype` (kF32 or kF64) in this rank's comm
  // memory, all-reduced over the group: a loss, a sum of squares.
  absl::StatusOr<double> AllReduceValue(double value, DType dtype, ReduceOp op,
                                        AlgorithmChoice algorithm = {});
  // input (n) on every rank -> output (chunk r of the op over ranks).
  absl::Status ReduceScatter(const Tensor& input, Tensor& output, ReduceOp op,
                             AlgorithmChoice algorithm = {});
  // input (chunk r) -> output (n): every rank's chunk in rank order.
  absl::Status AllGather(const Tensor& input, Tensor& output, AlgorithmChoice algorithm = {});
  // The root's input (count elements) -> output (chunk r) on every rank. `count` is known
  // to every rank; non-roots may pass an empty input.
  absl::Status Scatter(const Tensor& input, Tensor& output, int64_t count, int root,
                       AlgorithmChoice algorithm = {});
  // input (chunk r) on every rank -> the root's output (count elements).
  absl::Status Gather(const Tensor& input, Tensor& output, int64_t count, int root,
                      AlgorithmChoice algorithm = {});
  // input (n) on every rank, chunk j meant for rank j -> output (size()·c_r): slot j holds
  // rank j's chunk r, where c_r = ChunkOf(n, size(), r).count.
  absl::Status AllToAll(const Tensor& input, Tensor& output, AlgorithmChoice algorithm = {});
  // The all-to-all with blocks of each pair's own size: input holds send_counts[j]
  // elements for rank j, packed in rank order; output receives recv_counts[j] from rank j,
  // packed likewise. recv_counts[j] must be rank j's send_counts[r] (ExchangeCounts gives
  // them); a pair with nothing to move exchanges no message. Ring: p−1 pairwise steps as
  // AllToAll; naive: every pair at once; the same bytes, Σ_{j≠r} send_counts[j] elements
  // (exact_traffic.h's AllToAllVTraffic). It has no native form (it runs the ring).
  absl::Status AllToAllV(const Tensor& input, std::span<const int64_t> send_counts,
                         Tensor& output, std::span<const int64_t> recv_counts,
                         AlgorithmChoice algorithm = {});
  // What every rank sends this one, from what this one sends every rank: an all-to-all of
  // the counts (an `alltoall` row of its own), those an AllToAllV needs first. One count per
  // rank ((p−1)·8 bytes a rank), or c per rank (c·p counts, rank j's c at j·c: what goes to
  // each of rank j's experts, say), the received ones likewise source by source.
  absl::StatusOr<std::vector<int64_t>> ExchangeCounts(std::span<const int64_t> send_counts);
  absl::Status Barrier(AlgorithmChoice algorithm = {});

  // Non-blocking forms of the collectives the strategies overlap with compute: the same
  // algorithm, bytes, ledger row and results as the blocking call, run on this
  // communicator's communication thread in the order they were posted (progress.h; on a
  // transport whose calls must stay on the rank's thread they run at once). A blocking
  // call on the same communicator first waits for every one posted before it.
  absl::StatusOr<std::unique_ptr<CollectiveWork>> IAllReduce(const Tensor& data, ReduceOp op,
                                                             AlgorithmChoice algorithm = {});
  absl::StatusOr<std::unique_ptr<CollectiveWork>> IReduceScatter(const Tensor& input,
                                                                 const Tensor& output,
                                                                 ReduceOp op,
                                                                 AlgorithmChoice algorithm = {});
  absl::StatusOr<std::unique_ptr<CollectiveWork>> IAllGather(const Tensor& input,
                                                             const Tensor& output,
                                                             AlgorithmChoice algorithm = {});

  // Point-to-point within the group. A Send matches the peer's Recv of the same count.
  absl::Status Send(const Tensor& data, int peer);
  absl::Status Recv(Tensor& data, int peer);
  // Non-blocking forms: the tensor must stay alive and untouched until Wait().
  std::unique_ptr<Work> Isend(const Tensor& data, int peer);
  std::unique_ptr<Work> Irecv(Tensor& data, int peer);

  // MPI_Comm_split: ranks that pass the same color form a group named `name`, ordered by
  // (key, rank). Collective over this communicator. A negative color joins no group and
  // gets nullptr.
  absl::StatusOr<std::unique_ptr<Communicator>> Split(int color, int key, const std::string& name);

 private:
  // Checks the arguments every collective shares, then returns the Wire of the call, timed
  // from here. A blocking call (not `queued`) first waits for the non-blocking ones posted
  // before it.
  absl::StatusOr<Wire> Begin(Primitive primitive, AlgorithmChoice algorithm, DType dtype,
                             ReduceOp op, int root, int64_t count,
                             std::initializer_list<const Tensor*> tensors, bool queued = false);
  // The algorithm of a call with a non-blocking form, on its wire.
  absl::Status AllReduceOn(Wire& w, const Tensor& data);
  absl::Status ReduceScatterOn(Wire& w, const Tensor& input, const Tensor& output);
  absl::Status AllGatherOn(Wire& w, const Tensor& input, const Tensor& output);
  // The same as a call to run later (the non-blocking form), and its payload; the
  // tensors are held by the call.
  struct Call {
    int64_t payload_bytes;
    std::function<absl::Status(Wire&)> run;
  };
  Call AllReduceCall(const Tensor& data);
  Call ReduceScatterCall(const Tensor& input, const Tensor& output);
  Call AllGatherCall(const Tensor& input, const Tensor& output);
  // Runs `call` on the communication thread, or now where the transport or the buffers'
  // device keep it on this thread.
  std::unique_ptr<CollectiveWork> Post(std::unique_ptr<Wire> wire, Call call);
  // Waits until every non-blocking call posted so far has run.
  void Drain() {
    if (progress_ != nullptr) progress_->Drain();
  }
  // The call's algorithm: ring_call, naive_call, or the transport's own collective.
  absl::Status Run(Wire& wire, const void* input, void* output,
                   absl::FunctionRef<absl::Status()> ring_call,
                   absl::FunctionRef<absl::Status()> naive_call);
  // The same for the primitives with a hierarchical form (Begin chooses it only for them).
  absl::Status Run(Wire& wire, const void* input, void* output,
                   absl::FunctionRef<absl::Status()> ring_call,
                   absl::FunctionRef<absl::Status()> naive_call,
                   absl::FunctionRef<absl::Status()> hierarchical_call);
  // Books the call in the ledger and passes on its status.
  absl::Status Finish(Wire& wire, int64_t payload_bytes, absl::Status status);
  // The CUDA device of a call's buffer `t` (-1: host memory), which must be where the
  // call's `first` buffer is, on a transport that moves GPU memory if it is a GPU.
  absl::StatusOr<int> BufferDevice(absl::FunctionRef<std::string()> where, const Tensor& t,
                                   const Tensor& first) const;
  absl::Status CheckCount(Primitive primitive, const char* what, const Tensor& t,
                          int64_t expected) const;
  std::unique_ptr<Work> PointToPoint(const Tensor& data, int peer, bool send);

  std::unique_ptr<Transport> transport_;
  RankResources* resources_;
  CommOptions options_;
  std::vector<int> GroupNodes() const;
  std::vector<int> group_nodes_;   // GroupNodes(), kept
  Tensor scratch_;                 // the comm buffer the algorithms borrow (Wire::Scratch)
  // The group as the rank's timeline names it (timeline.h): "name:world ranks#k", the
  // rank's k-th communicator of that name and members (every member makes them in the
  // same order).
  const std::string& TimelineGroup() const { return timeline_group_; }
  std::string timeline_group_;
  uint64_t collective_calls_ = 0;  // the sequence number of the next collective
  uint64_t splits_ = 0;
  // The communication thread, started by the first non-blocking call; declared last, so
  // that it stops (running what is queued) before the rest goes.
  std::unique_ptr<Progress> progress_;
};

}  // namespace tally::comm
