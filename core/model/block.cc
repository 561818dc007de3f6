#include "core/model/block.h"

#include <string>

#include "core/runtime/comm/ledger/names.h"
#include "core/runtime/status_macros.h"

namespace tally::model {

namespace {

// Where a kernel writes an fp32 result that is kept as `kept`: kept itself when it is
// fp32, else `scratch`, from which Keep rounds it into kept.
float* Fp32Room(TypedPtr kept, float* scratch) {
  return kept.type == DType::kF32 ? kept.as<float>() : scratch;
}
absl::Status Keep(Kernels& k, TypedPtr kept, const float* result, int64_t n) {
  if (result == kept.data) return absl::OkStatus();
  return k.Convert(kept.data, kept.type, result, DType::kF32, n);
}

// Positions of each sequence on this rank.
int Positions(const GPTConfig& config, const SequenceSplit* sequence) {
  return sequence != nullptr ? config.seq_len / sequence->size() : config.seq_len;
}

}  // namespace

absl::Status BlockForward(Kernels& k, const GPTConfig& config, const LayerSplit& split,
                          int layer, int b, const BlockTensors& w, const float* x,
                          const BlockActivations& a, const BlockScratch& s,
                          const ExpertSplit* experts, const SequenceSplit* sequence) {
  const int t = Positions(config, sequence), c = config.n_embd, n = b * t, rows = split.Rows(n);
  const int c_local = c / split.size(), heads = config.n_head / split.size();
  const int hidden = 4 * c / split.size();
  const bool sp = split.sequence_parallel();
  const std::string attn = comm::scope::Layer(layer, comm::scope::kAttn),
                    mlp = comm::scope::Layer(layer, comm::scope::kMlp);
  // Attention branch: residual2 = x + c_proj(attention(c_attn(LN1(x)))).
  // Sequence parallelism: LN1 writes this rank's rows, which f gathers into a.ln1.
  const TypedPtr ln1 = sp ? TypedPtr(s.rows, a.ln1.type) : a.ln1;
  RETURN_IF_ERROR(k.LayerNormForward(ln1, a.ln1_mean, a.ln1_rstd, x, w.ln1_w, w.ln1_b, rows, c));
  float* qkv = Fp32Room(a.qkv, s.dqkv);
  RETURN_IF_ERROR(split.ColumnLinearForward(k, qkv, ln1, a.ln1, w.operands(w.qkv_w), w.qkv_b, b,
                                            t, c, 3 * c_local, s.comm, attn));
  RETURN_IF_ERROR(Keep(k, a.qkv, qkv, int64_t(n) * 3 * c_local));
  float* atty = Fp32Room(a.atty, s.dc);
  if (sequence != nullptr) {
    // Split attention reads fp32: the kept q, k, v, widened back where they are bf16 (the
    // values serial attention reads, and backward will).
    if (a.qkv.type != DType::kF32) {
      RETURN_IF_ERROR(k.Convert(qkv, DType::kF32, a.qkv.data, a.qkv.type, int64_t(n) * 3 * c_local));
    }
    RETURN_IF_ERROR(sequence->AttentionForward(atty, a.att, qkv, b, c_local, heads,
                                               comm::scope::Layer(layer, comm::scope::kContext)));
  } else {
    float* att = a.att != nullptr ? a.att : s.att;  // null: selective recompute (block.h)
    RETURN_IF_ERROR(k.AttentionForward(atty, att, a.qkv, b, t, c_local, heads));
  }
  RETURN_IF_ERROR(Keep(k, a.atty, atty, int64_t(n) * c_local));
  RETURN_IF_ERROR(split.RowLinearForward(k, a.residual2, s.whole, a.atty, w.operands(w.proj_w),
                                         w.proj_b, b, t, c_local, c, s.comm, attn));
  RETURN_IF_ERROR(k.AddInPlace(a.residual2, x, int64_t(rows) * c));
  // MLP branch: out = residual2 + c_proj(GELU(c_fc(LN2(residual2)))), or the experts'.
  const TypedPtr ln2 = sp ? TypedPtr(s.rows, a.ln2.type) : a.ln2;
  RETURN_IF_ERROR(
      k.LayerNormForward(ln2, a.ln2_mean, a.ln2_rstd, a.residual2, w.ln2_w, w.ln2_b, rows, c));
  if (config.moe()) {
    RETURN_IF_ERROR(
        MoeForward(k, config, split, layer, n, w, a.ln2, experts, sequence, a.moe, s.moe, a.out));
    return k.AddInPlace(a.out, a.residual2, int64_t(rows) * c);
  }
  RETURN_IF_ERROR(split.ColumnLinearForward(k, a.fch, ln2, a.ln2, w.operands(w.fc_w), w.fc_b, b,
                                            t, c, hidden, s.comm, mlp));
  RETURN_IF_ERROR(k.GeluForward(a.fch_gelu, a.fch, int64_t(n) * hidden));
  RETURN_IF_ERROR(split.RowLinearForward(k, a.out, s.whole, a.fch_gelu, w.operands(w.fcproj_w),
                                         w.fcproj_b, b, t, hidden, c, s.comm, mlp));
  return k.AddInPlace(a.out, a.residual2, int64_t(rows) * c);
}

absl::Status BlockBackward(Kernels& k, const GPTConfig& config, const LayerSplit& split,
                           int layer, int b, const BlockTensors& w, const BlockTensors& g,
                           const float* x, const BlockActivations& a, const BlockScratch& s,
                           float dloss, float* dresidual, const ExpertSplit* experts,
                           const SequenceSplit* sequence) {
  const int t = Positions(config, sequence), c = config.n_embd, n = b * t, rows = split.Rows(n);
  const int c_local = c / split.size(), heads = config.n_head / split.size();
  const int hidden = 4 * c / split.size();
  const std::string attn = comm::scope::Layer(layer, comm::scope::kAttn),
                    mlp = comm::scope::Layer(layer, comm::scope::kMlp);
  // MLP branch. d(out) reaches the MLP's c_proj unchanged through the addition.
  if (config.moe()) {
    RETURN_IF_ERROR(
        MoeBackward(k, config, split, layer, n, w, g, a.ln2, experts, a.moe, s.moe, dloss, dresidual,
                    s.dc));
  } else {
    RETURN_IF_ERROR(split.RowLinearBackward(k, s.d4c, g.fcproj_w, g.fcproj_b, dresidual, s.whole,
                                            a.fch_gelu, w.operands(w.fcproj_w), b, t, hidden, c,
                                            s.comm, mlp));
    RETURN_IF_ERROR(k.GeluBackward(s.d4c, a.fch, s.d4c, int64_t(n) * hidden));
    RETURN_IF_ERROR(split.ColumnLinearBackward(k, s.dc, s.whole, g.fc_w, g.fc_b, s.d4c, a.ln2,
                                               w.operands(w.fc_w), b, t, c, hidden, s.comm, mlp));
  }
  // dresidual becomes d(residual2): the straight path plus the path through LN2.
  RETURN_IF_ERROR(k.LayerNormBackward(dresidual, g.ln2_w, g.ln2_b, s.dc, a.residual2, w.ln2_w,
                                      a.ln2_mean, a.ln2_rstd, rows, c));
  // Attention branch, the same way: dresidual becomes d(x). Under selective recompute the
  // probabilities are made again first (the output, already kept, goes to free scratch).
  const float* att = a.att;
  if (att == nullptr) {
    RETURN_IF_ERROR(k.AttentionForward(s.dqkv, s.att, a.qkv, b, t, c_local, heads));
    att = s.att;
  }
  RETURN_IF_ERROR(split.RowLinearBackward(k, s.dc, g.proj_w, g.proj_b, dresidual, s.whole, a.atty,
                                          w.operands(w.proj_w), b, t, c_local, c, s.comm, attn));
  if (sequence != nullptr) {
    // Split attention reads fp32: the kept bf16 q, k, v and output widened into d4c, free
    // once the MLP's backward is done (n·4C/tp holds the n·3C/tp and n·C/tp).
    const float* qkv = static_cast<const float*>(a.qkv.data);
    const float* atty = static_cast<const float*>(a.atty.data);
    if (a.qkv.type != DType::kF32) {
      const int64_t qkv_values = int64_t(n) * 3 * c_local;
      RETURN_IF_ERROR(k.Convert(s.d4c, DType::kF32, a.qkv.data, a.qkv.type, qkv_values));
      RETURN_IF_ERROR(k.Convert(s.d4c + qkv_values, DType::kF32, a.atty.data, a.atty.type,
                                int64_t(n) * c_local));
      qkv = s.d4c;
      atty = s.d4c + qkv_values;
    }
    RETURN_IF_ERROR(sequence->AttentionBackward(
        s.dqkv, s.dc, qkv, atty, att, b, c_local, heads,
        comm::scope::Layer(layer, comm::scope::kContext)));
  } else {
    RETURN_IF_ERROR(k.AttentionBackward(s.dqkv, s.dtt, s.dc, a.qkv, att, b, t, c_local, heads));
  }
  RETURN_IF_ERROR(split.ColumnLinearBackward(k, s.dc, s.whole, g.qkv_w, g.qkv_b, s.dqkv, a.ln1,
                                             w.operands(w.qkv_w), b, t, c, 3 * c_local, s.comm,
                                             attn));
  return k.LayerNormBackward(dresidual, g.ln1_w, g.ln1_b, s.dc, x, w.ln1_w, a.ln1_mean, a.ln1_rstd,
                             rows, c);
}

}  // namespace tally::model
