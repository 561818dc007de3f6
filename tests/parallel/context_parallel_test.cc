// Context parallelism against serial attention: the block kernels' exact merge (double, to
// 1e-12), the pieces and their balance, and ContextAttention over 2 and 4 thread ranks in
// every variant (p2p, allgather, a2a; zigzag and none) against cpu::AttentionForward and
// AttentionBackward of the whole sequence, with every cp ledger row equal to
// ContextParallelCalls and to the header's closed forms.
#include "core/parallel/context_parallel.h"

#include <algorithm>
#include <cmath>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "core/runtime/comm/launch.h"
#include "core/runtime/comm/ledger/names.h"
#include "core/runtime/kernels/cpu/attention.h"
#include "core/runtime/kernels/cpu/block_attention.h"
#include "core/runtime/status_macros.h"
#include "core/runtime/timeline.h"
#include "tests/parallel/cp_variants.h"
#include "tests/sweep.h"

namespace tally::parallel {
namespace {

using cpu::BlockPositions;
using cpu::Rows;

template <typename T>
std::vector<T> Random(int64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<double> d(0.0, 1.0);
  std::vector<T> v(static_cast<size_t>(n));
  for (T& x : v) x = T(d(gen));
  return v;
}

double MaxDiff(const std::vector<double>& a, const std::vector<double>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

// The rows of m from `row` on.
template <typename T>
Rows<T> From(Rows<T> m, int row) {
  return Rows<T>{m.Row(0, row), m.batch, m.ld};
}

// Attention of the whole sequence (qkv fused, (B, T, 3C)) cut into the given query and key
// blocks (cut points from 0 to T), forward and backward, in double. lse and D are laid out
// per query block, (B, NH, tq) each, one block after another.
struct Blocked {
  std::vector<double> y, dqkv;
};
Blocked RunBlocks(const std::vector<double>& qkv, const std::vector<double>& dy, int b, int t,
                  int c, int nh, const std::vector<int>& q_cuts, const std::vector<int>& k_cuts) {
  Blocked r{std::vector<double>(size_t(b) * t * c), std::vector<double>(size_t(b) * t * 3 * c)};
  std::vector<double> lse(size_t(b) * nh * t), delta(lse.size());
  const Rows<const double> q{qkv.data(), int64_t(t) * 3 * c, 3 * c}, k = q.At(c), v = q.At(2 * c);
  const Rows<const double> dout{dy.data(), int64_t(t) * c, c};
  const Rows<double> o{r.y.data(), int64_t(t) * c, c};
  const Rows<double> g{r.dqkv.data(), int64_t(t) * 3 * c, 3 * c};
  for (size_t qi = 0; qi + 1 < q_cuts.size(); ++qi) {
    const int q0 = q_cuts[qi], tq = q_cuts[qi + 1] - q0;
    double* block_lse = lse.data() + int64_t(b) * nh * q0;
    cpu::BlockAttentionStart(From(o, q0), block_lse, b, tq, c, nh);
    for (size_t ki = 0; ki + 1 < k_cuts.size(); ++ki) {
      const BlockPositions at{q0, tq, k_cuts[ki], k_cuts[ki + 1] - k_cuts[ki]};
      cpu::BlockAttentionForward(From(o, q0), block_lse, From(q, q0), From(k, at.k_start),
                                 From(v, at.k_start), b, c, nh, at);
    }
    cpu::AttentionDelta(delta.data() + int64_t(b) * nh * q0, From(dout, q0),
                        From(Rows<const double>(o), q0), b, tq, c, nh);
    for (size_t ki = 0; ki + 1 < k_cuts.size(); ++ki) {
      const BlockPositions at{q0, tq, k_cuts[ki], k_cuts[ki + 1] - k_cuts[ki]};
      cpu::BlockAttentionBackward(From(g, q0), From(g.At(c), at.k_start),
                                  From(g.At(2 * c), at.k_start), From(q, q0), From(k, at.k_start),
                                  From(v, at.k_start), From(dout, q0), block_lse,
                                  delta.data() + int64_t(b) * nh * q0, b, c, nh, at);
    }
  }
  return r;
}

TEST(BlockAttention, BlocksMergedInAnyCutEqualOneBlockOfTheWholeSequence) {
  const int b = 2, t = 12, c = 8, nh = 2;
  const std::vector<double> qkv = Random<double>(int64_t(b) * t * 3 * c, 1);
  const std::vector<double> dy = Random<double>(int64_t(b) * t * c, 2);
  const Blocked whole = RunBlocks(qkv, dy, b, t, c, nh, {0, t}, {0, t});
  for (const auto& [q_cuts, k_cuts] : std::vector<std::pair<std::vector<int>, std::vector<int>>>{
           {{0, t}, {0, 3, 7, t}}, {{0, 5, t}, {0, 5, t}}, {{0, 1, 6, t}, {0, 4, 8, 11, t}}}) {
    const Blocked cut = RunBlocks(qkv, dy, b, t, c, nh, q_cuts, k_cuts);
    EXPECT_LT(MaxDiff(cut.y, whole.y), 1e-12);
    EXPECT_LT(MaxDiff(cut.dqkv, whole.dqkv), 1e-12);
  }
}

// The serial attention of the whole sequence, (B, S, 3C) -> y, and dy -> dqkv.
struct Serial {
  std::vector<float> y, dqkv;
};
Serial SerialAttention(const std::vector<float>& qkv, const std::vector<float>& dy, int b, int s,
                       int c, int nh) {
  Serial r{std::vector<float>(size_t(b) * s * c), std::vector<float>(size_t(b) * s * 3 * c)};
  std::vector<float> att(size_t(b) * nh * s * s), scratch(size_t(s) * s);
  cpu::AttentionForward(r.y.data(), att.data(), qkv.data(), b, s, c, nh);
  cpu::AttentionBackward(r.dqkv.data(), scratch.data(), dy.data(), qkv.data(), att.data(), b, s, c,
                         nh);
  return r;
}

float MaxDiff(const std::vector<float>& a, const std::vector<float>& b) {
  float m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

TEST(BlockAttention, OneBlockIsSerialAttentionInFloat) {
  const int b = 2, t = 20, c = 16, nh = 4;
  const std::vector<float> qkv = Random<float>(int64_t(b) * t * 3 * c, 3);
  const std::vector<float> dy = Random<float>(int64_t(b) * t * c, 4);
  const Serial serial = SerialAttention(qkv, dy, b, t, c, nh);
  std::vector<float> y(serial.y.size()), lse(size_t(b) * nh * t), delta(lse.size());
  std::vector<float> dqkv(serial.dqkv.size(), 0.0f);
  const Rows<const float> q{qkv.data(), int64_t(t) * 3 * c, 3 * c};
  const Rows<float> o{y.data(), int64_t(t) * c, c}, g{dqkv.data(), int64_t(t) * 3 * c, 3 * c};
  const Rows<const float> dout{dy.data(), int64_t(t) * c, c};
  const BlockPositions whole{0, t, 0, t};
  cpu::BlockAttentionStart(o, lse.data(), b, t, c, nh);
  cpu::BlockAttentionForward(o, lse.data(), q, q.At(c), q.At(2 * c), b, c, nh, whole);
  cpu::AttentionDelta(delta.data(), dout, Rows<const float>(o), b, t, c, nh);
  cpu::BlockAttentionBackward(g, g.At(c), g.At(2 * c), q, q.At(c), q.At(2 * c), dout, lse.data(),
                              delta.data(), b, c, nh, whole);
  EXPECT_LT(MaxDiff(y, serial.y), 2e-6f);
  EXPECT_LT(MaxDiff(dqkv, serial.dqkv), 1e-5f);
}

TEST(ContextParallel, PiecesCoverTheSequenceOnceAndZigzagEvensTheCausalWork) {
  const int s = 48;
  for (int n : {1, 2, 3, 4}) {
    for (CpLoadBalance balance : {CpLoadBalance::kNone, CpLoadBalance::kZigzag}) {
      std::vector<int> owner(s, -1);
      for (int r = 0; r < n; ++r) {
        const std::vector<SequencePiece> pieces = CpPieces(r, n, s, balance);
        int64_t pairs = 0, rows = 0;
        for (size_t i = 0; i < pieces.size(); ++i) {
          if (i > 0) {
            EXPECT_LT(pieces[i - 1].start, pieces[i].start);  // sequence order
          }
          for (int p = 0; p < pieces[i].length; ++p) {
            EXPECT_EQ(owner[pieces[i].start + p], -1);
            owner[pieces[i].start + p] = r;
          }
          pairs += BlockPositions{pieces[i].start, pieces[i].length, 0, s}.VisiblePairs();
          rows += pieces[i].length;
        }
        EXPECT_EQ(rows, s / n);
        if (balance == CpLoadBalance::kZigzag) {
          const int64_t m = s / (2 * n);
          EXPECT_EQ(pairs, (2 * n - 1) * m * m + m * (m + 1)) << n << " ranks, rank " << r;
        } else {
          const int64_t l = s / n;
          EXPECT_EQ(pairs, r * l * l + l * (l + 1) / 2) << n << " ranks, rank " << r;
        }
      }
      for (int p = 0; p < s; ++p) EXPECT_GE(owner[p], 0) << "position " << p;
    }
  }
  EXPECT_EQ(RingSource(0, 4, 1), 3);
  EXPECT_EQ(RingSource(2, 4, 3), 3);
}

TEST(ContextParallel, SplitsItCannotMakeSayWhy) {
  auto message = [](int n, int s, int nh, CpComm comm, CpLoadBalance balance) {
    return std::string(CheckContextParallel(n, s, nh, comm, balance).message());
  };
  EXPECT_EQ(message(0, 16, 4, CpComm::kP2p, CpLoadBalance::kNone), "--cp=0 must be >= 1");
  EXPECT_EQ(message(3, 16, 4, CpComm::kP2p, CpLoadBalance::kNone),
            "--cp=3 with --cp_load_balance=none cuts each sequence into 3 pieces: seq_len 16 "
            "is not divisible by 3");
  EXPECT_EQ(message(4, 20, 4, CpComm::kP2p, CpLoadBalance::kZigzag),
            "--cp=4 with --cp_load_balance=zigzag cuts each sequence into 8 pieces: seq_len 20 "
            "is not divisible by 8");
  EXPECT_TRUE(CheckContextParallel(4, 20, 4, CpComm::kP2p, CpLoadBalance::kNone).ok());
  EXPECT_EQ(message(4, 16, 6, CpComm::kAllToAll, CpLoadBalance::kNone),
            "--cp_comm=a2a gives each of the 4 cp ranks n_head/cp heads: n_head 6 is not "
            "divisible by 4");
  EXPECT_TRUE(CheckContextParallel(4, 16, 6, CpComm::kP2p, CpLoadBalance::kZigzag).ok());
  EXPECT_EQ(ParseCpComm("ring").status().message(),
            "[flags] --cp_comm=ring is not one of p2p, allgather, a2a");
  EXPECT_EQ(ParseCpLoadBalance("headtail").status().message(),
            "[flags] --cp_load_balance=headtail is not one of none, zigzag");
  EXPECT_EQ(*ParseCpComm("a2a"), CpComm::kAllToAll);
  EXPECT_EQ(*ParseCpLoadBalance("zigzag"), CpLoadBalance::kZigzag);
}

using Variant = CpVariant;

class ContextAttentionTest : public ::testing::TestWithParam<Variant> {};

// The header's closed forms: bytes a rank sends for one layer and micro-batch.
int64_t ClosedForm(CpComm comm, comm::Phase phase, int64_t n, int64_t b, int64_t s, int64_t h) {
  const int64_t e = 4, rows = s / n;
  switch (comm) {
    case CpComm::kP2p:
      return (phase == comm::Phase::kForward ? n - 1 : 2 * n - 1) * 2 * b * rows * h * e;
    case CpComm::kAllGather: return (n - 1) * 2 * b * rows * h * e;  // (N−1)/N · 2·b·s·h·e
    case CpComm::kAllToAll: return 4 * (n - 1) * b * (rows / n) * h * e;
  }
  return -1;
}

TEST_P(ContextAttentionTest, EqualsSerialAttentionAndItsFormulas) {
  const Variant variant = GetParam();
  const int b = 2, s = 16, c = 16, nh = 4, n = variant.ranks;
  const std::vector<float> qkv = Random<float>(int64_t(b) * s * 3 * c, 5);
  const std::vector<float> dy = Random<float>(int64_t(b) * s * c, 6);
  const Serial serial = SerialAttention(qkv, dy, b, s, c, nh);
  std::vector<float> y(serial.y.size()), dqkv(serial.dqkv.size());
  std::vector<int64_t> work(static_cast<size_t>(n));
  std::vector<double> flops(static_cast<size_t>(n), 0.0);  // counted for the modelled GPU

  comm::LaunchOptions options;
  options.world_size = n;
  const absl::Status status =
      comm::RunThreadRanks(options, [&](comm::Communicator& world) -> absl::Status {
        ASSIGN_OR_RETURN(auto cp, world.Split(0, world.rank(), comm::group::kCp));
        ASSIGN_OR_RETURN(auto attn, ContextAttention::Create(*cp, cp->allocator(), variant.comm,
                                                             variant.balance, b, s, c, nh));
        const int rows = attn->rows();
        // This rank's rows of a (B, S, width) tensor, its pieces in sequence order, and back.
        auto take = [&](const std::vector<float>& full, int width) {
          std::vector<float> mine(size_t(b) * rows * width);
          for (int i = 0; i < b; ++i) {
            int row = 0;
            for (const SequencePiece& p : attn->pieces()) {
              std::copy_n(full.data() + (int64_t(i) * s + p.start) * width, p.length * width,
                          mine.data() + (int64_t(i) * rows + row) * width);
              row += p.length;
            }
          }
          return mine;
        };
        auto put = [&](const std::vector<float>& mine, int width, std::vector<float>& full) {
          for (int i = 0; i < b; ++i) {
            int row = 0;
            for (const SequencePiece& p : attn->pieces()) {
              std::copy_n(mine.data() + (int64_t(i) * rows + row) * width, p.length * width,
                          full.data() + (int64_t(i) * s + p.start) * width);
              row += p.length;
            }
          }
        };
        const std::vector<float> my_qkv = take(qkv, 3 * c), my_dy = take(dy, c);
        std::vector<float> my_y(size_t(b) * rows * c), my_dqkv(size_t(b) * rows * 3 * c);
        std::vector<float> kept(size_t(attn->kept()));
        comm::TrafficLedger& ledger = cp->ledger();
        comm::LabelScope label(ledger, comm::scope::Layer(0, comm::scope::kContext));
        {
          comm::PhaseScope phase(ledger, comm::Phase::kForward);
          Timeline timeline;
          timeline.set_recording(true);
          ScopedTimeline counting(&timeline);
          RETURN_IF_ERROR(attn->Forward(my_qkv.data(), my_y.data(), kept.data()));
          for (const TimelineEntry& e : timeline.entries()) {
            flops[size_t(cp->rank())] += e.compute.flops;
          }
        }
        {
          comm::PhaseScope phase(ledger, comm::Phase::kBackward);
          RETURN_IF_ERROR(attn->Backward(my_dy.data(), my_qkv.data(), my_y.data(), kept.data(),
                                         my_dqkv.data()));
        }
        put(my_y, c, y);
        put(my_dqkv, 3 * c, dqkv);
        work[size_t(cp->rank())] = attn->AttentionWork();

        // Every cp row the ledger booked is what ContextParallelCalls expects, and the closed form.
        const comm::ExpectedCalls calls = ContextParallelCalls({.comm = variant.comm,
                                                                .ranks = n,
                                                                .rank = cp->rank(),
                                                                .batch = b,
                                                                .seq_len = s,
                                                                .channels = c,
                                                                .layers = {0}});
        int rows_booked = 0;
        for (const auto& [key, totals] : ledger.calls()) {
          if (key.group != comm::group::kCp) continue;
          ++rows_booked;
          const int64_t sent =
              ledger.Sum([&](const comm::LedgerKey& k) { return k == key; }).bytes_sent;
          EXPECT_EQ(sent, comm::ExpectedSent(calls, key)) << key.RowName();
          EXPECT_EQ(sent, ClosedForm(variant.comm, key.phase, n, b, s, c)) << key.RowName();
          EXPECT_EQ(key.label, "layer0.context");
        }
        EXPECT_EQ(rows_booked, 2);  // forward and backward
        return absl::OkStatus();
      });
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_LT(MaxDiff(y, serial.y), 2e-6f);
  EXPECT_LT(MaxDiff(dqkv, serial.dqkv), 1e-5f);
  if (variant.comm == CpComm::kAllToAll || variant.balance == CpLoadBalance::kZigzag) {
    for (int r = 1; r < n; ++r) EXPECT_EQ(work[size_t(r)], work[0]) << "rank " << r;
  } else {
    for (int r = 1; r < n; ++r) EXPECT_GT(work[size_t(r)], work[size_t(r - 1)]) << "rank " << r;
  }
  // The forward's matmul FLOPs counted for the modelled GPU: 2 products of 2·tq·tk·hs for
  // each (sequence, head) of every block the mask does not hide (a2a: the one s×s block
  // of its NH/N heads), so that the replay sees zigzag's balance.
  const int hs = c / nh;
  for (int r = 0; r < n; ++r) {
    double expected = 0;
    if (variant.comm == CpComm::kAllToAll) {
      expected = 2 * 2.0 * s * s * hs * b * (nh / n);
    } else {
      for (const SequencePiece& q : CpPieces(r, n, s, variant.balance)) {
        for (int source = 0; source < n; ++source) {
          for (const SequencePiece& k : CpPieces(source, n, s, variant.balance)) {
            const BlockPositions at{q.start, q.length, k.start, k.length};
            if (!at.Masked()) expected += 2 * 2.0 * q.length * k.length * hs * b * nh;
          }
        }
      }
    }
    EXPECT_EQ(flops[size_t(r)], expected) << "rank " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(EveryVariant, ContextAttentionTest,
                         ::testing::ValuesIn(Sweep(EveryCpVariant())), CpVariantName);

}  // namespace
}  // namespace tally::parallel
