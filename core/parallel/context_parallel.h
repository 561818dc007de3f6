// Context parallelism: every sequence of a micro-batch cut into N = cp pieces along the
// sequence, each cp rank holding one piece's activations (s/N of them). Everything but
// attention works on a token alone, so attention is the only layer that talks; the
// weights are the same on every cp rank.
//
// Pieces (CpPieces). With --cp_load_balance=none rank r holds positions r·s/N ..
// (r+1)·s/N − 1: under the causal mask rank r's queries see r·L² + L(L+1)/2 (query, key)
// pairs (L = s/N), so the last rank works 2N−1 times the first. zigzag cuts the sequence
// into 2N chunks of m = s/(2N) and gives rank r the chunks r and 2N−1−r: every rank sees
// (2N−1)·m² + m(m+1) pairs (BlockPositions::VisiblePairs; a test holds it). A rank keeps
// its pieces' rows in sequence order.
//
// Three ways to attend (--cp_comm), per layer and micro-batch, with b sequences, h = C
// channels, e bytes a value and L = s/N rows a rank:
//   p2p (ring attention): each rank keeps its Q; K and V (packed, 2·b·L·h values) go round
//     the ring to the right, N−1 sends forward, the next block's K, V in flight while the
//     current one computes (Isend/Irecv). Step t attends the local queries to the K, V of
//     rank (r − t) mod N (RingSource), merged by log-sum-exp (block_attention.h). Backward
//     sends K, V round again (N−1) and the dK, dV accumulators (N sends: the last brings
//     each rank's own home):
//       forward  (N−1)·2·b·L·h·e,  backward (2N−1)·2·b·L·h·e  bytes sent a rank.
//   allgather (Llama 3's): one all-gather of the packed K, V over cp before attention, kept
//     for backward, and a reduce-scatter (sum) of the gathered dK, dV after it:
//       forward  (N−1)/N·2·b·s·h·e,  backward the same  (the ring's bytes).
//   a2a (DeepSpeed-Ulysses): all-to-all q, k and v from (L rows, all heads) to (s rows,
//     heads/N), ordinary causal attention on the local heads, the output back the same
//     way; backward the reverse (dO in; dq, dk, dv out). Needs n_head divisible by N:
//       4 all-to-alls forward and 4 backward of (N−1)/N·b·L·h·e bytes sent each.
// Under full recompute (a pipeline stage's forward or each layer's run again before its
// backward) every layer's attention forward runs again in backward, with its calls: the
// ring's N−1 sends, the all-gather, or the four all-to-alls more, in the backward phase.
// With E experts a layer's router sums its load-balancing statistics over cp (moe.h):
// one all-reduce of 2E fp64 values per layer and micro-batch (scope layer{l}.balance),
// again with a recomputed forward, 2(N−1)/N·2E·8 bytes sent a rank each.
// ContextParallelCalls declares exactly these, as the ledger books them (group cp,
// scope layer{l}.context); the tests hold the ledger to them.
//
// Mixed precision: under bf16 every call sends bf16 (e = 2): the K, V the ring passes and
// gathers (the kept qkv is bf16 already, so they leave unchanged), the dK, dV accumulators
// (each rank adds its fp32 part with one rounding before passing one on), the gathered
// dK, dV (rounded before the reduce-scatter), and Ulysses' q, k, v, output and their
// gradients (rounded as they leave, as tensor parallelism's activations are). The blocks
// compute in fp32 from the kept bf16 q, k, v widened; the probabilities and dS are not
// rounded (serial attention rounds P, dY and dS as they enter its products: the two
// differ within the bf16 tolerance).
//
// Determinism: a block merge is exact up to rounding, so the order is fixed: the ring's
// steps 0, 1, .., N−1, and within a step the visiting pieces in sequence order (the
// all-gather: the sources 0..N−1, each one's pieces in sequence order). The same run gives
// the same bits; p2p and allgather may differ from each other (and from serial attention)
// in the last bits.
//
// Activation memory: a layer keeps for backward (instead of serial attention's b·NH·s²
// probabilities) ContextAttentionKept values: the log-sum-exp (b·NH·L); allgather also the
// gathered K, V (2·b·s·h); a2a the head-split q, k, v and output (4·b·L·h). In flight a
// rank holds, shared by the layers: p2p two K, V buffers and two dK, dV accumulators, each
// 2·b·L·h values; allgather its K, V and dK, dV (2·b·L·h each) and the gathered dK, dV
// (2·b·s·h); a2a dq, dk, dv and dO of its heads (4·b·L·h) and two packed tensors (b·L·h
// each); and backward's D (b·NH·L).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/model/sequence_split.h"
#include "core/runtime/comm/communicator.h"
#include "core/runtime/comm/ledger/expected_calls.h"
#include "core/runtime/kernels/cpu/block_attention.h"

