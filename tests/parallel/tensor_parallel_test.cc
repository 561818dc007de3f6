// Each tensor-parallel layer equals its serial module — forward output and every
// gradient — for N in {1, 2, 4} ranks (3 where the shapes allow), including a vocabulary
// that N does not divide.
#include "core/parallel/tensor_parallel.h"

#include <cmath>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "core/model/block.h"
#include "core/model/parameters.h"
#include "core/runtime/comm/launch.h"
#include "core/runtime/kernels/cpu/cross_entropy.h"
#include "core/runtime/kernels/cpu/linear.h"
#include "tests/sweep.h"

namespace tally::parallel {
namespace {

// The CPU's kernels, which hold no state: every thread rank may share them.
Kernels& Cpu() {
  static Kernels* kernels = Kernels::Create(Device::CPU()).value().release();
  return *kernels;
}

std::vector<float> Random(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

// Rows [first, first + rows) of a row-major (·, cols) matrix.
std::vector<float> Rows(const std::vector<float>& m, int cols, int first, int rows) {
  return {m.begin() + int64_t(first) * cols, m.begin() + int64_t(first + rows) * cols};
}

// Columns [first, first + count) of a row-major (rows, cols) matrix.
std::vector<float> Columns(const std::vector<float>& m, int rows, int cols, int first, int count) {
  std::vector<float> out;
  for (int i = 0; i < rows; ++i) {
    for (int j = 0; j < count; ++j) out.push_back(m[int64_t(i) * cols + first + j]);
  }
  return out;
}

void ExpectNear(const std::vector<float>& got, const std::vector<float>& want, const char* what,
                int rank) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], 1e-5f * std::max(1.0f, std::abs(want[i])))
        << what << "[" << i << "] on rank " << rank;
  }
}

// This rank's part of the sequence of (b, t, cols) activations: (b, t/N, cols).
std::vector<float> SequencePart(const std::vector<float>& m, int b, int t, int cols, int ranks,
                                int rank) {
  const int tl = t / ranks;
  std::vector<float> out;
  for (int i = 0; i < b; ++i) {
    auto first = m.begin() + (int64_t(i) * t + int64_t(rank) * tl) * cols;
    out.insert(out.end(), first, first + int64_t(tl) * cols);
  }
  return out;
}

// Runs `fn` on `n` thread ranks, each with a tensor-parallel group of all of them.
void OnRanks(int n, bool sequence_parallel, const std::function<void(const TensorParallel&)>& fn) {
  comm::LaunchOptions launch;
  launch.world_size = n;
  absl::Status status = comm::RunThreadRanks(launch, [&](comm::Communicator& world) -> absl::Status {
    fn(TensorParallel(n > 1 ? &world : nullptr, sequence_parallel));
    return absl::OkStatus();
  });
  ASSERT_TRUE(status.ok()) << status;
}

// (ranks, sequence parallelism)
class TensorParallelLayers : public ::testing::TestWithParam<std::tuple<int, bool>> {
 protected:
  int ranks() const { return std::get<0>(GetParam()); }
  bool sp() const { return std::get<1>(GetParam()); }
  // What a rank holds of (b, t, cols) activations between the parallel layers.
  std::vector<float> Held(const std::vector<float>& m, int b, int t, int cols, const model::LayerSplit& tp) const {
    return tp.sequence_parallel() ? SequencePart(m, b, t, cols, tp.size(), tp.rank()) : m;
  }
};

