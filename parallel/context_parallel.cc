#include "parallel/context_parallel.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "runtime/comm/ledger/names.h"
#include "runtime/status_macros.h"

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
    switch (s.comm) {
      case CpComm::kP2p: {  // K, V packed: 2·b·L·h values a send
        const int64_t kv = 2 * s.batch * rows * s.channels;
        for (bool receive : {false, true}) {
          add(Primitive::kSendRecv, Phase::kForward, kv, n - 1, receive);
          add(Primitive::kSendRecv, Phase::kBackward, kv, 2 * n - 1, receive);
        }
        break;
      }
      case CpComm::kAllGather: {
        const int64_t kv = 2 * s.batch * s.seq_len * s.channels;
        add(Primitive::kAllGather, Phase::kForward, kv, 1, false);
        add(Primitive::kReduceScatter, Phase::kBackward, kv, 1, false);
        break;
      }
      case CpComm::kAllToAll: {
        const int64_t one = s.batch * rows * s.channels;
        add(Primitive::kAllToAll, Phase::kForward, one, 4, false);
        add(Primitive::kAllToAll, Phase::kBackward, one, 4, false);
        break;
      }
    }
  }
  return calls;
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

absl::StatusOr<ContextAttention*> ContextParallel::Attention(int b, int c, int nh) const {
  std::unique_ptr<ContextAttention>& attn = attention_[{b, c, nh}];
  if (attn == nullptr) {
    ASSIGN_OR_RETURN(attn,
                     ContextAttention::Create(cp_, alloc_, comm_, balance_, b, seq_len_, c, nh));
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

}  // namespace tally::parallel
