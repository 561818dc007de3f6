// ContextAttention: one layer's attention over the cp group, ring (p2p), all-gather or
// Ulysses all-to-all, on the block kernels (runtime/kernels/cpu/block_attention.h); the
// math, the merge order and the bytes are in context_parallel.h.
#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "parallel/context_parallel.h"
#include "runtime/kernels/work.h"
#include "runtime/status_macros.h"

namespace tally::parallel {

using cpu::BlockPositions;
using cpu::Rows;

namespace {

// The work a block counts into the rank's timeline for the modelled GPU
// (runtime/kernels/work.h), by serial attention's rule for its one T×T block: two matmuls
// of b·nh products forward, four backward, and the softmax's passes over the block's
// tq·tk scores. A block the mask hides whole is skipped and counts nothing. Counted on
// any device, a dry run's meta tensors included.
void CountBlock(int b, int nh, int hs, const BlockPositions& at, bool forward) {
  if (at.Masked()) return;
  CountMatmuls(at.tq, at.tk, hs, double(b) * nh, forward ? 2 : 4);
  CountPass((forward ? 2.0 : 3.0) * b * nh * double(at.tq) * at.tk);
}

}  // namespace

absl::StatusOr<std::unique_ptr<ContextAttention>> ContextAttention::Create(
    comm::Communicator& cp, Allocator& alloc, CpComm comm, CpLoadBalance balance, int b,
    int seq_len, int c, int nh) {
  RETURN_IF_ERROR(CheckContextParallel(cp.size(), seq_len, nh, comm, balance));
  if (c % nh != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("attention's ", c, " channels are not divisible by its ", nh, " heads"));
  }
  std::unique_ptr<ContextAttention> attn(
      new ContextAttention(cp, alloc, comm, balance, b, seq_len, c, nh));
  RETURN_IF_ERROR(attn->Allocate());
  return attn;
}

ContextAttention::ContextAttention(comm::Communicator& cp, Allocator& alloc, CpComm comm,
                                   CpLoadBalance balance, int b, int seq_len, int c, int nh)
    : cp_(cp),
      alloc_(alloc),
      values_(alloc.device().type != DeviceType::kMeta),
      comm_(comm),
      n_(cp.size()),
      rank_(cp.rank()),
      b_(b),
      s_(seq_len),
      c_(c),
      nh_(nh),
      rows_(seq_len / cp.size()),
      balance_(balance),
      pieces_(CpPieces(cp.rank(), cp.size(), seq_len, balance)) {}

absl::Status ContextAttention::Allocate() {
  auto make = [&](Tensor& t, int64_t n, MemoryCategory category) -> absl::Status {
    ASSIGN_OR_RETURN(t, Tensor::Empty({n}, DType::kF32, alloc_, category));
    return absl::OkStatus();
  };
  const int64_t mine = int64_t(b_) * rows_ * c_;  // one (b, L, C) tensor
  RETURN_IF_ERROR(make(delta_, int64_t(b_) * nh_ * rows_, MemoryCategory::kActivations));
  switch (comm_) {
    case CpComm::kP2p:
      for (Tensor* t : {&kv_[0], &kv_[1], &dkv_[0], &dkv_[1]}) {
        RETURN_IF_ERROR(make(*t, 2 * mine, MemoryCategory::kComm));
      }
      break;
    case CpComm::kAllGather:
      RETURN_IF_ERROR(make(kv_[1], 2 * mine, MemoryCategory::kComm));
      RETURN_IF_ERROR(make(dkv_[0], 2 * mine * n_, MemoryCategory::kComm));
      RETURN_IF_ERROR(make(dkv_[1], 2 * mine, MemoryCategory::kComm));
      break;
    case CpComm::kAllToAll:
      RETURN_IF_ERROR(make(dkv_[0], 4 * mine, MemoryCategory::kComm));
      RETURN_IF_ERROR(make(packed_[0], mine, MemoryCategory::kComm));
      RETURN_IF_ERROR(make(packed_[1], mine, MemoryCategory::kComm));
      break;
  }
  return absl::OkStatus();
}

