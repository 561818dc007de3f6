// Every CUDA kernel against its CPU kernel as the reference, forward and backward, on
// random inputs: |cuda - cpu| <= atol + rtol·|cpu| element by element (fp32, TF32 off).
// Without a GPU (or in a build without CUDA) each test is skipped with the reason, and
// the one test that runs says that the lack of a GPU is a clear error.
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "core/runtime/allocator.h"
#include "core/runtime/cuda/cuda.h"
#include "core/runtime/kernels/cpu/attention.h"
#include "core/runtime/kernels/cpu/block_attention.h"
#include "core/runtime/kernels/cpu/cross_entropy.h"
#include "core/runtime/kernels/cpu/embedding.h"
#include "core/runtime/kernels/cpu/gelu.h"
#include "core/runtime/kernels/cpu/layernorm.h"
#include "core/runtime/kernels/cpu/linear.h"
#include "core/runtime/kernels/cuda/kernels.h"
#include "core/runtime/memory_ledger.h"
#include "tests/runtime/kernels/random_inputs.h"

namespace tally {
namespace {

TEST(Cuda, NoGpuIsAClearError) {
  absl::StatusOr<int> gpus = cuda::DeviceCount();
  if (gpus.ok()) {
    EXPECT_GT(*gpus, 0);
    absl::StatusOr<std::string> name = cuda::DeviceName(0);
    ASSERT_TRUE(name.ok()) << name.status();
    EXPECT_TRUE(absl::StrContains(*name, "sm_")) << *name;
  } else {
    EXPECT_TRUE(absl::StrContains(gpus.status().message(), "[cuda] ")) << gpus.status();
    EXPECT_TRUE(absl::StrContains(gpus.status().message(), "no GPU") ||
                absl::StrContains(gpus.status().message(), "no CUDA"))
        << gpus.status();
  }
}

class CudaKernels : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<int> gpus = cuda::DeviceCount();
    if (!gpus.ok()) GTEST_SKIP() << gpus.status().message();
    ASSERT_TRUE(cuda::SetDevice(0).ok());
    absl::StatusOr<std::unique_ptr<cuda::Blas>> blas = cuda::Blas::Create(MatmulInputs::kF32);
    ASSERT_TRUE(blas.ok()) << blas.status();
    blas_ = std::move(*blas);
  }

  // Device memory holding `values` (charged to the test's ledger, category other).
  template <typename T>
  T* Up(const std::vector<T>& values) {
    absl::StatusOr<std::shared_ptr<Storage>> s =
        alloc_.Allocate(values.size() * sizeof(T), MemoryCategory::kOther);
    EXPECT_TRUE(s.ok()) << s.status();
    if (!s.ok()) return nullptr;
    EXPECT_TRUE(cuda::CopyToDevice((*s)->data(), values.data(), values.size() * sizeof(T)).ok());
    buffers_.push_back(*s);
    return static_cast<T*>((*s)->data());
  }
  std::vector<float> Down(const float* device, size_t n) {
    std::vector<float> host(n);
    absl::Status s = cuda::CopyToHost(host.data(), device, n * sizeof(float));
    EXPECT_TRUE(s.ok()) << s;
    return host;
  }
  // Compares device buffer `got` with the CPU's `want`.
  void ExpectClose(const float* got, const std::vector<float>& want, float atol, float rtol,
                   const std::string& what) {
    std::vector<float> host = Down(got, want.size());
    int bad = 0;
    for (size_t i = 0; i < want.size() && bad < 5; ++i) {
      if (std::fabs(host[i] - want[i]) > atol + rtol * std::fabs(want[i])) {
        ADD_FAILURE() << what << "[" << i << "]: cuda " << host[i] << ", cpu " << want[i];
        ++bad;
      }
    }
  }

  MemoryLedger ledger_;
  Allocator alloc_{&ledger_, Device{DeviceType::kCUDA, 0}};
  std::vector<std::shared_ptr<Storage>> buffers_;
  std::unique_ptr<cuda::Blas> blas_;
};

