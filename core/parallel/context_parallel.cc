#include "core/parallel/context_parallel.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/runtime/comm/ledger/names.h"
#include "core/runtime/kernels/work.h"
#include "core/runtime/status_macros.h"

namespace tally::parallel {

const char* Name(CpComm comm) {
  switch (comm) {
    case CpComm::kP2p: return "p2p";
    case CpComm::kAllGather: return "allgather";
    case CpComm::kAllToAll: return "a2a";
  }
  return "?";
}

const char* Name(CpLoadBalance balance) {
  return balance == CpLoadBalance::kZigzag ? "zigzag" : "none";
}

absl::StatusOr<CpComm> ParseCpComm(std::string_view name) {
  for (CpComm c : {CpComm::kP2p, CpComm::kAllGather, CpComm::kAllToAll}) {
    if (name == Name(c)) return c;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("[flags] --cp_comm=", std::string(name), " is not one of p2p, allgather, a2a"));
}

absl::StatusOr<CpLoadBalance> ParseCpLoadBalance(std::string_view name) {
  for (CpLoadBalance b : {CpLoadBalance::kNone, CpLoadBalance::kZigzag}) {
    if (name == Name(b)) return b;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("[flags] --cp_load_balance=", std::string(name), " is not one of none, zigzag"));
}

std::vector<SequencePiece> CpPieces(int rank, int ranks, int seq_len, CpLoadBalance balance) {
  if (balance == CpLoadBalance::kNone) {
    const int length = seq_len / ranks;
    return {{rank * length, length}};
  }
  const int length = seq_len / (2 * ranks);
  return {{rank * length, length}, {(2 * ranks - 1 - rank) * length, length}};
}

absl::Status CheckContextParallel(int ranks, int seq_len, int n_head, CpComm comm,
                                  CpLoadBalance balance) {
  if (ranks < 1) return absl::InvalidArgumentError(absl::StrCat("--cp=", ranks, " must be >= 1"));
  const int pieces = balance == CpLoadBalance::kZigzag ? 2 * ranks : ranks;
  if (seq_len % pieces != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--cp=", ranks, " with --cp_load_balance=", Name(balance), " cuts each sequence into ",
        pieces, " pieces: seq_len ", seq_len, " is not divisible by ", pieces));
  }
  if (comm == CpComm::kAllToAll && n_head % ranks != 0) {
    return absl::InvalidArgumentError(absl::StrCat("--cp_comm=a2a gives each of the ", ranks,
                                                   " cp ranks n_head/cp heads: n_head ", n_head,
                                                   " is not divisible by ", ranks));
  }
  return absl::OkStatus();
}

comm::ExpectedCalls ContextParallelCalls(const ContextParallelShape& s) {
  using comm::Phase;
  using comm::Primitive;
  comm::ExpectedCalls calls;
  if (s.ranks <= 1) return calls;
  const int64_t rows = s.seq_len / s.ranks;
  const int64_t n = s.ranks, mb = s.micro_batches;
  const int64_t again = s.recompute ? 1 : 0;  // the forward's calls once more, in backward
  for (int layer : s.layers) {
    auto add = [&](Primitive primitive, Phase phase, int64_t count, int64_t per_pass,
                   bool receive) {
      calls.push_back({.group = comm::group::kCp,
                       .primitive = primitive,
                       .phase = phase,
                       .scope = comm::scope::Layer(layer, comm::scope::kContext),
                       .count = count,
                       .element = s.element,
                       .calls = per_pass * mb,
                       .ranks = s.ranks,
                       .rank = s.rank,
                       .receive = receive});
    };
    if (s.experts > 0) {  // the router's balance statistics: E choices and E Σp, fp64
      for (int64_t pass = 0; pass <= again; ++pass) {
        calls.push_back({.group = comm::group::kCp,
                         .primitive = Primitive::kAllReduce,
                         .phase = pass == 0 ? Phase::kForward : Phase::kBackward,
                         .scope = comm::scope::Layer(layer, comm::scope::kBalance),
                         .count = 2 * s.experts,
                         .element = 8,
                         .calls = mb,
                         .ranks = s.ranks,
                         .rank = s.rank});
      }
    }
    switch (s.comm) {
      case CpComm::kP2p: {  // K, V packed: 2·b·L·h values a send
        const int64_t kv = 2 * s.batch * rows * s.channels;
        for (bool receive : {false, true}) {
          add(Primitive::kSendRecv, Phase::kForward, kv, n - 1, receive);
          add(Primitive::kSendRecv, Phase::kBackward, kv, 2 * n - 1 + again * (n - 1), receive);
        }
        break;
      }
      case CpComm::kAllGather: {
        const int64_t kv = 2 * s.batch * s.seq_len * s.channels;
        add(Primitive::kAllGather, Phase::kForward, kv, 1, false);
        if (again > 0) add(Primitive::kAllGather, Phase::kBackward, kv, 1, false);
        add(Primitive::kReduceScatter, Phase::kBackward, kv, 1, false);
        break;
      }
      case CpComm::kAllToAll: {
        const int64_t one = s.batch * rows * s.channels;
        add(Primitive::kAllToAll, Phase::kForward, one, 4, false);
        add(Primitive::kAllToAll, Phase::kBackward, one, 4 + 4 * again, false);
        break;
      }
    }
  }
  return calls;
}