int64_t ContextAttention::AttentionWork() const {
  if (comm_ == CpComm::kAllToAll) return int64_t(s_) * (s_ + 1) / 2 * (nh_ / n_);
  int64_t pairs = 0;
  for (const SequencePiece& p : pieces_) {
    pairs += BlockPositions{p.start, p.length, 0, s_}.VisiblePairs();
  }
  return pairs * nh_;
}

void ContextAttention::PackKv(const float* qkv, float* kv) const {
  if (!values_) return;
  const int64_t plane = int64_t(b_) * rows_ * c_;
  for (int64_t row = 0; row < int64_t(b_) * rows_; ++row) {
    const float* from = qkv + row * 3 * c_;
    std::memcpy(kv + row * c_, from + c_, sizeof(float) * c_);
    std::memcpy(kv + plane + row * c_, from + 2 * c_, sizeof(float) * c_);
  }
}

void ContextAttention::UnpackKv(const float* dkv, float* dqkv) const {
  if (!values_) return;
  const int64_t plane = int64_t(b_) * rows_ * c_;
  for (int64_t row = 0; row < int64_t(b_) * rows_; ++row) {
    float* to = dqkv + row * 3 * c_;
    std::memcpy(to + c_, dkv + row * c_, sizeof(float) * c_);
    std::memcpy(to + 2 * c_, dkv + plane + row * c_, sizeof(float) * c_);
  }
}

// The pieces' blocks: this rank's query pieces in order, each against the source's key
// pieces in sequence order (the merge order the header fixes).
void ContextAttention::ForwardBlocks(const float* qkv, const float* kv, int source, float* y,
                                     float* lse) {
  const int64_t batch = int64_t(rows_) * c_, plane = int64_t(b_) * batch;
  const std::vector<SequencePiece> keys = CpPieces(source, n_, s_, balance_);
  int q_row = 0;
  for (const SequencePiece& qp : pieces_) {
    int k_row = 0;
    for (const SequencePiece& kp : keys) {
      const BlockPositions at{qp.start, qp.length, kp.start, kp.length};
      CountBlock(b_, nh_, c_ / nh_, at, /*forward=*/true);
      const Rows<const float> k{kv + int64_t(k_row) * c_, batch, c_};
      const Rows<const float> v{kv + plane + int64_t(k_row) * c_, batch, c_};
      if (values_) {
        cpu::BlockAttentionForward(
            Rows<float>{y + int64_t(q_row) * c_, batch, c_}, lse + int64_t(b_) * nh_ * q_row,
            Rows<const float>{qkv + int64_t(q_row) * 3 * c_, 3 * batch, 3 * c_}, k, v, b_, c_, nh_,
            at);
      }
      k_row += kp.length;
    }
    q_row += qp.length;
  }
}

void ContextAttention::BackwardBlocks(const float* dy, const float* qkv, const float* kv,
                                      int source, const float* lse, float* dqkv, float* dkv) {
  const int64_t batch = int64_t(rows_) * c_, plane = int64_t(b_) * batch;
  const std::vector<SequencePiece> keys = CpPieces(source, n_, s_, balance_);
  int q_row = 0;
  for (const SequencePiece& qp : pieces_) {
    const int64_t at = int64_t(b_) * nh_ * q_row;
    int k_row = 0;
    for (const SequencePiece& kp : keys) {
      const int64_t k_at = int64_t(k_row) * c_;
      const BlockPositions block{qp.start, qp.length, kp.start, kp.length};
      CountBlock(b_, nh_, c_ / nh_, block, /*forward=*/false);
      if (!values_) {
        k_row += kp.length;
        continue;
      }
      cpu::BlockAttentionBackward(
          Rows<float>{dqkv + int64_t(q_row) * 3 * c_, 3 * batch, 3 * c_},
          Rows<float>{dkv + k_at, batch, c_}, Rows<float>{dkv + plane + k_at, batch, c_},
          Rows<const float>{qkv + int64_t(q_row) * 3 * c_, 3 * batch, 3 * c_},
          Rows<const float>{kv + k_at, batch, c_}, Rows<const float>{kv + plane + k_at, batch, c_},
          Rows<const float>{dy + int64_t(q_row) * c_, batch, c_}, lse + at,
          delta_.data<float>() + at, b_, c_, nh_, block);
      k_row += kp.length;
    }
    q_row += qp.length;
  }
}

