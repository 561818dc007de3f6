// Each tensor-parallel layer equals its serial module — forward output and every
// gradient — for N in {1, 2, 4} ranks (3 where the shapes allow), including a vocabulary
// that N does not divide.
#include "parallel/tensor_parallel.h"

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/block.h"
#include "model/parameters.h"
#include "runtime/comm/launch.h"
#include "runtime/kernels/cpu/cross_entropy.h"
#include "runtime/kernels/cpu/linear.h"

namespace tally::parallel {
namespace {

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

// Runs `fn` on `n` thread ranks, each with a tensor-parallel group of all of them.
void OnRanks(int n, const std::function<void(const TensorParallel&)>& fn) {
  comm::LaunchOptions launch;
  launch.world_size = n;
  absl::Status status = comm::RunThreadRanks(launch, [&](comm::Communicator& world) -> absl::Status {
    fn(TensorParallel(n > 1 ? &world : nullptr));
    return absl::OkStatus();
  });
  ASSERT_TRUE(status.ok()) << status;
}

class TensorParallelLayers : public ::testing::TestWithParam<int> {};

TEST_P(TensorParallelLayers, ColumnParallelLinearEqualsLinear) {
  const int ranks = GetParam(), n = 6, in = 5, out = 8, out_local = out / ranks;
  auto x = Random(n * in, 1), w = Random(out * in, 2), b = Random(out, 3), dy = Random(n * out, 4);
  std::vector<float> y(n * out), dx(n * in), dw(out * in, 0.0f), db(out, 0.0f);
  cpu::LinearForward(y.data(), x.data(), w.data(), b.data(), n, in, out);
  cpu::LinearBackward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), n, in, out);
  OnRanks(ranks, [&](const TensorParallel& tp) {
    const int first = tp.rank() * out_local;
    auto w_r = Rows(w, in, first, out_local), b_r = Rows(b, 1, first, out_local);
    auto dy_r = Columns(dy, n, out, first, out_local);
    std::vector<float> y_r(n * out_local), dx_r(n * in), dw_r(out_local * in, 0.0f), db_r(out_local, 0.0f);
    ColumnParallelLinearForward(y_r.data(), x.data(), w_r.data(), b_r.data(), n, in, out_local);
    ASSERT_TRUE(ColumnParallelLinearBackward(tp, dx_r.data(), dw_r.data(), db_r.data(), dy_r.data(),
                                             x.data(), w_r.data(), n, in, out_local, "test").ok());
    ExpectNear(y_r, Columns(y, n, out, first, out_local), "y", tp.rank());
    ExpectNear(dx_r, dx, "dx", tp.rank());  // whole, after f's all-reduce
    ExpectNear(dw_r, Rows(dw, in, first, out_local), "dW", tp.rank());
    ExpectNear(db_r, Rows(db, 1, first, out_local), "db", tp.rank());
  });
}