namespace tally::parallel {

enum class CpComm { kP2p, kAllGather, kAllToAll };
enum class CpLoadBalance { kNone, kZigzag };

const char* Name(CpComm comm);            // "p2p", "allgather", "a2a"
const char* Name(CpLoadBalance balance);  // "none", "zigzag"
absl::StatusOr<CpComm> ParseCpComm(std::string_view name);
absl::StatusOr<CpLoadBalance> ParseCpLoadBalance(std::string_view name);

// A run of sequence positions.
struct SequencePiece {
  int start = 0;
  int length = 0;
};

// The pieces cp rank `rank` of `ranks` holds of a sequence of `seq_len`, in sequence order
// (CheckContextParallel must accept the split).
std::vector<SequencePiece> CpPieces(int rank, int ranks, int seq_len, CpLoadBalance balance);

// Step t of the ring attends to the K, V of this rank.
inline int RingSource(int rank, int ranks, int step) {
  return ((rank - step) % ranks + ranks) % ranks;
}

// One clear error for a split tally cannot make: cp < 1, a sequence not divisible by N
// (2N under zigzag), a2a with n_head not divisible by N.
absl::Status CheckContextParallel(int ranks, int seq_len, int n_head, CpComm comm,
                                  CpLoadBalance balance);

// What one cp rank's attention calls cost, per step.
struct ContextParallelShape {
  CpComm comm = CpComm::kP2p;
  int ranks = 1, rank = 0;    // the cp group
  int64_t batch = 0;          // b: sequences a micro-batch
  int64_t seq_len = 0;        // s: the whole sequence
  int64_t channels = 0;       // h = C
  std::vector<int> layers;    // this rank's layers, in order (their scopes)
  int64_t micro_batches = 1;  // forwards and backwards a step
  int64_t element = 4;        // bytes a value (activations and their gradients)
  // Full recompute (a pipeline stage's forward, or each layer's, again in backward): every
  // layer's forward calls once more, booked in backward.
  bool recompute = false;
  // E experts in every layer (0: dense): the router's balance statistics summed over cp.
  int experts = 0;
};
comm::ExpectedCalls ContextParallelCalls(const ContextParallelShape& s);

// Values one layer keeps for its backward, b sequences of s positions, C channels and NH
// heads on this rank (the model keeps them with the layer's activations): the
// log-sum-exp, b·NH·L; allgather also the gathered K, V, 2·b·s·C; a2a also the head-split
// q, k, v and output, 4·b·L·C.
int64_t ContextAttentionKept(CpComm comm, int ranks, int64_t b, int64_t seq_len, int64_t c,
                             int64_t nh);

// What a ContextAttention holds itself, in the memory ledger's activations: backward's D,
// b·NH·L values (the buffers in flight are its comm memory).
inline int64_t ContextAttentionScratch(int ranks, int64_t b, int64_t seq_len, int64_t nh) {
  return b * nh * (seq_len / ranks);
}

// The (query, key, head) triples cp rank `rank` computes of one sequence's attention (a
// layer's forward; 4·hs flops each for the two products): p2p and allgather its pieces'
// visible pairs × NH, a2a s(s+1)/2 × NH/N. Zigzag makes it the same on every rank.
int64_t ContextAttentionWork(CpComm comm, CpLoadBalance balance, int ranks, int rank, int seq_len,
                             int nh);
// The attention blocks cp rank `rank` computes for one layer and micro-batch (b sequences,
// c channels, nh heads on this rank), counted into the running timeline for the modelled
// GPU (core/runtime/kernels/work.h) as ContextAttention counts them, in its order: a block by
// serial attention's rule for its tq×tk scores (two matmuls forward, four backward, the
// softmax's passes), a block the mask hides counting nothing. The planner counts a GPU's
// attention with it (lab/plan/compute.cc).
void CountContextAttention(CpComm comm, CpLoadBalance balance, int ranks, int rank, int b,
                           int seq_len, int c, int nh, bool forward);
// Of those (p2p and allgather), the blocks against the K, V of cp rank `source`: one step
// of the ring.
void CountSourceBlocks(CpLoadBalance balance, int ranks, int rank, int source, int b, int seq_len,
                       int c, int nh, bool forward);

// One layer's attention over the cp group. Activations are this rank's rows, its pieces
// in sequence order: qkv (b, L, 3C) fused as the model keeps it ([q | k | v], head h at
// columns h·hs of each), y and dy (b, L, C); `kept` holds ContextAttentionKept values,
// written by Forward and read by Backward (one per micro-batch in flight). The object
// holds only the buffers in flight, which every layer and micro-batch of that shape share.
//
// Its buffers come from `alloc` (the model's: on the meta device of a dry run no kernel
// runs and nothing is copied, while every call is made and booked as in the real run).
//
//   ASSIGN_OR_RETURN(auto attn, ContextAttention::Create(cp, alloc, comm, balance, b, s, c, nh));
//   RETURN_IF_ERROR(attn->Forward(qkv, y, kept));
//   RETURN_IF_ERROR(attn->Backward(dy, qkv, y, kept, dqkv));  // dqkv written whole
class ContextAttention {
 public:
  // `wire`: the type the calls send (the run's activations'): fp32, or bf16.
  static absl::StatusOr<std::unique_ptr<ContextAttention>> Create(
      comm::Communicator& cp, Allocator& alloc, CpComm comm, CpLoadBalance balance, int b,
      int seq_len, int c, int nh, DType wire = DType::kF32);