// kept: the lse first, then allgather's gathered K, V or a2a's head-split tensors.
absl::Status ContextAttention::Forward(const float* qkv, float* y, float* kept) {
  float* after = kept + int64_t(b_) * nh_ * rows_;
  if (comm_ == CpComm::kAllToAll) return UlyssesForward(qkv, y, kept, after);
  if (values_) {
    cpu::BlockAttentionStart(Rows<float>{y, int64_t(rows_) * c_, c_}, kept, b_, rows_, c_, nh_);
  }
  return comm_ == CpComm::kP2p ? RingForward(qkv, y, kept) : GatherForward(qkv, y, kept, after);
}

absl::Status ContextAttention::Backward(const float* dy, const float* qkv, const float* y,
                                        const float* kept, float* dqkv) {
  const float* after = kept + int64_t(b_) * nh_ * rows_;
  if (values_) std::fill(dqkv, dqkv + int64_t(b_) * rows_ * 3 * c_, 0.0f);
  if (comm_ == CpComm::kAllToAll) return UlyssesBackward(dy, kept, after, dqkv);
  const int64_t batch = int64_t(rows_) * c_;
  int q_row = 0;
  for (const SequencePiece& qp : pieces_) {
    if (!values_) break;
    cpu::AttentionDelta(delta_.data<float>() + int64_t(b_) * nh_ * q_row,
                        Rows<const float>{dy + int64_t(q_row) * c_, batch, c_},
                        Rows<const float>{y + int64_t(q_row) * c_, batch, c_}, b_, qp.length, c_,
                        nh_);
    q_row += qp.length;
  }
  return comm_ == CpComm::kP2p ? RingBackward(dy, qkv, kept, dqkv)
                               : GatherBackward(dy, qkv, kept, after, dqkv);
}

// Step t attends to the K, V of RingSource(t) while those of RingSource(t + 1) arrive from
// the left.
absl::Status ContextAttention::RingForward(const float* qkv, float* y, float* lse) {
  const int left = (rank_ + n_ - 1) % n_, right = (rank_ + 1) % n_;
  PackKv(qkv, kv_[0].data<float>());
  int at = 0;
  for (int step = 0; step < n_; ++step) {
    std::unique_ptr<comm::Work> recv, send;
    if (step + 1 < n_) {
      recv = cp_.Irecv(kv_[1 - at], left);
      send = cp_.Isend(kv_[at], right);
    }
    ForwardBlocks(qkv, kv_[at].data<float>(), RingSource(rank_, n_, step), y, lse);
    if (step + 1 < n_) {
      RETURN_IF_ERROR(recv->Wait());
      RETURN_IF_ERROR(send->Wait());
      at = 1 - at;
    }
  }
  return absl::OkStatus();
}