TEST_P(TensorParallelLayers, RowParallelLinearEqualsLinear) {
  const int ranks = GetParam(), n = 6, in = 8, out = 5, in_local = in / ranks;
  auto x = Random(n * in, 5), w = Random(out * in, 6), b = Random(out, 7), dy = Random(n * out, 8);
  std::vector<float> y(n * out), dx(n * in), dw(out * in, 0.0f), db(out, 0.0f);
  cpu::LinearForward(y.data(), x.data(), w.data(), b.data(), n, in, out);
  cpu::LinearBackward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), n, in, out);
  OnRanks(ranks, [&](const TensorParallel& tp) {
    const int first = tp.rank() * in_local;
    auto w_r = Columns(w, out, in, first, in_local), x_r = Columns(x, n, in, first, in_local);
    std::vector<float> y_r(n * out), dx_r(n * in_local), dw_r(out * in_local, 0.0f), db_r(out, 0.0f);
    ASSERT_TRUE(RowParallelLinearForward(tp, y_r.data(), x_r.data(), w_r.data(), b.data(), n,
                                         in_local, out, "test").ok());
    RowParallelLinearBackward(dx_r.data(), dw_r.data(), db_r.data(), dy.data(), x_r.data(),
                              w_r.data(), n, in_local, out);
    ExpectNear(y_r, y, "y", tp.rank());  // whole, after g's all-reduce and the bias once
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
  const int ranks = GetParam();
  model::GPTConfig config;
  config.n_layer = 1;
  config.n_head = 4;
  config.n_embd = 8;
  config.seq_len = 5;
  config.vocab_size = 11;
  const int b = 2, n = b * config.seq_len, c = config.n_embd;
  const model::ParameterLayout whole = model::ParameterLayout::ForGPT(config);
  // All random, LayerNorm gains too, at the scale of a trained model's weights.
  std::vector<float> params = Random(whole.total(), 9);
  for (float& p : params) p *= 0.3f;
  const model::ParamUnit& unit = whole.units()[model::ParameterLayout::LayerUnit(0)];
  auto x = Random(n * c, 10), dout = Random(n * c, 11);

  // Runs the block on one rank's part; returns out, dx and the whole-model gradients of
  // this rank's part (zero elsewhere).
  struct Result {
    std::vector<float> out, dx, grads;
  };
  auto run = [&](const TensorParallel& tp) {
    const model::ParameterLayout layout = model::ParameterLayout::ForGPT(config, tp.size(), tp.rank());
    const model::ParamUnit& mine = layout.units()[model::ParameterLayout::LayerUnit(0)];
    std::vector<float> local(layout.total()), local_grads(layout.total(), 0.0f);
    layout.FromGlobal(params.data(), local.data());
    const int cl = c / tp.size(), heads = config.n_head / tp.size(), hidden = 4 * c / tp.size();
    std::vector<float> acts(n * c * 4 + n * cl + n * 4 + n * 3 * cl + b * heads * 25 + n * hidden * 2);
    float* p = acts.data();
    auto take = [&p](int64_t k) { float* q = p; p += k; return q; };
    model::BlockActivations a;
    a.ln1 = take(n * c), a.ln1_mean = take(n), a.ln1_rstd = take(n), a.qkv = take(n * 3 * cl);
    a.att = take(b * heads * 25), a.atty = take(n * cl), a.residual2 = take(n * c);
    a.ln2 = take(n * c), a.ln2_mean = take(n), a.ln2_rstd = take(n);
    a.fch = take(n * hidden), a.fch_gelu = take(n * hidden), a.out = take(n * c);
    std::vector<float> scratch(n * hidden + n * 3 * cl + n * c + 25);
    model::BlockScratch s{scratch.data(), scratch.data() + n * hidden,
                          scratch.data() + n * hidden + n * 3 * cl,
                          scratch.data() + n * hidden + n * 3 * cl + n * c};
    model::BlockTensors w = model::BindBlock(layout, 0, local.data() + mine.begin);
    model::BlockTensors g = model::BindBlock(layout, 0, local_grads.data() + mine.begin);
    Result r;
    EXPECT_TRUE(model::BlockForward(config, tp, 0, b, w, x.data(), a).ok());
    r.out.assign(a.out, a.out + n * c);
    r.dx = dout;
    EXPECT_TRUE(model::BlockBackward(config, tp, 0, b, w, g, x.data(), a, s, r.dx.data()).ok());
    r.grads.assign(whole.total(), 0.0f);
    layout.ToGlobal(local_grads.data(), r.grads.data());
    return r;
  };
  Result serial = run(TensorParallel());
  std::vector<Result> parts(ranks);
  OnRanks(ranks, [&](const TensorParallel& tp) { parts[tp.rank()] = run(tp); });
  // Every rank's part of the gradient, laid into the whole buffer: split tensors fill
  // their own places; replicated ones (LayerNorms, c_proj biases) are whole on each rank.
  std::vector<float> grads(whole.total(), 0.0f);
  for (int r = 0; r < ranks; ++r) {
    ExpectNear(parts[r].out, serial.out, "out", r);
    ExpectNear(parts[r].dx, serial.dx, "dx", r);
    const model::ParameterLayout layout = model::ParameterLayout::ForGPT(config, ranks, r);
    std::vector<float> local(layout.total());
    layout.FromGlobal(parts[r].grads.data(), local.data());
    layout.ToGlobal(local.data(), grads.data());
  }
  ExpectNear(std::vector<float>(grads.begin() + unit.begin, grads.begin() + unit.end),
             std::vector<float>(serial.grads.begin() + unit.begin, serial.grads.begin() + unit.end),
             "block gradients", -1);
}

// The tied LM head's loss from vocabulary slices: V = 11, so 2 and 4 ranks pad it.
TEST_P(TensorParallelLayers, VocabParallelCrossEntropyAndEmbeddingEqualSerial) {
  const int ranks = GetParam(), n = 6, t = 3, b = 2, c = 4, vocab = 11;
  const int vocab_local = (vocab + ranks - 1) / ranks;
  auto logits = Random(n * vocab, 12), wte = Random(vocab * c, 13), wpe = Random(t * c, 14);
  auto dx = Random(n * c, 15);
  std::vector<int32_t> tokens = {0, 10, 5, 3, 7, 10}, targets = {10, 0, 4, 6, 9, 1};
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
  OnRanks(ranks, [&](const TensorParallel& tp) {
    const int first = tp.rank() * vocab_local, valid = std::max(0, std::min(vocab_local, vocab - first));
    // This rank's slice, padded with columns (rows of wte) past the vocabulary.
    std::vector<float> logits_r(n * vocab_local, 123.0f), wte_r(vocab_local * c, 0.0f);
    for (int i = 0; i < n; ++i) {
      for (int j = 0; j < valid; ++j) logits_r[i * vocab_local + j] = logits[i * vocab + first + j];
    }
    for (int j = 0; j < valid * c; ++j) wte_r[j] = wte[first * c + j];
    std::vector<float> losses_r(n), probs_r(n * vocab_local), scratch(3 * n);
    ASSERT_TRUE(VocabParallelCrossEntropyForward(tp, losses_r.data(), probs_r.data(), scratch.data(),
                                                 logits_r.data(), targets.data(), n, vocab_local,
                                                 vocab, "ce").ok());
    VocabParallelCrossEntropyBackward(tp, probs_r.data(), probs_r.data(), targets.data(), 0.5f, n,
                                      vocab_local);
    ExpectNear(losses_r, losses, "loss", tp.rank());
    std::vector<float> dlogits_r(n * valid);
    for (int i = 0; i < n; ++i) {
      for (int j = 0; j < valid; ++j) dlogits_r[i * valid + j] = probs_r[i * vocab_local + j];
      for (int j = valid; j < vocab_local; ++j) ASSERT_EQ(probs_r[i * vocab_local + j], 0.0f);
    }
    ExpectNear(dlogits_r, Columns(probs, n, vocab, first, valid), "dlogits", tp.rank());

    std::vector<float> x_r(n * c), dwte_r(vocab_local * c, 0.0f), dwpe_r(t * c, 0.0f);
    ASSERT_TRUE(VocabParallelEmbeddingForward(tp, x_r.data(), tokens.data(), wte_r.data(),
                                              wpe.data(), b, t, c, vocab_local, "emb").ok());
    VocabParallelEmbeddingBackward(tp, dwte_r.data(), dwpe_r.data(), dx.data(), tokens.data(), b, t,
                                   c, vocab_local);
    ExpectNear(x_r, x, "embedding", tp.rank());
    ExpectNear(std::vector<float>(dwte_r.begin(), dwte_r.begin() + valid * c),
               Rows(dwte, c, first, valid), "dwte", tp.rank());
    ExpectNear(dwpe_r, dwpe, "dwpe", tp.rank());
  });
}

std::string RanksName(const ::testing::TestParamInfo<int>& info) {
  return "tp" + std::to_string(info.param);
}

INSTANTIATE_TEST_SUITE_P(Ranks, TensorParallelLayers, ::testing::Values(1, 2, 4), RanksName);

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
  for (const model::ParamSpec& spec : whole.specs()) {
    const model::ParamSpec* part = model::ParameterLayout::ForGPT(config, tp, 0).Find(spec.name);
    for (int64_t i = spec.offset; i < spec.offset + spec.numel; ++i) {
      ASSERT_EQ(seen[i], part->replicated() ? tp : 1) << spec.name << " element " << i - spec.offset;
    }
  }
}

}  // namespace
}  // namespace tally::parallel