TEST_P(TensorParallelLayers, ColumnParallelLinearEqualsLinear) {
  const int b = 2, t = 4, n = b * t, in = 5, out = 8, out_local = out / ranks();
  auto x = Random(n * in, 1), w = Random(out * in, 2), bias = Random(out, 3), dy = Random(n * out, 4);
  std::vector<float> y(n * out), dx(n * in), dw(out * in, 0.0f), db(out, 0.0f);
  cpu::LinearForward(y.data(), x.data(), w.data(), bias.data(), n, in, out);
  cpu::LinearBackward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), n, in, out);
  OnRanks(ranks(), sp(), [&](const TensorParallel& tp) {
    const int first = tp.rank() * out_local;
    auto w_r = Rows(w, in, first, out_local), b_r = Rows(bias, 1, first, out_local);
    auto dy_r = Columns(dy, n, out, first, out_local);
    auto x_r = Held(x, b, t, in, tp);
    std::vector<float> y_r(n * out_local), x_whole(n * in), dx_r(n * in), dx_whole(n * in);
    std::vector<float> dw_r(out_local * in, 0.0f), db_r(out_local, 0.0f), scratch(n * in);
    ASSERT_TRUE(tp.ColumnLinearForward(Cpu(), y_r.data(), x_r.data(), x_whole.data(),
                                            w_r.data(), b_r.data(), b, t, in, out_local,
                                            scratch.data(), "test")
                    .ok());
    const float* input = tp.sequence_parallel() ? x_whole.data() : x.data();
    ASSERT_TRUE(tp.ColumnLinearBackward(Cpu(), dx_r.data(), dx_whole.data(), dw_r.data(),
                                             db_r.data(), dy_r.data(), input, w_r.data(), b, t, in,
                                             out_local, scratch.data(), "test")
                    .ok());
    ExpectNear(y_r, Columns(y, n, out, first, out_local), "y", tp.rank());
    dx_r.resize(tp.Rows(n) * in);
    ExpectNear(dx_r, Held(dx, b, t, in, tp), "dx", tp.rank());  // after f's sum
    ExpectNear(dw_r, Rows(dw, in, first, out_local), "dW", tp.rank());
    ExpectNear(db_r, Rows(db, 1, first, out_local), "db", tp.rank());
  });
}

TEST_P(TensorParallelLayers, RowParallelLinearEqualsLinear) {
  const int b = 2, t = 4, n = b * t, in = 8, out = 5, in_local = in / ranks();
  auto x = Random(n * in, 5), w = Random(out * in, 6), bias = Random(out, 7), dy = Random(n * out, 8);
  std::vector<float> y(n * out), dx(n * in), dw(out * in, 0.0f), db(out, 0.0f);
  cpu::LinearForward(y.data(), x.data(), w.data(), bias.data(), n, in, out);
  cpu::LinearBackward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), n, in, out);
  OnRanks(ranks(), sp(), [&](const TensorParallel& tp) {
    const int first = tp.rank() * in_local;
    auto w_r = Columns(w, out, in, first, in_local), x_r = Columns(x, n, in, first, in_local);
    auto dy_r = Held(dy, b, t, out, tp);
    std::vector<float> y_r(n * out), y_whole(n * out), dy_whole(n * out), scratch(n * out);
    std::vector<float> dx_r(n * in_local), dw_r(out * in_local, 0.0f), db_r(out, 0.0f);
    ASSERT_TRUE(tp.RowLinearForward(Cpu(), y_r.data(), y_whole.data(), x_r.data(),
                                         w_r.data(), bias.data(), b, t, in_local, out,
                                         scratch.data(), "test")
                    .ok());
    ASSERT_TRUE(tp.RowLinearBackward(Cpu(), dx_r.data(), dw_r.data(), db_r.data(),
                                          dy_r.data(), dy_whole.data(), x_r.data(), w_r.data(), b,
                                          t, in_local, out, scratch.data(), "test")
                    .ok());
    y_r.resize(tp.Rows(n) * out);
    ExpectNear(y_r, Held(y, b, t, out, tp), "y", tp.rank());  // after g's sum, the bias once
    ExpectNear(dx_r, Columns(dx, n, in, first, in_local), "dx", tp.rank());
    ExpectNear(dw_r, Columns(dw, out, in, first, in_local), "dW", tp.rank());
    ExpectNear(db_r, db, "db", tp.rank());
  });
}