namespace {

using cpu::BlockPositions;

// The work a block counts into the rank's timeline for the modelled GPU
// (core/runtime/kernels/work.h), by serial attention's rule for its one T×T block: two matmuls
// of b·nh products forward, four backward, and the softmax's passes over the block's
// tq·tk scores. A block the mask hides whole is skipped and counts nothing. Counted on
// any device, a dry run's meta tensors included.
void CountBlock(int b, int nh, int hs, const BlockPositions& at, bool forward) {
  if (at.Masked()) return;
  CountMatmuls(at.tq, at.tk, hs, double(b) * nh, forward ? 2 : 4);
  CountPass((forward ? 2.0 : 3.0) * b * nh * double(at.tq) * at.tk);
}

// The blocks of the query pieces against the key pieces, in the merge order.
void CountBlocks(const std::vector<SequencePiece>& queries, const std::vector<SequencePiece>& keys,
                 int b, int nh, int hs, bool forward) {
  for (const SequencePiece& qp : queries) {
    for (const SequencePiece& kp : keys) {
      CountBlock(b, nh, hs, BlockPositions{qp.start, qp.length, kp.start, kp.length}, forward);
    }
  }
}

// The sources of a rank's K, V in the order its blocks attend to them: the ring's steps,
// or the all-gather's ranks.
std::vector<int> SourceOrder(CpComm comm, int ranks, int rank) {
  std::vector<int> sources;
  for (int t = 0; t < ranks; ++t) {
    sources.push_back(comm == CpComm::kP2p ? RingSource(rank, ranks, t) : t);
  }
  return sources;
}

}  // namespace

int64_t ContextAttentionWork(CpComm comm, CpLoadBalance balance, int ranks, int rank, int seq_len,
                             int nh) {
  if (comm == CpComm::kAllToAll) return int64_t(seq_len) * (seq_len + 1) / 2 * (nh / ranks);
  int64_t pairs = 0;
  for (const SequencePiece& p : CpPieces(rank, ranks, seq_len, balance)) {
    pairs += BlockPositions{p.start, p.length, 0, seq_len}.VisiblePairs();
  }
  return pairs * nh;
}

void CountContextAttention(CpComm comm, CpLoadBalance balance, int ranks, int rank, int b,
                           int seq_len, int c, int nh, bool forward) {
  if (comm == CpComm::kAllToAll) {
    const int hl = nh / ranks;
    CountBlock(b, hl, c / nh, BlockPositions{0, seq_len, 0, seq_len}, forward);
    return;
  }
  for (int source : SourceOrder(comm, ranks, rank)) {
    CountSourceBlocks(balance, ranks, rank, source, b, seq_len, c, nh, forward);
  }
}