TEST_F(CudaKernels, DeviceMemoryIsChargedToTheLedger) {
  std::vector<float> values = Random(1000, 1);
  const float* d = Up(values);
  EXPECT_EQ(ledger_.current(MemoryCategory::kOther), int64_t(4000));
  EXPECT_EQ(Down(d, values.size()), values);
  buffers_.clear();
  EXPECT_EQ(ledger_.current(MemoryCategory::kOther), 0);
}

TEST_F(CudaKernels, Linear) {
  const int n = 37, c = 64, oc = 96;
  std::vector<float> x = Random(n * c, 1), w = Random(oc * c, 2, 0.1f), b = Random(oc, 3);
  std::vector<float> y(n * oc);
  cpu::LinearForward(y.data(), x.data(), w.data(), b.data(), n, c, oc);
  float* dy_ = Up(std::vector<float>(n * oc));
  ASSERT_TRUE(cuda::LinearForward(*blas_, dy_, Up(x), Up(w), Up(b), n, c, oc).ok());
  ExpectClose(dy_, y, 1e-4f, 1e-4f, "y");

  std::vector<float> g = Random(n * oc, 4), dx = Random(n * c, 5), dw = Random(oc * c, 6),
                     db = Random(oc, 7);
  float *ddx = Up(dx), *ddw = Up(dw), *ddb = Up(db);
  cpu::LinearBackward(dx.data(), dw.data(), db.data(), g.data(), x.data(), w.data(), n, c, oc,
                      /*accumulate_dx=*/true);
  ASSERT_TRUE(cuda::LinearBackward(*blas_, ddx, ddw, ddb, Up(g), Up(x), Up(w), n, c, oc, true).ok());
  ExpectClose(ddx, dx, 1e-4f, 1e-4f, "dx");
  ExpectClose(ddw, dw, 1e-4f, 1e-4f, "dw");
  ExpectClose(ddb, db, 1e-4f, 1e-4f, "db");
}

TEST_F(CudaKernels, Attention) {
  const int b = 2, t = 17, c = 32, nh = 4;
  std::vector<float> qkv = Random(b * t * 3 * c, 1);
  std::vector<float> y(b * t * c), att(b * nh * t * t);
  cpu::AttentionForward(y.data(), att.data(), qkv.data(), b, t, c, nh);
  float* d_qkv = Up(qkv);
  float *dy_ = Up(std::vector<float>(y.size())), *datt = Up(std::vector<float>(att.size()));
  ASSERT_TRUE(cuda::AttentionForward(*blas_, dy_, datt, d_qkv, b, t, c, nh).ok());
  ExpectClose(datt, att, 1e-5f, 1e-4f, "att");
  ExpectClose(dy_, y, 1e-5f, 1e-4f, "y");

  std::vector<float> g = Random(b * t * c, 2), dqkv(qkv.size()), scratch(t * t);
  cpu::AttentionBackward(dqkv.data(), scratch.data(), g.data(), qkv.data(), att.data(), b, t, c, nh);
  float* d_dqkv = Up(std::vector<float>(qkv.size()));
  float* d_scratch = Up(std::vector<float>(size_t(nh) * t * t));
  ASSERT_TRUE(cuda::AttentionBackward(*blas_, d_dqkv, d_scratch, Up(g), d_qkv, datt, b, t, c, nh).ok());
  ExpectClose(d_dqkv, dqkv, 1e-4f, 1e-3f, "dqkv");
}