// The attention and MLP branches of a block: c_attn column-parallel with whole heads,
// c_fc column-parallel, both c_proj row-parallel. Each rank's slices come from the whole
// model's buffer through the tensor-parallel layout, and its gradients go back the same
// way, so the test also checks the layout's mapping.
TEST_P(TensorParallelLayers, TransformerBlockEqualsTheSerialBlock) {
  model::GPTConfig config;
  config.n_layer = 1;
  config.n_head = 4;
  config.n_embd = 8;
  config.seq_len = 4;
  config.vocab_size = 11;
  const int b = 2, t = config.seq_len, n = b * t, c = config.n_embd;
  const model::ParameterLayout whole = model::ParameterLayout::ForGPT(config);
  // All random, LayerNorm gains too, at the scale of a trained model's weights.
  std::vector<float> params = Random(whole.total(), 9);
  for (float& p : params) p *= 0.3f;
  const model::ParamUnit& unit = whole.units()[whole.layer_unit(0)];
  auto x = Random(n * c, 10), dout = Random(n * c, 11);

  // Runs the block on one rank's part: out and dx of the rank's rows, and its gradients.
  struct Result {
    std::vector<float> out, dx, local_grads;
  };
  auto run = [&](const model::LayerSplit& tp) {
    const model::ParameterLayout layout = model::ParameterLayout::ForGPT(config, tp.size(), tp.rank());
    const model::ParamUnit& mine = layout.units()[layout.layer_unit(0)];
    std::vector<float> local(layout.total());
    Result r;
    r.local_grads.assign(layout.total(), 0.0f);
    layout.FromGlobal(params.data(), local.data());
    const int rows = tp.Rows(n), cl = c / tp.size(), heads = config.n_head / tp.size();
    const int hidden = 4 * c / tp.size();
    std::vector<float> acts(n * c * 2 + rows * c * 2 + rows * 4 + n * cl + n * 3 * cl +
                            b * heads * t * t + n * hidden * 2);
    float* p = acts.data();
    auto take = [&p](int64_t k) { float* q = p; p += k; return q; };
    model::BlockActivations a;
    a.ln1 = take(n * c), a.ln1_mean = take(rows), a.ln1_rstd = take(rows), a.qkv = take(n * 3 * cl);
    a.att = take(b * heads * t * t), a.atty = take(n * cl), a.residual2 = take(rows * c);
    a.ln2 = take(n * c), a.ln2_mean = take(rows), a.ln2_rstd = take(rows);
    a.fch = take(n * hidden), a.fch_gelu = take(n * hidden), a.out = take(rows * c);
    std::vector<float> scratch(n * hidden + n * 3 * cl + n * c + t * t + rows * c + 2 * n * c);
    float* q = scratch.data();
    model::BlockScratch s;
    s.d4c = q, s.dqkv = q + n * hidden, s.dc = q + n * hidden + n * 3 * cl;
    s.dtt = q + n * hidden + n * 3 * cl + n * c;
    s.rows = s.dtt + t * t, s.whole = s.rows + rows * c, s.comm = s.whole + n * c;
    model::BlockTensors w = model::BindBlock(layout, 0, local.data() + mine.begin);
    model::BlockTensors g = model::BindBlock(layout, 0, r.local_grads.data() + mine.begin);
    auto x_r = Held(x, b, t, c, tp);
    EXPECT_TRUE(model::BlockForward(Cpu(), config, tp, 0, b, w, x_r.data(), a, s).ok());
    r.out.assign(a.out, a.out + rows * c);
    r.dx = Held(dout, b, t, c, tp);
    EXPECT_TRUE(
        model::BlockBackward(Cpu(), config, tp, 0, b, w, g, x_r.data(), a, s, 1.0f, r.dx.data()).ok());
    return r;
  };
  Result serial = run(model::Serial::Instance());  // the model's own serial block
  std::vector<Result> parts(ranks());
  OnRanks(ranks(), sp(), [&](const TensorParallel& tp) { parts[tp.rank()] = run(tp); });
  // The ranks' gradients in the whole buffer: split tensors each in their own place;
  // replicated ones whole on every rank, except that under sequence parallelism the
  // LayerNorms' cover each rank's tokens and sum over the ranks.
  std::vector<float> grads(whole.total(), 0.0f);
  for (int r = 0; r < ranks(); ++r) {
    const model::ParameterLayout layout = model::ParameterLayout::ForGPT(config, ranks(), r);
    const bool sequence = sp() && ranks() > 1;
    auto held = [&](const std::vector<float>& m) {
      return sequence ? SequencePart(m, b, t, c, ranks(), r) : m;
    };
    ExpectNear(parts[r].out, held(serial.out), "out", r);
    ExpectNear(parts[r].dx, held(serial.dx), "dx", r);
    for (size_t k = 0; k < layout.specs().size(); ++k) {
      const model::ParamSpec& spec = layout.specs()[k];
      const int64_t global = whole.specs()[k].offset;
      const bool sum = sequence && spec.per_token;
      if (spec.replicated() && r > 0 && !sum) continue;
      layout.ForEachRun(spec, global, [&](int64_t l, int64_t g, int64_t count) {
        for (int64_t i = 0; i < count; ++i) grads[g + i] += parts[r].local_grads[l + i];
      });
    }
  }
  std::vector<float> serial_grads(whole.total());
  whole.ToGlobal(serial.local_grads.data(), serial_grads.data());
  ExpectNear(std::vector<float>(grads.begin() + unit.begin, grads.begin() + unit.end),
             std::vector<float>(serial_grads.begin() + unit.begin, serial_grads.begin() + unit.end),
             "block gradients", -1);
}

