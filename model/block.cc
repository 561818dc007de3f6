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
                          int b, const BlockTensors& w, const float* x,
                          const BlockActivations& a) {
  const int t = config.seq_len, c = config.n_embd, n = b * t;
  const int c_local = c / tp.size(), heads = config.n_head / tp.size();
  const int hidden = 4 * c / tp.size();
  // Attention branch: residual2 = x + c_proj(attention(c_attn(LN1(x)))).
  LayerNormForward(a.ln1, a.ln1_mean, a.ln1_rstd, x, w.ln1_w, w.ln1_b, n, c);
  parallel::ColumnParallelLinearForward(a.qkv, a.ln1, w.qkv_w, w.qkv_b, n, c, 3 * c_local);
  AttentionForward(a.atty, a.att, a.qkv, b, t, c_local, heads);
  RETURN_IF_ERROR(parallel::RowParallelLinearForward(tp, a.residual2, a.atty, w.proj_w, w.proj_b,
                                                     n, c_local, c, Scope(layer, "attn")));
  AddInPlace(a.residual2, x, long(n) * c);
  // MLP branch: out = residual2 + c_proj(GELU(c_fc(LN2(residual2)))).
  LayerNormForward(a.ln2, a.ln2_mean, a.ln2_rstd, a.residual2, w.ln2_w, w.ln2_b, n, c);
  parallel::ColumnParallelLinearForward(a.fch, a.ln2, w.fc_w, w.fc_b, n, c, hidden);
  GeluForward(a.fch_gelu, a.fch, long(n) * hidden);
  RETURN_IF_ERROR(parallel::RowParallelLinearForward(tp, a.out, a.fch_gelu, w.fcproj_w,
                                                     w.fcproj_b, n, hidden, c, Scope(layer, "mlp")));
  AddInPlace(a.out, a.residual2, long(n) * c);
  return absl::OkStatus();
}

absl::Status BlockBackward(const GPTConfig& config, const parallel::TensorParallel& tp, int layer,
                           int b, const BlockTensors& w, const BlockTensors& g, const float* x,
                           const BlockActivations& a, const BlockScratch& s, float* dresidual) {
  const int t = config.seq_len, c = config.n_embd, n = b * t;
  const int c_local = c / tp.size(), heads = config.n_head / tp.size();
  const int hidden = 4 * c / tp.size();
  // MLP branch. d(out) reaches the MLP's c_proj unchanged through the addition.
  parallel::RowParallelLinearBackward(s.d4c, g.fcproj_w, g.fcproj_b, dresidual, a.fch_gelu,
                                      w.fcproj_w, n, hidden, c);
  GeluBackward(s.d4c, a.fch, s.d4c, long(n) * hidden);
  RETURN_IF_ERROR(parallel::ColumnParallelLinearBackward(tp, s.dc, g.fc_w, g.fc_b, s.d4c, a.ln2,
                                                         w.fc_w, n, c, hidden, Scope(layer, "mlp")));
  // dresidual becomes d(residual2): the straight path plus the path through LN2.
  LayerNormBackward(dresidual, g.ln2_w, g.ln2_b, s.dc, a.residual2, w.ln2_w, a.ln2_mean,
                    a.ln2_rstd, n, c);
  // Attention branch, the same way: dresidual becomes d(x).
  parallel::RowParallelLinearBackward(s.dc, g.proj_w, g.proj_b, dresidual, a.atty, w.proj_w, n,
                                      c_local, c);
  AttentionBackward(s.dqkv, s.dtt, s.dc, a.qkv, a.att, b, t, c_local, heads);
  RETURN_IF_ERROR(parallel::ColumnParallelLinearBackward(tp, s.dc, g.qkv_w, g.qkv_b, s.dqkv,
                                                         a.ln1, w.qkv_w, n, c, 3 * c_local,
                                                         Scope(layer, "attn")));
  LayerNormBackward(dresidual, g.ln1_w, g.ln1_b, s.dc, x, w.ln1_w, a.ln1_mean, a.ln1_rstd, n, c);
  return absl::OkStatus();
}

}  // namespace tally::model