// K, V go round as forward; each step adds this rank's part of the source's dK, dV to the
// accumulator that came with them and passes it on, so that after N steps each
// accumulator is home, whole.
absl::Status ContextAttention::RingBackward(const float* dy, const float* qkv, const float* lse,
                                            float* dqkv) {
  const int left = (rank_ + n_ - 1) % n_, right = (rank_ + 1) % n_;
  PackKv(qkv, kv_[0].data<float>());
  RETURN_IF_ERROR(dkv_[0].SetZero());
  int at = 0;
  for (int step = 0; step < n_; ++step) {
    std::unique_ptr<comm::Work> kv_recv, kv_send;
    if (step + 1 < n_) {
      kv_recv = cp_.Irecv(kv_[1 - at], left);
      kv_send = cp_.Isend(kv_[at], right);
    }
    BackwardBlocks(dy, qkv, kv_[at].data<float>(), RingSource(rank_, n_, step), lse, dqkv,
                   dkv_[at].data<float>());
    if (n_ == 1) break;
    std::unique_ptr<comm::Work> dkv_recv = cp_.Irecv(dkv_[1 - at], left);
    std::unique_ptr<comm::Work> dkv_send = cp_.Isend(dkv_[at], right);
    if (step + 1 < n_) {
      RETURN_IF_ERROR(kv_recv->Wait());
      RETURN_IF_ERROR(kv_send->Wait());
    }
    RETURN_IF_ERROR(dkv_recv->Wait());
    RETURN_IF_ERROR(dkv_send->Wait());
    at = 1 - at;
  }
  UnpackKv(dkv_[at].data<float>(), dqkv);
  return absl::OkStatus();
}

absl::Status ContextAttention::GatherForward(const float* qkv, float* y, float* lse,
                                             float* gathered) {
  PackKv(qkv, kv_[1].data<float>());
  const int64_t per_rank = kv_[1].numel();
  Tensor all = Tensor::Borrow(gathered, per_rank * n_, alloc_.device());
  RETURN_IF_ERROR(n_ > 1 ? cp_.AllGather(kv_[1], all) : all.CopyFrom(kv_[1]));
  for (int source = 0; source < n_; ++source) {
    ForwardBlocks(qkv, gathered + source * per_rank, source, y, lse);
  }
  return absl::OkStatus();
}

absl::Status ContextAttention::GatherBackward(const float* dy, const float* qkv, const float* lse,
                                              const float* gathered, float* dqkv) {
  RETURN_IF_ERROR(dkv_[0].SetZero());
  const int64_t per_rank = kv_[1].numel();
  for (int source = 0; source < n_; ++source) {
    BackwardBlocks(dy, qkv, gathered + source * per_rank, source, lse, dqkv,
                   dkv_[0].data<float>() + source * per_rank);
  }
  RETURN_IF_ERROR(n_ > 1 ? cp_.ReduceScatter(dkv_[0], dkv_[1], comm::ReduceOp::kSum)
                         : dkv_[1].CopyFrom(dkv_[0]));
  UnpackKv(dkv_[1].data<float>(), dqkv);
  return absl::OkStatus();
}