  absl::Status Forward(const float* qkv, float* y, float* kept);
  absl::Status Backward(const float* dy, const float* qkv, const float* y, const float* kept,
                        float* dqkv);

  const std::vector<SequencePiece>& pieces() const { return pieces_; }
  int rows() const { return rows_; }
  int64_t kept() const { return ContextAttentionKept(comm_, n_, b_, s_, c_, nh_); }
  // The (query, key, head) triples this rank's forward computes (ContextAttentionWork).
  int64_t AttentionWork() const;

 private:
  ContextAttention(comm::Communicator& cp, Allocator& alloc, CpComm comm, CpLoadBalance balance,
                   int b, int seq_len, int c, int nh, DType wire);
  absl::Status Allocate();
  // A message's values in fp32: the buffer itself, or (bf16) widened into `room`.
  const float* Widened(const Tensor& wire, Tensor& room) const;

  // Attention of this rank's queries to `kv` (packed (2, b, L, C) of cp rank `source`),
  // merged into (y, lse); and its backward into dq (the q columns of dqkv) and dkv.
  void ForwardBlocks(const float* qkv, const float* kv, int source, float* y, float* lse);
  void BackwardBlocks(const float* dy, const float* qkv, const float* kv, int source,
                      const float* lse, float* dqkv, float* dkv);
  // This rank's K and V of qkv packed into (2, b, L, C) of the wire's type, and back into
  // dqkv's k, v columns.
  void PackKv(const float* qkv, const Tensor& kv) const;
  void UnpackKv(const float* dkv, float* dqkv) const;