// Context parallelism's block kernels: the queries of one piece against three key pieces
// (before, the same, after: the last masked whole), merged in order, then backward into dQ
// and each piece's dK, dV; O, lse, D and every gradient within atol + rtol·|cpu|.
TEST_F(CudaKernels, BlockAttention) {
  const int b = 2, c = 32, nh = 4, piece = 8, s = 3 * piece;
  const int64_t batch = int64_t(s) * c;  // (b, s, c) tensors; the queries are rows 8..15
  std::vector<float> q = Random(b * s * c, 1), k = Random(b * s * c, 2), v = Random(b * s * c, 3);
  std::vector<float> dout = Random(b * s * c, 4);
  std::vector<float> o(b * s * c), lse(b * nh * piece), delta(b * nh * piece);
  std::vector<float> dq(b * s * c), dk(b * s * c), dv(b * s * c);
  float *d_q = Up(q), *d_k = Up(k), *d_v = Up(v), *d_dout = Up(dout);
  float *d_o = Up(o), *d_lse = Up(lse), *d_delta = Up(delta);
  float *d_dq = Up(dq), *d_dk = Up(dk), *d_dv = Up(dv);
  auto rows = [&](float* data, int from) { return cpu::Rows<float>{data + from * c, batch, c}; };
  auto in = [&](const float* data, int from) {
    return cpu::Rows<const float>{data + from * c, batch, c};
  };
  cpu::BlockAttentionStart(rows(o.data(), piece), lse.data(), b, piece, c, nh);
  ASSERT_TRUE(cuda::BlockAttentionStart(rows(d_o, piece), d_lse, b, piece, c, nh).ok());
  for (int key = 0; key < 3; ++key) {
    const cpu::BlockPositions at{piece, piece, key * piece, piece};
    cpu::BlockAttentionForward(rows(o.data(), piece), lse.data(), in(q.data(), piece),
                               in(k.data(), key * piece), in(v.data(), key * piece), b, c, nh, at);
    ASSERT_TRUE(cuda::BlockAttentionForward(rows(d_o, piece), d_lse, in(d_q, piece),
                                            in(d_k, key * piece), in(d_v, key * piece), b, c, nh,
                                            at)
                    .ok());
  }
  ExpectClose(d_o, o, 1e-5f, 1e-4f, "o");
  ExpectClose(d_lse, lse, 1e-5f, 1e-5f, "lse");
  cpu::AttentionDelta(delta.data(), in(dout.data(), piece), in(o.data(), piece), b, piece, c, nh);
  ASSERT_TRUE(
      cuda::AttentionDelta(d_delta, in(d_dout, piece), in(d_o, piece), b, piece, c, nh).ok());
  ExpectClose(d_delta, delta, 1e-5f, 1e-4f, "delta");
  for (int key = 0; key < 3; ++key) {
    const cpu::BlockPositions at{piece, piece, key * piece, piece};
    cpu::BlockAttentionBackward(rows(dq.data(), piece), rows(dk.data(), key * piece),
                                rows(dv.data(), key * piece), in(q.data(), piece),
                                in(k.data(), key * piece), in(v.data(), key * piece),
                                in(dout.data(), piece), lse.data(), delta.data(), b, c, nh, at);
    ASSERT_TRUE(cuda::BlockAttentionBackward(rows(d_dq, piece), rows(d_dk, key * piece),
                                             rows(d_dv, key * piece), in(d_q, piece),
                                             in(d_k, key * piece), in(d_v, key * piece),
                                             in(d_dout, piece), d_lse, d_delta, b, c, nh, at)
                    .ok());
  }
  ExpectClose(d_dq, dq, 1e-4f, 1e-3f, "dq");
  ExpectClose(d_dk, dk, 1e-4f, 1e-3f, "dk");
  ExpectClose(d_dv, dv, 1e-4f, 1e-3f, "dv");
}

