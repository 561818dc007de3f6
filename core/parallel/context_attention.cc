// ContextAttention: one layer's attention over the cp group, ring (p2p), all-gather or
// Ulysses all-to-all, on the block kernels (core/runtime/kernels/cpu/block_attention.h); the
// math, the merge order and the bytes are in context_parallel.h.
#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/parallel/context_parallel.h"
#include "core/runtime/kernels/cpu/convert.h"
#include "core/runtime/status_macros.h"

namespace tally::parallel {

using cpu::BlockPositions;
using cpu::Rows;

namespace {

// n fp32 values into a buffer of the wire's type at element `at` (rounded to nearest even
// into bf16), and back (widened: exact).
void Put(const Tensor& to, int64_t at, const float* from, int64_t n) {
  if (to.dtype() == DType::kF32) {
    std::memcpy(to.data<float>() + at, from, sizeof(float) * size_t(n));
  } else {
    cpu::Round(to.data<BFloat16>() + at, from, n);
  }
}
void Get(float* to, const Tensor& from, int64_t at, int64_t n) {
  if (from.dtype() == DType::kF32) {
    std::memcpy(to, from.data<float>() + at, sizeof(float) * size_t(n));
  } else {
    cpu::Widen(to, from.data<BFloat16>() + at, n);
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<ContextAttention>> ContextAttention::Create(
    comm::Communicator& cp, Allocator& alloc, CpComm comm, CpLoadBalance balance, int b,
    int seq_len, int c, int nh, DType wire) {
  if (wire != DType::kF32 && wire != DType::kBF16) {
    return absl::InvalidArgumentError(
        absl::StrCat("[ContextAttention] sends fp32 or bf16, not ", Name(wire)));
  }
  RETURN_IF_ERROR(CheckContextParallel(cp.size(), seq_len, nh, comm, balance));
  if (c % nh != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("attention's ", c, " channels are not divisible by its ", nh, " heads"));
  }
  std::unique_ptr<ContextAttention> attn(
      new ContextAttention(cp, alloc, comm, balance, b, seq_len, c, nh, wire));
  RETURN_IF_ERROR(attn->Allocate());
  return attn;
}

ContextAttention::ContextAttention(comm::Communicator& cp, Allocator& alloc, CpComm comm,
                                   CpLoadBalance balance, int b, int seq_len, int c, int nh,
                                   DType wire)
    : cp_(cp),
      alloc_(alloc),
      values_(alloc.device().type != DeviceType::kMeta),
      wire_(wire),
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
  auto make = [&](Tensor& t, int64_t n, MemoryCategory category,
                  DType type = DType::kF32) -> absl::Status {
    ASSIGN_OR_RETURN(t, Tensor::Empty({n}, type, alloc_, category));
    return absl::OkStatus();
  };
  const MemoryCategory kComm = MemoryCategory::kComm;
  const bool rounds = wire_ != DType::kF32;  // the fp32 rooms beside bf16 messages
  const int64_t mine = int64_t(b_) * rows_ * c_;  // one (b, L, C) tensor
  RETURN_IF_ERROR(make(delta_, int64_t(b_) * nh_ * rows_, MemoryCategory::kActivations));
  switch (comm_) {
    case CpComm::kP2p:
      for (Tensor* t : {&kv_[0], &kv_[1], &dkv_[0], &dkv_[1]}) {
        RETURN_IF_ERROR(make(*t, 2 * mine, kComm, wire_));
      }
      for (Tensor* t : {&work_[0], &work_[1]}) {
        if (rounds) RETURN_IF_ERROR(make(*t, 2 * mine, kComm));
      }
      break;
    case CpComm::kAllGather:
      RETURN_IF_ERROR(make(kv_[1], 2 * mine, kComm, wire_));
      RETURN_IF_ERROR(make(dkv_[0], 2 * mine * n_, kComm));
      RETURN_IF_ERROR(make(dkv_[1], 2 * mine, kComm, wire_));
      if (rounds) {
        RETURN_IF_ERROR(make(work_[0], 2 * mine * n_, kComm, wire_));
        RETURN_IF_ERROR(make(work_[1], 2 * mine, kComm));
      }
      break;
    case CpComm::kAllToAll:
      RETURN_IF_ERROR(make(dkv_[0], 4 * mine, kComm));
      RETURN_IF_ERROR(make(packed_[0], mine, kComm, wire_));
      RETURN_IF_ERROR(make(packed_[1], mine, kComm, wire_));
      break;
  }
  return absl::OkStatus();
}

const float* ContextAttention::Widened(const Tensor& wire, Tensor& room) const {
  if (wire.dtype() == DType::kF32) return wire.data<float>();
  if (values_) Get(room.data<float>(), wire, 0, wire.numel());
  return room.data<float>();
}

int64_t ContextAttention::AttentionWork() const {
  return ContextAttentionWork(comm_, balance_, n_, rank_, s_, nh_);
}

void ContextAttention::PackKv(const float* qkv, const Tensor& kv) const {
  if (!values_) return;
  const int64_t plane = int64_t(b_) * rows_ * c_;
  for (int64_t row = 0; row < int64_t(b_) * rows_; ++row) {
    const float* from = qkv + row * 3 * c_;
    Put(kv, row * c_, from + c_, c_);
    Put(kv, plane + row * c_, from + 2 * c_, c_);
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
  CountSourceBlocks(balance_, n_, rank_, source, b_, s_, c_, nh_, /*forward=*/true);
  int q_row = 0;
  for (const SequencePiece& qp : pieces_) {
    int k_row = 0;
    for (const SequencePiece& kp : keys) {
      const BlockPositions at{qp.start, qp.length, kp.start, kp.length};
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
  CountSourceBlocks(balance_, n_, rank_, source, b_, s_, c_, nh_, /*forward=*/false);
  if (!values_) return;
  int q_row = 0;
  for (const SequencePiece& qp : pieces_) {
    const int64_t at = int64_t(b_) * nh_ * q_row;
    int k_row = 0;
    for (const SequencePiece& kp : keys) {
      const int64_t k_at = int64_t(k_row) * c_;
      const BlockPositions block{qp.start, qp.length, kp.start, kp.length};
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
  PackKv(qkv, kv_[0]);
  int at = 0;
  for (int step = 0; step < n_; ++step) {
    std::unique_ptr<comm::Work> recv, send;
    if (step + 1 < n_) {
      recv = cp_.Irecv(kv_[1 - at], left);
      send = cp_.Isend(kv_[at], right);
    }
    ForwardBlocks(qkv, Widened(kv_[at], work_[0]), RingSource(rank_, n_, step), y, lse);
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
// accumulator is home, whole. In bf16 a step's part is summed in fp32 (work_[1]) and
// added into the accumulator with one rounding.
absl::Status ContextAttention::RingBackward(const float* dy, const float* qkv, const float* lse,
                                            float* dqkv) {
  const int left = (rank_ + n_ - 1) % n_, right = (rank_ + 1) % n_;
  const bool rounds = wire_ != DType::kF32;
  PackKv(qkv, kv_[0]);
  RETURN_IF_ERROR(dkv_[0].SetZero());
  int at = 0;
  for (int step = 0; step < n_; ++step) {
    std::unique_ptr<comm::Work> kv_recv, kv_send;
    if (step + 1 < n_) {
      kv_recv = cp_.Irecv(kv_[1 - at], left);
      kv_send = cp_.Isend(kv_[at], right);
    }
    if (rounds) RETURN_IF_ERROR(work_[1].SetZero());
    float* part = rounds ? work_[1].data<float>() : dkv_[at].data<float>();
    BackwardBlocks(dy, qkv, Widened(kv_[at], work_[0]), RingSource(rank_, n_, step), lse, dqkv,
                   part);
    if (rounds && values_) cpu::Accumulate(dkv_[at].data<BFloat16>(), part, dkv_[at].numel());
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
  UnpackKv(Widened(dkv_[at], work_[1]), dqkv);
  return absl::OkStatus();
}

// In bf16 the K, V arrive in work_[0] and are widened into `gathered`; backward rounds the
// gathered dK, dV into it for the reduce-scatter.
absl::Status ContextAttention::GatherForward(const float* qkv, float* y, float* lse,
                                             float* gathered) {
  PackKv(qkv, kv_[1]);
  const int64_t per_rank = kv_[1].numel();
  Tensor all = Tensor::Borrow(gathered, per_rank * n_, alloc_.device());
  Tensor& arrive = wire_ == DType::kF32 ? all : work_[0];
  RETURN_IF_ERROR(n_ > 1 ? cp_.AllGather(kv_[1], arrive) : arrive.CopyFrom(kv_[1]));
  if (&arrive != &all && values_) Get(gathered, arrive, 0, arrive.numel());
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
  Tensor& leave = wire_ == DType::kF32 ? dkv_[0] : work_[0];
  if (&leave != &dkv_[0] && values_) Put(leave, 0, dkv_[0].data<float>(), dkv_[0].numel());
  RETURN_IF_ERROR(n_ > 1 ? cp_.ReduceScatter(leave, dkv_[1], comm::ReduceOp::kSum)
                         : dkv_[1].CopyFrom(leave));
  UnpackKv(Widened(dkv_[1], work_[1]), dqkv);
  return absl::OkStatus();
}

// packed_ (N, b, L, C/N): slot j is what rank j gets (sends: rank j's heads of this rank's
// rows; receives: this rank's heads of rank j's rows).
absl::Status ContextAttention::ToHeads(const float* rows, int ld, float* heads) {
  const int cl = c_ / n_;
  int64_t out = 0;
  for (int j = 0; values_ && j < n_; ++j) {
    for (int64_t row = 0; row < int64_t(b_) * rows_; ++row, out += cl) {
      Put(packed_[0], out, rows + row * ld + j * cl, cl);
    }
  }
  RETURN_IF_ERROR(n_ > 1 ? cp_.AllToAll(packed_[0], packed_[1]) : packed_[1].CopyFrom(packed_[0]));
  int64_t in = 0;
  for (int j = 0; values_ && j < n_; ++j) {
    const std::vector<SequencePiece> from = CpPieces(j, n_, s_, balance_);
    for (int i = 0; i < b_; ++i) {
      for (const SequencePiece& p : from) {
        const int64_t values = int64_t(p.length) * cl;
        Get(heads + (int64_t(i) * s_ + p.start) * cl, packed_[1], in, values);
        in += values;
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ContextAttention::FromHeads(const float* heads, float* rows, int ld) {
  const int cl = c_ / n_;
  int64_t out = 0;
  for (int j = 0; values_ && j < n_; ++j) {
    const std::vector<SequencePiece> to = CpPieces(j, n_, s_, balance_);
    for (int i = 0; i < b_; ++i) {
      for (const SequencePiece& p : to) {
        const int64_t values = int64_t(p.length) * cl;
        Put(packed_[0], out, heads + (int64_t(i) * s_ + p.start) * cl, values);
        out += values;
      }
    }
  }
  RETURN_IF_ERROR(n_ > 1 ? cp_.AllToAll(packed_[0], packed_[1]) : packed_[1].CopyFrom(packed_[0]));
  int64_t in = 0;
  for (int j = 0; values_ && j < n_; ++j) {
    for (int64_t row = 0; row < int64_t(b_) * rows_; ++row, in += cl) {
      Get(rows + row * ld + j * cl, packed_[1], in, cl);
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
  CountContextAttention(comm_, balance_, n_, rank_, b_, s_, c_, nh_, /*forward=*/true);
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
  CountContextAttention(comm_, balance_, n_, rank_, b_, s_, c_, nh_, /*forward=*/false);
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