  absl::Status RingForward(const float* qkv, float* y, float* lse);
  absl::Status RingBackward(const float* dy, const float* qkv, const float* lse, float* dqkv);
  absl::Status GatherForward(const float* qkv, float* y, float* lse, float* gathered);
  absl::Status GatherBackward(const float* dy, const float* qkv, const float* lse,
                              const float* gathered, float* dqkv);
  absl::Status UlyssesForward(const float* qkv, float* y, float* lse, float* heads);
  absl::Status UlyssesBackward(const float* dy, const float* lse, const float* heads, float* dqkv);
  // Ulysses' all-to-all of one (b, L, C) tensor (`ld` between rows) to this rank's heads of
  // the whole sequence (b, s, C/N), and back.
  absl::Status ToHeads(const float* rows, int ld, float* heads);
  absl::Status FromHeads(const float* heads, float* rows, int ld);

  comm::Communicator& cp_;
  Allocator& alloc_;
  bool values_;  // not a dry run's meta tensors
  DType wire_;
  CpComm comm_;
  int n_, rank_, b_, s_, c_, nh_, rows_;
  CpLoadBalance balance_;
  std::vector<SequencePiece> pieces_;
  Tensor delta_;      // backward's D = rowsum(dO ⊙ O), laid out as the lse
  // Of the wire's type but the fp32 sums (allgather's dkv_[0], a2a's dkv_[0]):
  Tensor kv_[2];      // p2p: the visiting K, V and the next; allgather: kv_[1] this rank's
  Tensor dkv_[2];     // p2p: the travelling dK, dV accumulators; allgather: gathered (fp32),
                      // mine; a2a: dq, dk, dv, dO of this rank's heads (fp32)
  Tensor packed_[2];  // a2a: one tensor's pieces, out and in
  // bf16 only: p2p the visiting K, V widened and a step's dK, dV in fp32; allgather the
  // gathered K, V as they arrive and the dK, dV as they leave (bf16), and mine widened.
  Tensor work_[2];
};

// The model's SequenceSplit over a cp group: this rank's pieces, and each layer's
// attention through a ContextAttention of its shape (made on first use, shared by every
// layer and micro-batch of that shape), its buffers from `alloc` (the model's). Not owned:
// `cp` and `alloc` must outlive it.
class ContextParallel final : public model::SequenceSplit {
 public:
  ContextParallel(comm::Communicator& cp, Allocator& alloc, CpComm comm, CpLoadBalance balance,
                  int seq_len, DType wire = DType::kF32)
      : cp_(cp), alloc_(alloc), comm_(comm), balance_(balance), seq_len_(seq_len), wire_(wire) {}

  comm::Communicator& group() const { return cp_; }
  CpComm comm() const { return comm_; }
  CpLoadBalance balance() const { return balance_; }

  int size() const override { return cp_.size(); }
  std::vector<model::PositionRun> positions() const override;
  // The cut: this rank's rows of b whole sequences (b, T) of tokens and of targets (null:
  // none) -> (b, T/N) each, what the model takes. They are held here until the next Cut.
  std::pair<const int32_t*, const int32_t*> Cut(const int32_t* tokens, const int32_t* targets,
                                                int b) const;
  // This rank's row of position `position` of a sequence; -1 where another rank holds it.
  int RowOf(int position) const;
  int64_t Kept(int b, int c, int nh) const override {
    return ContextAttentionKept(comm_, cp_.size(), b, seq_len_, c, nh);
  }
  absl::Status AttentionForward(float* y, float* kept, const float* qkv, int b, int c, int nh,
                                const std::string& scope) const override;
  absl::Status AttentionBackward(float* dqkv, const float* dy, const float* qkv, const float* y,
                                 const float* kept, int b, int c, int nh,
                                 const std::string& scope) const override;
  // An all-reduce (sum) of the n fp64 values over the cp group (ContextParallelCalls'
  // router row).
  absl::Status SumOverSequence(double* values, int64_t n, const std::string& scope) const override;

 private:
  absl::StatusOr<ContextAttention*> Attention(int b, int c, int nh) const;

  comm::Communicator& cp_;
  Allocator& alloc_;
  CpComm comm_;
  CpLoadBalance balance_;
  int seq_len_;
  DType wire_;
  mutable std::map<std::tuple<int, int, int>, std::unique_ptr<ContextAttention>> attention_;
  mutable std::vector<int32_t> my_tokens_, my_targets_;  // Cut's
};

}  // namespace tally::parallel
