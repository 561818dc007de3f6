#include "model/block.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "runtime/kernels/cpu/attention.h"
#include "runtime/kernels/cpu/gelu.h"
#include "runtime/kernels/cpu/layernorm.h"
#include "runtime/kernels/cpu/linear.h"
#include "runtime/status_macros.h"

namespace tally::model {

using namespace tally::cpu;  // the kernels

namespace {

void AddInPlace(float* y, const float* x, long n) {
  for (long i = 0; i < n; ++i) y[i] += x[i];
}

}  // namespace

namespace {

std::string Scope(int layer, const char* branch) { return absl::StrCat("layer", layer, ".", branch); }

}  // namespace

absl::Status BlockForward(const GPTConfig& config, const parallel::TensorParallel& tp, int layer,
                          int b, const BlockTensors& w, const float* x, const BlockActivations& a,
                          const BlockScratch& s) {
  const int t = config.seq_len, c = config.n_embd, n = b * t, rows = tp.Rows(n);
  const int c_local = c / tp.size(), heads = config.n_head / tp.size();
  const int hidden = 4 * c / tp.size();
  const bool sp = tp.sequence_parallel();
  const std::string attn = Scope(layer, "attn"), mlp = Scope(layer, "mlp");
  // Attention branch: residual2 = x + c_proj(attention(c_attn(LN1(x)))).
  float* ln1 = sp ? s.rows : a.ln1;  // sequence parallelism: f gathers it into a.ln1
  LayerNormForward(ln1, a.ln1_mean, a.ln1_rstd, x, w.ln1_w, w.ln1_b, rows, c);
  RETURN_IF_ERROR(parallel::ColumnParallelLinearForward(tp, a.qkv, ln1, a.ln1, w.qkv_w, w.qkv_b, b,
                                                        t, c, 3 * c_local, s.comm, attn));
  AttentionForward(a.atty, a.att, a.qkv, b, t, c_local, heads);
  RETURN_IF_ERROR(parallel::RowParallelLinearForward(tp, a.residual2, s.whole, a.atty, w.proj_w,
                                                     w.proj_b, b, t, c_local, c, s.comm, attn));
  AddInPlace(a.residual2, x, long(rows) * c);
  // MLP branch: out = residual2 + c_proj(GELU(c_fc(LN2(residual2)))).
  float* ln2 = sp ? s.rows : a.ln2;
  LayerNormForward(ln2, a.ln2_mean, a.ln2_rstd, a.residual2, w.ln2_w, w.ln2_b, rows, c);
  RETURN_IF_ERROR(parallel::ColumnParallelLinearForward(tp, a.fch, ln2, a.ln2, w.fc_w, w.fc_b, b, t,
                                                        c, hidden, s.comm, mlp));
  GeluForward(a.fch_gelu, a.fch, long(n) * hidden);
  RETURN_IF_ERROR(parallel::RowParallelLinearForward(tp, a.out, s.whole, a.fch_gelu, w.fcproj_w,
                                                     w.fcproj_b, b, t, hidden, c, s.comm, mlp));
  AddInPlace(a.out, a.residual2, long(rows) * c);
  return absl::OkStatus();
}

absl::Status BlockBackward(const GPTConfig& config, const parallel::TensorParallel& tp, int layer,
                           int b, const BlockTensors& w, const BlockTensors& g, const float* x,
                           const BlockActivations& a, const BlockScratch& s, float* dresidual) {
  const int t = config.seq_len, c = config.n_embd, n = b * t, rows = tp.Rows(n);
  const int c_local = c / tp.size(), heads = config.n_head / tp.size();
  const int hidden = 4 * c / tp.size();
  const std::string attn = Scope(layer, "attn"), mlp = Scope(layer, "mlp");
  // MLP branch. d(out) reaches the MLP's c_proj unchanged through the addition.
  RETURN_IF_ERROR(parallel::RowParallelLinearBackward(tp, s.d4c, g.fcproj_w, g.fcproj_b, dresidual,
                                                      s.whole, a.fch_gelu, w.fcproj_w, b, t,
                                                      hidden, c, s.comm, mlp));
  GeluBackward(s.d4c, a.fch, s.d4c, long(n) * hidden);
  RETURN_IF_ERROR(parallel::ColumnParallelLinearBackward(tp, s.dc, s.whole, g.fc_w, g.fc_b, s.d4c,
                                                         a.ln2, w.fc_w, b, t, c, hidden, s.comm,
                                                         mlp));
  // dresidual becomes d(residual2): the straight path plus the path through LN2.
  LayerNormBackward(dresidual, g.ln2_w, g.ln2_b, s.dc, a.residual2, w.ln2_w, a.ln2_mean,
                    a.ln2_rstd, rows, c);
  // Attention branch, the same way: dresidual becomes d(x).
  RETURN_IF_ERROR(parallel::RowParallelLinearBackward(tp, s.dc, g.proj_w, g.proj_b, dresidual,
                                                      s.whole, a.atty, w.proj_w, b, t, c_local, c,
                                                      s.comm, attn));
  AttentionBackward(s.dqkv, s.dtt, s.dc, a.qkv, a.att, b, t, c_local, heads);
  RETURN_IF_ERROR(parallel::ColumnParallelLinearBackward(tp, s.dc, s.whole, g.qkv_w, g.qkv_b,
                                                         s.dqkv, a.ln1, w.qkv_w, b, t, c,
                                                         3 * c_local, s.comm, attn));
  LayerNormBackward(dresidual, g.ln1_w, g.ln1_b, s.dc, x, w.ln1_w, a.ln1_mean, a.ln1_rstd, rows,
                    c);
  return absl::OkStatus();
}

}  // namespace tally::model