// The tied LM head's loss from vocabulary slices: V = 11, so 2 and 4 ranks pad it.
TEST_P(TensorParallelLayers, VocabParallelCrossEntropyAndEmbeddingEqualSerial) {
  const int b = 2, t = 4, n = b * t, c = 4, vocab = 11;
  const int vocab_local = (vocab + ranks() - 1) / ranks();
  auto logits = Random(n * vocab, 12), wte = Random(vocab * c, 13), wpe = Random(t * c, 14);
  auto dx = Random(n * c, 15);
  std::vector<int32_t> tokens = {0, 10, 5, 3, 7, 10, 2, 10}, targets = {10, 0, 4, 6, 9, 1, 10, 3};
  std::vector<float> losses(n), probs(n * vocab);
  cpu::CrossEntropyForward(losses.data(), probs.data(), logits.data(), targets.data(), n, vocab);
  cpu::CrossEntropyBackward(probs.data(), probs.data(), targets.data(), 0.5f, n, vocab);
  std::vector<float> x(n * c), dwte(vocab * c, 0.0f), dwpe(t * c, 0.0f);
  for (int i = 0; i < n; ++i) {
    for (int k = 0; k < c; ++k) {
      x[i * c + k] = wte[tokens[i] * c + k] + wpe[(i % t) * c + k];
      dwte[tokens[i] * c + k] += dx[i * c + k];
      dwpe[(i % t) * c + k] += dx[i * c + k];
    }
  }
  std::vector<std::vector<float>> dwpe_parts(ranks());
  OnRanks(ranks(), sp(), [&](const TensorParallel& tp) {
    const int first = tp.rank() * vocab_local, valid = std::max(0, std::min(vocab_local, vocab - first));
    // This rank's slice, padded with columns (rows of wte) past the vocabulary.
    std::vector<float> logits_r(n * vocab_local, 123.0f), wte_r(vocab_local * c, 0.0f);
    for (int i = 0; i < n; ++i) {
      for (int j = 0; j < valid; ++j) logits_r[i * vocab_local + j] = logits[i * vocab + first + j];
    }
    for (int j = 0; j < valid * c; ++j) wte_r[j] = wte[first * c + j];
    std::vector<float> losses_r(n), probs_r(n * vocab_local), scratch(3 * n);
    ASSERT_TRUE(tp.CrossEntropyForward(Cpu(), losses_r.data(), probs_r.data(),
                                                 scratch.data(), logits_r.data(), targets.data(), n,
                                                 vocab_local, vocab, "ce")
                    .ok());
    ASSERT_TRUE(tp.CrossEntropyBackward(Cpu(), probs_r.data(), probs_r.data(),
                                                  targets.data(), 0.5f, n, vocab_local)
                    .ok());
    ExpectNear(losses_r, losses, "loss", tp.rank());
    std::vector<float> dlogits_r(n * valid);
    for (int i = 0; i < n; ++i) {
      for (int j = 0; j < valid; ++j) dlogits_r[i * valid + j] = probs_r[i * vocab_local + j];
      for (int j = valid; j < vocab_local; ++j) ASSERT_EQ(probs_r[i * vocab_local + j], 0.0f);
    }
    ExpectNear(dlogits_r, Columns(probs, n, vocab, first, valid), "dlogits", tp.rank());

    const int rows = tp.Rows(n);
    std::vector<float> x_r(rows * c), whole(n * c), comm(n * c), dwte_r(vocab_local * c, 0.0f);
    std::vector<float> dwpe_r(t * c, 0.0f);
    auto dx_r = Held(dx, b, t, c, tp);
    ASSERT_TRUE(tp.EmbeddingForward(Cpu(), x_r.data(), whole.data(), tokens.data(),
                                              wte_r.data(), wpe.data(), b, t, c, vocab_local,
                                              comm.data(), "emb")
                    .ok());
    ASSERT_TRUE(tp.EmbeddingBackward(Cpu(), dwte_r.data(), dwpe_r.data(), dx_r.data(),
                                               whole.data(), tokens.data(), b, t, c, vocab_local,
                                               comm.data(), "emb")
                    .ok());
    ExpectNear(x_r, Held(x, b, t, c, tp), "embedding", tp.rank());
    ExpectNear(std::vector<float>(dwte_r.begin(), dwte_r.begin() + valid * c),
               Rows(dwte, c, first, valid), "dwte", tp.rank());
    dwpe_parts[tp.rank()] = dwpe_r;
  });
  // The position table's gradient: whole on every rank, or (sequence parallelism) each
  // rank's positions, summing to it.
  std::vector<float> sum(t * c, 0.0f);
  for (int r = 0; r < ranks(); ++r) {
    if (!(sp() && ranks() > 1)) {
      ExpectNear(dwpe_parts[r], dwpe, "dwpe", r);
      continue;
    }
    for (int i = 0; i < t * c; ++i) sum[i] += dwpe_parts[r][i];
  }
  if (sp() && ranks() > 1) ExpectNear(sum, dwpe, "dwpe summed", -1);
}