// packed_ (N, b, L, C/N): slot j is what rank j gets (sends: rank j's heads of this rank's
// rows; receives: this rank's heads of rank j's rows).
absl::Status ContextAttention::ToHeads(const float* rows, int ld, float* heads) {
  const int cl = c_ / n_;
  float* out = packed_[0].data<float>();
  for (int j = 0; values_ && j < n_; ++j) {
    for (int64_t row = 0; row < int64_t(b_) * rows_; ++row, out += cl) {
      std::memcpy(out, rows + row * ld + j * cl, sizeof(float) * cl);
    }
  }
  RETURN_IF_ERROR(n_ > 1 ? cp_.AllToAll(packed_[0], packed_[1]) : packed_[1].CopyFrom(packed_[0]));
  const float* in = packed_[1].data<float>();
  for (int j = 0; values_ && j < n_; ++j) {
    const std::vector<SequencePiece> from = CpPieces(j, n_, s_, balance_);
    for (int i = 0; i < b_; ++i) {
      for (const SequencePiece& p : from) {
        const int64_t bytes = sizeof(float) * int64_t(p.length) * cl;
        std::memcpy(heads + (int64_t(i) * s_ + p.start) * cl, in, bytes);
        in += int64_t(p.length) * cl;
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ContextAttention::FromHeads(const float* heads, float* rows, int ld) {
  const int cl = c_ / n_;
  float* out = packed_[0].data<float>();
  for (int j = 0; values_ && j < n_; ++j) {
    const std::vector<SequencePiece> to = CpPieces(j, n_, s_, balance_);
    for (int i = 0; i < b_; ++i) {
      for (const SequencePiece& p : to) {
        const int64_t values = int64_t(p.length) * cl;
        std::memcpy(out, heads + (int64_t(i) * s_ + p.start) * cl, sizeof(float) * values);
        out += values;
      }
    }
  }
  RETURN_IF_ERROR(n_ > 1 ? cp_.AllToAll(packed_[0], packed_[1]) : packed_[1].CopyFrom(packed_[0]));
  const float* in = packed_[1].data<float>();
  for (int j = 0; values_ && j < n_; ++j) {
    for (int64_t row = 0; row < int64_t(b_) * rows_; ++row, in += cl) {
      std::memcpy(rows + row * ld + j * cl, in, sizeof(float) * cl);
    }
  }
  return absl::OkStatus();
}

// `heads` holds q, k, v and y of this rank's NH/N heads over the whole sequence: one block
// of ordinary causal attention.
absl::Status ContextAttention::UlyssesForward(const float* qkv, float* y, float* lse,
                                              float* heads) {
  const int cl = c_ / n_, hl = nh_ / n_;
  const int64_t plane = int64_t(b_) * s_ * cl, batch = int64_t(s_) * cl;
  float* h = heads;
  for (int part = 0; part < 3; ++part) {
    RETURN_IF_ERROR(ToHeads(qkv + part * c_, 3 * c_, h + part * plane));
  }
  const Rows<float> o{h + 3 * plane, batch, cl};
  CountBlock(b_, hl, cl / hl, BlockPositions{0, s_, 0, s_}, /*forward=*/true);
  if (values_) {
    cpu::BlockAttentionStart(o, lse, b_, s_, cl, hl);
    cpu::BlockAttentionForward(
        o, lse, Rows<const float>{h, batch, cl}, Rows<const float>{h + plane, batch, cl},
        Rows<const float>{h + 2 * plane, batch, cl}, b_, cl, hl, BlockPositions{0, s_, 0, s_});
  }
  return FromHeads(h + 3 * plane, y, c_);
}

absl::Status ContextAttention::UlyssesBackward(const float* dy, const float* lse,
                                               const float* heads, float* dqkv) {
  const int cl = c_ / n_, hl = nh_ / n_;
  const int64_t plane = int64_t(b_) * s_ * cl, batch = int64_t(s_) * cl;
  const float* h = heads;
  float* g = dkv_[0].data<float>();  // dq, dk, dv, dO of this rank's heads
  RETURN_IF_ERROR(ToHeads(dy, c_, g + 3 * plane));
  CountBlock(b_, hl, cl / hl, BlockPositions{0, s_, 0, s_}, /*forward=*/false);
  if (values_) {
    std::fill(g, g + 3 * plane, 0.0f);
    cpu::AttentionDelta(delta_.data<float>(), Rows<const float>{g + 3 * plane, batch, cl},
                        Rows<const float>{h + 3 * plane, batch, cl}, b_, s_, cl, hl);
    cpu::BlockAttentionBackward(
        Rows<float>{g, batch, cl}, Rows<float>{g + plane, batch, cl},
        Rows<float>{g + 2 * plane, batch, cl}, Rows<const float>{h, batch, cl},
        Rows<const float>{h + plane, batch, cl}, Rows<const float>{h + 2 * plane, batch, cl},
        Rows<const float>{g + 3 * plane, batch, cl}, lse, delta_.data<float>(), b_, cl, hl,
        BlockPositions{0, s_, 0, s_});
  }
  for (int part = 0; part < 3; ++part) {
    RETURN_IF_ERROR(FromHeads(g + part * plane, dqkv + part * c_, 3 * c_));
  }
  return absl::OkStatus();
}

}  // namespace tally::parallel
