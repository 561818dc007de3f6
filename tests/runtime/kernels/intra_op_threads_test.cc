// The CPU kernels on two intra-op threads give the bits of one (parallel.h): every kernel
// the CPU runs in blocks, once per thread count, on inputs large enough that two threads
// each take a block, in fp32 and with bf16 matmul inputs.
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "core/runtime/kernels/cpu/gemm.h"
#include "core/runtime/kernels/cpu/parallel.h"
#include "core/runtime/kernels/kernels.h"

namespace tally {
namespace {

using Outputs = std::vector<std::vector<float>>;

std::vector<float> Random(size_t n, int seed, float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

// Every blocked kernel once, its outputs in order.
Outputs RunKernels(int threads, MatmulInputs inputs) {
  cpu::SetBlasThreads(threads);
  std::unique_ptr<Kernels> k = Kernels::Create(Device::CPU(), inputs).value();
  const int b = 4, t = 64, c = 128, nh = 4, vocab = 96, n = b * t;
  Outputs out;
  auto check = [](const absl::Status& s) { ASSERT_TRUE(s.ok()) << s; };

  // LayerNorm, forward and backward.
  const std::vector<float> x = Random(size_t(n) * c, 1), w = Random(c, 2), bias = Random(c, 3);
  const std::vector<float> dy = Random(size_t(n) * c, 4);
  std::vector<float> y(size_t(n) * c), mean(n), rstd(n), dx(size_t(n) * c, 0.5f), dw(c, 0.25f),
      db(c, 0.125f);
  check(k->LayerNormForward(TypedPtr(y.data()), mean.data(), rstd.data(), x.data(), w.data(),
                            bias.data(), n, c));
  check(k->LayerNormBackward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(),
                             mean.data(), rstd.data(), n, c));
  out.insert(out.end(), {y, mean, rstd, dx, dw, db});

  // GELU.
  const std::vector<float> h = Random(size_t(n) * 4 * c, 5, 2.0f), dh = Random(h.size(), 6);
  std::vector<float> g(h.size()), dg(h.size());
  check(k->GeluForward(TypedPtr(g.data()), h.data(), int64_t(h.size())));
  check(k->GeluBackward(dg.data(), h.data(), dh.data(), int64_t(h.size())));
  out.insert(out.end(), {g, dg});

  // Attention over (sequence, head) pairs.
  const std::vector<float> qkv = Random(size_t(n) * 3 * c, 7, 0.5f), da = Random(size_t(n) * c, 8);
  std::vector<float> ya(size_t(n) * c), att(size_t(b) * nh * t * t), dqkv(qkv.size());
  std::vector<float> scratch(size_t(k->AttentionScratch(t, nh)));
  check(k->AttentionForward(ya.data(), att.data(), ConstTypedPtr(qkv.data()), b, t, c, nh));
  check(k->AttentionBackward(dqkv.data(), scratch.data(), da.data(), ConstTypedPtr(qkv.data()),
                             att.data(), b, t, c, nh));
  out.insert(out.end(), {ya, att, dqkv});

  // A linear layer's bias gradient (its matmuls are oneDNN's, which may cut them otherwise).
  std::vector<float> dbias(c, 1.0f);
  check(k->LinearBackward(nullptr, nullptr, dbias.data(), dy.data(), ConstTypedPtr(x.data()),
                          w.data(), n, c, c));
  out.push_back(dbias);

  // Element-wise and by rows.
  std::vector<float> sum = y, biased = y;
  check(k->AddInPlace(sum.data(), x.data(), int64_t(x.size())));
  check(k->AddBias(biased.data(), bias.data(), n, c));
  out.insert(out.end(), {sum, biased});

  // Embeddings: rows gathered, gradients summed by columns (tokens repeat).
  std::vector<int32_t> tokens(n);
  for (int i = 0; i < n; ++i) tokens[i] = (i * 7) % vocab;
  const std::vector<float> wte = Random(size_t(vocab) * c, 9), wpe = Random(size_t(t) * c, 10);
  std::vector<float> emb(size_t(n) * c), dwte(wte.size(), 0.0f), dwpe(wpe.size(), 0.0f);
  check(k->EmbeddingLookup(emb.data(), tokens.data(), wte.data(), 0, vocab, n, c));
  check(k->AddPositions(emb.data(), wpe.data(), n, t, 0, c));
  check(k->EmbeddingLookupBackward(dwte.data(), dy.data(), tokens.data(), 0, vocab, n, c));
  check(k->AddPositionsBackward(dwpe.data(), dy.data(), n, t, 0, c));
  out.insert(out.end(), {emb, dwte, dwpe});

  // The cross-entropy's pieces.
  const std::vector<float> logits = Random(size_t(n) * vocab, 11, 3.0f);
  std::vector<float> max(n), probs(logits.size()), row_sum(n), target(n), losses(n),
      dlogits(logits.size());
  check(k->LogitMax(max.data(), logits.data(), n, vocab, vocab));
  check(k->SoftmaxExp(probs.data(), row_sum.data(), target.data(), logits.data(), max.data(),
                      tokens.data(), 0, n, vocab, vocab));
  check(k->SoftmaxLoss(probs.data(), losses.data(), row_sum.data(), target.data(), max.data(), n,
                       vocab, vocab));
  check(k->CrossEntropyBackward(dlogits.data(), probs.data(), tokens.data(), 0, 1.0f / n, n,
                                vocab));
  out.insert(out.end(), {max, probs, row_sum, target, losses, dlogits});

  // Optimizers and conversions.
  const int64_t p = 20000;
  const std::vector<float> grads = Random(p, 12);
  std::vector<float> params = Random(p, 13), m(p, 0.0f), v(p, 0.0f), momentum(p, 0.0f);
  std::vector<float> sgd_params = params;
  check(k->AdamW(params.data(), grads.data(), DType::kF32, m.data(), v.data(), p,
                 {0.99f, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.3f, 0.8f}));
  check(k->Sgd(sgd_params.data(), grads.data(), DType::kF32, momentum.data(), p, 1e-2f, 0.9f,
               0.1f, true, 0.8f));
  std::vector<BFloat16> half(p);
  std::vector<float> widened(p), accumulated = grads, scaled = grads;
  check(k->Convert(half.data(), DType::kBF16, grads.data(), DType::kF32, p));
  check(k->Convert(widened.data(), DType::kF32, half.data(), DType::kBF16, p));
  check(k->Accumulate(accumulated.data(), DType::kF32, half.data(), DType::kBF16, p));
  check(k->Scale(scaled.data(), DType::kF32, p, 0.3f));
  out.insert(out.end(), {params, m, v, sgd_params, widened, accumulated, scaled});

  // The gradient norm's squares (a double, kept as its bits), fp32 and bf16, over 6 blocks.
  const std::vector<float> big = Random(size_t(90000), 14);
  std::vector<BFloat16> big16(big.size());
  check(k->Convert(big16.data(), DType::kBF16, big.data(), DType::kF32, int64_t(big.size())));
  for (double squares : {k->AddSquares(big.data(), DType::kF32, int64_t(big.size()), 0.5).value(),
                         k->AddSquares(big16.data(), DType::kBF16, int64_t(big.size()), 0.5).value()}) {
    std::vector<float> bits(2);
    std::memcpy(bits.data(), &squares, sizeof(squares));
    out.push_back(bits);
  }

  cpu::SetBlasThreads(1);
  return out;
}

class IntraOpThreads : public ::testing::TestWithParam<MatmulInputs> {};

TEST_P(IntraOpThreads, TwoThreadsGiveTheBitsOfOne) {
  const Outputs one = RunKernels(1, GetParam());
  const Outputs two = RunKernels(2, GetParam());
  ASSERT_EQ(one.size(), two.size());
  for (size_t i = 0; i < one.size(); ++i) {
    ASSERT_EQ(one[i].size(), two[i].size()) << "output " << i;
    EXPECT_EQ(std::memcmp(one[i].data(), two[i].data(), one[i].size() * sizeof(float)), 0)
        << "output " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(MatmulInputs, IntraOpThreads,
                         ::testing::Values(MatmulInputs::kF32, MatmulInputs::kBF16),
                         [](const ::testing::TestParamInfo<MatmulInputs>& param) {
                           return std::string(Name(param.param));
                         });

// The blocked sum of squares against a long double one: the order changes only the last
// bits.
TEST(AddSquares, BlocksOfEightLanesAgreeWithOneLongSum) {
  std::unique_ptr<Kernels> k = Kernels::Create(Device::CPU(), MatmulInputs::kF32).value();
  for (int64_t n : {0, 1, 7, 8, 9, 16384, 16385, 100003}) {
    const std::vector<float> x = Random(size_t(n), int(n) + 3, 3.0f);
    long double exact = 2.0L;
    for (float v : x) exact += (long double)v * v;
    const double got = k->AddSquares(x.data(), DType::kF32, n, 2.0).value();
    EXPECT_NEAR(got, double(exact), 1e-13 * double(exact)) << n;
  }
}

TEST(ParallelFor, CoversTheRangeOnceInBlocksOfAtLeastTheGrain) {
  cpu::SetBlasThreads(2);
  for (int64_t n : {0, 1, 7, 100, 1000}) {
    std::vector<int> hits(size_t(n), 0);
    cpu::ParallelFor(n, 50, [&](int64_t first, int64_t last) {
      EXPECT_TRUE(last - first >= 50 || (first == 0 && last == n)) << first << ".." << last;
      for (int64_t i = first; i < last; ++i) ++hits[size_t(i)];
    });
    EXPECT_EQ(hits, std::vector<int>(size_t(n), 1)) << n;
  }
  cpu::SetBlasThreads(1);
}

}  // namespace
}  // namespace tally