std::string LayersName(const ::testing::TestParamInfo<std::tuple<int, bool>>& info) {
  return "tp" + std::to_string(std::get<0>(info.param)) + (std::get<1>(info.param) ? "_sp" : "");
}

INSTANTIATE_TEST_SUITE_P(Ranks, TensorParallelLayers,
                         ::testing::Combine(::testing::ValuesIn(Sweep<int>({1, 2, 4})),
                                            ::testing::Bool()),
                         LayersName);

// The layout of a part: shapes, and every whole-model element in exactly one rank's part
// (or replicated in all), with the vocabulary padded.
TEST(TensorParallelLayout, PartsCoverTheWholeModel) {
  model::GPTConfig config;
  config.n_layer = 2;
  config.n_head = 6;
  config.n_embd = 12;
  config.seq_len = 4;
  config.vocab_size = 256;
  const model::ParameterLayout whole = model::ParameterLayout::ForGPT(config);
  std::vector<float> ids(whole.total());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = float(i);
  const int tp = 3;
  std::vector<int> seen(whole.total(), 0);
  for (int r = 0; r < tp; ++r) {
    const model::ParameterLayout part = model::ParameterLayout::ForGPT(config, tp, r);
    EXPECT_EQ(part.Find("wte.weight")->shape, (Shape{86, 12}));  // 256 -> 258 rows / 3
    EXPECT_EQ(part.Find("h.1.attn.c_attn.weight")->shape, (Shape{12, 12}));
    EXPECT_EQ(part.Find("h.1.mlp.c_proj.weight")->shape, (Shape{12, 16}));
    EXPECT_EQ(part.Find("h.1.ln_2.weight")->shape, (Shape{12}));
    std::vector<float> local(part.total(), -1.0f);
    part.FromGlobal(ids.data(), local.data());
    for (const model::ParamSpec& spec : part.specs()) {
      for (int64_t i = spec.offset; i < spec.offset + spec.numel; ++i) {
        if (local[i] >= 0) ++seen[int64_t(local[i])];
      }
    }
    // Q, K and V each give rank r the rows of its heads: 2 of 6 heads = rows [4r, 4r + 4).
    const model::ParamSpec* qkv = part.Find("h.0.attn.c_attn.weight");
    const int64_t qkv_global = whole.Find("h.0.attn.c_attn.weight")->offset;
    EXPECT_EQ(local[qkv->offset], float(qkv_global + 4 * r * 12));                   // Q
    EXPECT_EQ(local[qkv->offset + 4 * 12], float(qkv_global + (12 + 4 * r) * 12));  // K
  }
  const model::ParameterLayout part0 = model::ParameterLayout::ForGPT(config, tp, 0);
  for (const model::ParamSpec& spec : whole.specs()) {
    const model::ParamSpec* part = part0.Find(spec.name);
    for (int64_t i = spec.offset; i < spec.offset + spec.numel; ++i) {
      ASSERT_EQ(seen[i], part->replicated() ? tp : 1) << spec.name << " element " << i - spec.offset;
    }
  }
}

}  // namespace
}  // namespace tally::parallel