TEST_F(CudaKernels, Embedding) {
  const int b = 3, t = 11, c = 24, v = 50;
  std::vector<int32_t> tokens = Tokens(b * t, v, 1);
  std::vector<float> wte = Random(v * c, 2), wpe = Random(t * c, 3), x(b * t * c);
  cpu::EmbeddingForward(x.data(), tokens.data(), wte.data(), wpe.data(), b, t, c);
  // The whole vocabulary is the slice from 0; positions repeat every t rows.
  const int64_t n = int64_t(b) * t;
  int32_t* d_tokens = Up(tokens);
  float* dx_ = Up(std::vector<float>(x.size()));
  ASSERT_TRUE(cuda::EmbeddingLookup(dx_, d_tokens, Up(wte), /*first=*/0, v, n, c).ok());
  ASSERT_TRUE(cuda::AddPositions(dx_, Up(wpe), n, /*period=*/t, /*offset=*/0, c).ok());
  ExpectClose(dx_, x, 0, 0, "x");

  std::vector<float> g = Random(x.size(), 4), dwte = Random(wte.size(), 5), dwpe = Random(wpe.size(), 6);
  float *d_dwte = Up(dwte), *d_dwpe = Up(dwpe);
  cpu::EmbeddingBackward(dwte.data(), dwpe.data(), g.data(), tokens.data(), b, t, c);
  const float* d_g = Up(g);
  ASSERT_TRUE(cuda::EmbeddingLookupBackward(d_dwte, d_g, d_tokens, /*first=*/0, v, n, c).ok());
  ASSERT_TRUE(cuda::AddPositionsBackward(d_dwpe, d_g, n, /*period=*/t, /*offset=*/0, c).ok());
  ExpectClose(d_dwte, dwte, 1e-5f, 1e-5f, "dwte");
  ExpectClose(d_dwpe, dwpe, 1e-5f, 1e-5f, "dwpe");
}

TEST_F(CudaKernels, LayerNorm) {
  const int n = 29, c = 300;  // c: not a multiple of the block
  std::vector<float> x = Random(n * c, 1, 2.0f), w = Random(c, 2), b = Random(c, 3);
  std::vector<float> y(n * c), mean(n), rstd(n);
  cpu::LayerNormForward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), n, c);
  float *dy_ = Up(std::vector<float>(y.size())), *dmean = Up(std::vector<float>(n)),
        *drstd = Up(std::vector<float>(n));
  float *d_x = Up(x), *d_w = Up(w);
  ASSERT_TRUE(cuda::LayerNormForward(dy_, dmean, drstd, d_x, d_w, Up(b), n, c).ok());
  ExpectClose(dy_, y, 1e-5f, 1e-4f, "y");
  ExpectClose(dmean, mean, 1e-5f, 1e-4f, "mean");
  ExpectClose(drstd, rstd, 1e-5f, 1e-4f, "rstd");

  std::vector<float> g = Random(y.size(), 4), dx = Random(x.size(), 5), dw = Random(c, 6),
                     db = Random(c, 7);
  float *d_dx = Up(dx), *d_dw = Up(dw), *d_db = Up(db);
  cpu::LayerNormBackward(dx.data(), dw.data(), db.data(), g.data(), x.data(), w.data(), mean.data(),
                         rstd.data(), n, c);
  ASSERT_TRUE(cuda::LayerNormBackward(d_dx, d_dw, d_db, Up(g), d_x, d_w, dmean, drstd, n, c).ok());
  ExpectClose(d_dx, dx, 1e-4f, 1e-4f, "dx");
  ExpectClose(d_dw, dw, 1e-4f, 1e-4f, "dw");
  ExpectClose(d_db, db, 1e-4f, 1e-4f, "db");
}

TEST_F(CudaKernels, Gelu) {
  const int64_t n = 10007;
  std::vector<float> x = Random(n, 1, 3.0f), y(n), g = Random(n, 2), dx(n);
  cpu::GeluForward(y.data(), x.data(), n);
  cpu::GeluBackward(dx.data(), x.data(), g.data(), n);
  float *d_x = Up(x), *dy_ = Up(std::vector<float>(n)), *d_dx = Up(std::vector<float>(n));
  ASSERT_TRUE(cuda::GeluForward(dy_, d_x, n).ok());
  ASSERT_TRUE(cuda::GeluBackward(d_dx, d_x, Up(g), n).ok());
  ExpectClose(dy_, y, 1e-5f, 1e-4f, "y");
  ExpectClose(d_dx, dx, 1e-5f, 1e-4f, "dx");
}