void CountSourceBlocks(CpLoadBalance balance, int ranks, int rank, int source, int b, int seq_len,
                       int c, int nh, bool forward) {
  CountBlocks(CpPieces(rank, ranks, seq_len, balance), CpPieces(source, ranks, seq_len, balance), b,
              nh, c / nh, forward);
}

int64_t ContextAttentionKept(CpComm comm, int ranks, int64_t b, int64_t seq_len, int64_t c,
                             int64_t nh) {
  const int64_t rows = seq_len / ranks, lse = b * nh * rows;
  switch (comm) {
    case CpComm::kP2p: return lse;
    case CpComm::kAllGather: return lse + 2 * b * seq_len * c;
    case CpComm::kAllToAll: return lse + 4 * b * rows * c;
  }
  return lse;
}

std::vector<model::PositionRun> ContextParallel::positions() const {
  std::vector<model::PositionRun> runs;
  for (const SequencePiece& p : CpPieces(cp_.rank(), cp_.size(), seq_len_, balance_)) {
    runs.push_back({p.start, p.length});
  }
  return runs;
}

std::pair<const int32_t*, const int32_t*> ContextParallel::Cut(const int32_t* tokens,
                                                              const int32_t* targets, int b) const {
  const std::vector<model::PositionRun> runs = positions();
  size_t rows = 0;  // what TakePositions writes: b times this rank's positions
  for (const model::PositionRun& run : runs) rows += size_t(b) * size_t(run.length);
  my_tokens_.resize(rows);
  model::TakePositions(runs, tokens, b, seq_len_, my_tokens_.data());
  if (targets == nullptr) return {my_tokens_.data(), nullptr};
  my_targets_.resize(rows);
  model::TakePositions(runs, targets, b, seq_len_, my_targets_.data());
  return {my_tokens_.data(), my_targets_.data()};
}

int ContextParallel::RowOf(int position) const {
  int row = 0;
  for (const model::PositionRun& run : positions()) {
    if (position >= run.start && position < run.start + run.length) {
      return row + position - run.start;
    }
    row += run.length;
  }
  return -1;
}

absl::StatusOr<ContextAttention*> ContextParallel::Attention(int b, int c, int nh) const {
  std::unique_ptr<ContextAttention>& attn = attention_[{b, c, nh}];
  if (attn == nullptr) {
    ASSIGN_OR_RETURN(
        attn, ContextAttention::Create(cp_, alloc_, comm_, balance_, b, seq_len_, c, nh, wire_));
  }
  return attn.get();
}

absl::Status ContextParallel::AttentionForward(float* y, float* kept, const float* qkv, int b,
                                               int c, int nh, const std::string& scope) const {
  ASSIGN_OR_RETURN(ContextAttention * attn, Attention(b, c, nh));
  comm::LabelScope label(cp_.ledger(), scope);
  return attn->Forward(qkv, y, kept);
}

absl::Status ContextParallel::AttentionBackward(float* dqkv, const float* dy, const float* qkv,
                                                const float* y, const float* kept, int b, int c,
                                                int nh, const std::string& scope) const {
  ASSIGN_OR_RETURN(ContextAttention * attn, Attention(b, c, nh));
  comm::LabelScope label(cp_.ledger(), scope);
  return attn->Backward(dy, qkv, y, kept, dqkv);
}

absl::Status ContextParallel::SumOverSequence(double* values, int64_t n,
                                              const std::string& scope) const {
  ASSIGN_OR_RETURN(Tensor sums, Tensor::Empty({n}, DType::kF64, alloc_, MemoryCategory::kComm));
  const bool real = alloc_.device().type != DeviceType::kMeta;  // a dry run moves no values
  if (real) std::copy(values, values + n, sums.data<double>());
  comm::LabelScope label(cp_.ledger(), scope);
  RETURN_IF_ERROR(cp_.AllReduce(sums, comm::ReduceOp::kSum));
  if (real) std::copy(sums.data<double>(), sums.data<double>() + n, values);
  return absl::OkStatus();
}

}  // namespace tally::parallel
