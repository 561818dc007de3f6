// Causal attention one block at a time: the queries of one piece of a sequence against the
// keys and values of one piece (the same piece, or one another context-parallel rank
// holds), with each query's log-sum-exp, so that the blocks of one query piece merge into
// exactly the attention over all of them. Ring attention (context parallelism) runs one
// block per visiting K, V; serial attention is the one block of the whole sequence.
//
// B = batch, C = channels, NH = heads, hs = C / NH. A block is tq queries at sequence
// positions q_start.. and tk keys at k_start..; query i sees key j iff
// k_start + j <= q_start + i (the causal mask, in sequence positions). Per (b, h):
//   S = Q·Kᵀ/√hs over the keys query i sees (n_i of them: a prefix of the block),
//   m_i = max_j S_ij,  l_i = Σ_j exp(S_ij − m_i),  lse_i = m_i + ln l_i,
//   O_i = Σ_j exp(S_ij − m_i)·V_j / l_i.
// BlockAttentionForward merges a block into the accumulator (O, lse), which starts at
// O = 0, lse = −∞ (BlockAttentionStart):
//   lse' = M + ln(exp(lse − M) + exp(lse_b − M)),  M = max(lse, lse_b),
//   O'   = O·exp(lse − lse') + O_b·exp(lse_b − lse');
// the first block a query sees is copied (O' = O_b, lse' = lse_b), and a block it sees
// nothing of leaves it as it is. Over all blocks, O is softmax(S)·V of the whole row and
// lse its log-sum-exp; the value depends on the order the blocks merge in at rounding
// level only, so a caller that fixes the order (ring step 0, 1, ..; within a step, the
// pieces in sequence order) is deterministic.
//
// Backward, per block, given the merged lse and D_i = Σ_d dO_id·O_id (AttentionDelta):
//   P = exp(S − lse) (zero where masked),  dV += Pᵀ·dO,  dP = dO·Vᵀ,
//   dS = P ⊙ (dP − D),  dQ += dS·K/√hs,  dK += dSᵀ·Q/√hs.
// dQ, dK and dV accumulate: a ring sums a piece's dK, dV over the blocks that read it.
//
// Layouts: every operand is a (B, rows, ·) view (Rows); head h is columns h·hs..(h+1)·hs.
// lse and D are (B, NH, tq), contiguous. float exponentials in S are FastExp (as the
// serial attention's softmax), the merge's std::exp and std::log; matmuls are fp32
// (double for the tests). The (sequence, head) pairs run on the intra-op threads, every
// pair's arithmetic on one thread: the same bits on any thread count.
#pragma once

#include <cstdint>
#include <type_traits>

namespace tally::cpu {

// Sequence i's row r of a (B, rows, ·) tensor is data + i·batch + r·ld.
template <typename T>
struct Rows {
  T* data = nullptr;
  int64_t batch = 0;  // elements between sequences
  int ld = 0;         // elements between rows

  T* Row(int i, int r) const { return data + i * batch + int64_t(r) * ld; }
  // The view `columns` further along each row (a head, or k after q in a fused qkv).
  Rows At(int columns) const { return Rows{data + columns, batch, ld}; }
  // A read-only view of the same rows (a view of const elements is one already).
  template <typename U = T, typename = std::enable_if_t<!std::is_const_v<U>>>
  operator Rows<const U>() const {  // NOLINT(google-explicit-constructor)
    return Rows<const U>{data, batch, ld};
  }
};

// Where a block's queries and keys sit in the sequence.
struct BlockPositions {
  int q_start = 0;
  int tq = 0;
  int k_start = 0;
  int tk = 0;

  // The keys query i sees: a prefix of the block, 0..tk long.
  int Visible(int i) const {
    const int n = q_start + i - k_start + 1;
    return n < 0 ? 0 : (n > tk ? tk : n);
  }
  // No query sees any key: the block is skipped (no work, no exchange needed).
  bool Masked() const { return k_start > q_start + tq - 1; }
  // (query, key) pairs that are computed: the block's attention work is
  // 4·hs·VisiblePairs() flops per head (two products) forward.
  int64_t VisiblePairs() const {
    int64_t pairs = 0;
    for (int i = 0; i < tq; ++i) pairs += Visible(i);
    return pairs;
  }
};

// O = 0 and lse = −∞ for b sequences of tq queries.
template <typename T>
void BlockAttentionStart(Rows<T> o, T* lse, int b, int tq, int c, int nh);

template <typename T>
void BlockAttentionForward(Rows<T> o, T* lse, Rows<const T> q, Rows<const T> k, Rows<const T> v,
                           int b, int c, int nh, BlockPositions at);

// D (B, NH, tq) = the rows of dO ⊙ O summed over each head's columns.
template <typename T>
void AttentionDelta(T* delta, Rows<const T> dout, Rows<const T> o, int b, int tq, int c, int nh);

template <typename T>
void BlockAttentionBackward(Rows<T> dq, Rows<T> dk, Rows<T> dv, Rows<const T> q, Rows<const T> k,
                            Rows<const T> v, Rows<const T> dout, const T* lse, const T* delta,
                            int b, int c, int nh, BlockPositions at);

}  // namespace tally::cpu