TEST_F(CudaKernels, CrossEntropy) {
  const int n = 23, v = 257;
  std::vector<float> logits = Random(n * v, 1, 3.0f), losses(n), probs(n * v), dlogits(n * v);
  std::vector<int32_t> targets = Tokens(n, v, 2);
  cpu::CrossEntropyForward(losses.data(), probs.data(), logits.data(), targets.data(), n, v);
  cpu::CrossEntropyBackward(dlogits.data(), probs.data(), targets.data(), 0.5f, n, v);
  // The three passes over the whole vocabulary (one slice, from 0, all of it valid).
  float *d_losses = Up(std::vector<float>(n)), *d_probs = Up(std::vector<float>(n * v));
  float *d_max = Up(std::vector<float>(n)), *d_sum = Up(std::vector<float>(n));
  float* d_target = Up(std::vector<float>(n));
  int32_t* d_targets = Up(targets);
  const float* d_logits = Up(logits);
  ASSERT_TRUE(cuda::LogitMax(d_max, d_logits, n, v, v).ok());
  ASSERT_TRUE(
      cuda::SoftmaxExp(d_probs, d_sum, d_target, d_logits, d_max, d_targets, 0, n, v, v).ok());
  ASSERT_TRUE(cuda::SoftmaxLoss(d_probs, d_losses, d_sum, d_target, d_max, n, v, v).ok());
  float* d_dlogits = Up(std::vector<float>(n * v));
  ASSERT_TRUE(
      cuda::CrossEntropyBackward(d_dlogits, d_probs, d_targets, /*first=*/0, 0.5f, n, v).ok());
  ExpectClose(d_losses, losses, 1e-5f, 1e-4f, "losses");
  ExpectClose(d_probs, probs, 1e-6f, 1e-4f, "probs");
  ExpectClose(d_dlogits, dlogits, 1e-6f, 1e-4f, "dlogits");
}

TEST_F(CudaKernels, AddAndAdamW) {
  const int64_t n = 5001;
  std::vector<float> a = Random(n, 1), b = Random(n, 2), sum(n);
  for (int64_t i = 0; i < n; ++i) sum[i] = a[i] + b[i];
  float* d_a = Up(a);
  ASSERT_TRUE(cuda::Add(d_a, d_a, Up(b), n).ok());  // in place, as the residual stream
  ExpectClose(d_a, sum, 0, 0, "a + b");

  // One update, against the same formula on the CPU (core/optim/optimizer.cc's order).
  std::vector<float> p = Random(n, 3), g = Random(n, 4), m = Random(n, 5, 0.1f), v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = std::fabs(Random(1, uint32_t(i))[0]) * 0.01f;
  float *d_p = Up(p), *d_m = Up(m), *d_v = Up(v);
  const float keep = 0.999f, step_size = 1e-3f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, bias2 = 0.3f;
  for (int64_t i = 0; i < n; ++i) {
    const float w = p[i] * keep;
    m[i] = m[i] + (1.0f - b1) * (g[i] - m[i]);
    v[i] = v[i] * b2 + (1.0f - b2) * g[i] * g[i];
    p[i] = w - step_size * (m[i] / (std::sqrt(v[i]) / bias2 + eps));
  }
  ASSERT_TRUE(
      cuda::AdamWStep(d_p, Up(g), d_m, d_v, n, keep, step_size, b1, b2, eps, bias2, 1.0f).ok());
  ExpectClose(d_p, p, 1e-6f, 1e-5f, "params");
  ExpectClose(d_m, m, 1e-7f, 1e-6f, "m");
  ExpectClose(d_v, v, 1e-7f, 1e-6f, "v");
}

}  // namespace
}  // namespace tally
