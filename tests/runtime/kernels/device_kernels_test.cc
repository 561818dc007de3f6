// Kernels (core/runtime/kernels/kernels.h) on a CUDA device against Kernels on the CPU, for
// the operations the model calls through it that have no CPU kernel of their own (the
// vocabulary slices of the embedding and the softmax, positions, bias, the optimizers'
// updates, the sum of squares) and one pass through each layer: |cuda - cpu| <= atol +
// rtol·|cpu| element by element. Skipped, with the reason, without a GPU.
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "core/runtime/allocator.h"
#include "core/runtime/cuda/cuda.h"
#include "core/runtime/kernels/kernels.h"
#include "tests/runtime/kernels/random_inputs.h"

namespace tally {
namespace {

class DeviceKernels : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<int> gpus = cuda::DeviceCount();
    if (!gpus.ok()) GTEST_SKIP() << gpus.status().message();
    absl::StatusOr<std::unique_ptr<Kernels>> gpu = Kernels::Create({DeviceType::kCUDA, 0});
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    gpu_ = std::move(*gpu);
    cpu_ = Kernels::Create(Device::CPU()).value();
  }

  // A device copy of `values`, freed with the test.
  template <typename T>
  T* Up(const std::vector<T>& values) {
    auto storage = alloc_.Allocate(values.size() * sizeof(T), MemoryCategory::kOther);
    EXPECT_TRUE(storage.ok()) << storage.status();
    if (!storage.ok()) return nullptr;
    EXPECT_TRUE(gpu_->FromHost((*storage)->data(), values.data(), values.size() * sizeof(T)).ok());
    buffers_.push_back(*storage);
    return static_cast<T*>((*storage)->data());
  }

  void ExpectClose(const float* device, const std::vector<float>& want, float atol, float rtol,
                   const std::string& what) {
    std::vector<float> got(want.size());
    ASSERT_TRUE(gpu_->ToHost(got.data(), device, sizeof(float) * got.size()).ok());
    int shown = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      if (std::fabs(got[i] - want[i]) > atol + rtol * std::fabs(want[i]) && shown++ < 5) {
        ADD_FAILURE() << what << "[" << i << "]: cuda " << got[i] << ", cpu " << want[i];
      }
    }
  }

  std::unique_ptr<Kernels> cpu_, gpu_;
  MemoryLedger ledger_;
  Allocator alloc_{&ledger_, Device{DeviceType::kCUDA, 0}};
  std::vector<std::shared_ptr<Storage>> buffers_;
};

TEST_F(DeviceKernels, EmbeddingSliceAndPositions) {
  const int n = 24, c = 16, vocab = 10, period = 6, offset = 3;
  const int64_t first = 5;  // the slice [5, 15) of a vocabulary of 20
  const std::vector<int32_t> tokens = Tokens(n, 20, 1);
  const std::vector<float> wte = Random(size_t(vocab) * c, 2), wpe = Random(size_t(12) * c, 3);
  const std::vector<float> dx = Random(size_t(n) * c, 4);
  std::vector<float> x(size_t(n) * c), dwte(wte.size(), 0.0f), dwpe(wpe.size(), 0.0f);
  ASSERT_TRUE(cpu_->EmbeddingLookup(x.data(), tokens.data(), wte.data(), first, vocab, n, c).ok());
  ASSERT_TRUE(cpu_->AddPositions(x.data(), wpe.data(), n, period, offset, c).ok());
  ASSERT_TRUE(
      cpu_->EmbeddingLookupBackward(dwte.data(), dx.data(), tokens.data(), first, vocab, n, c)
          .ok());
  ASSERT_TRUE(cpu_->AddPositionsBackward(dwpe.data(), dx.data(), n, period, offset, c).ok());

  const int32_t* d_tokens = Up(tokens);
  float* d_x = Up(std::vector<float>(x.size()));
  float* d_dwte = Up(std::vector<float>(wte.size()));
  float* d_dwpe = Up(std::vector<float>(wpe.size()));
  ASSERT_TRUE(gpu_->EmbeddingLookup(d_x, d_tokens, Up(wte), first, vocab, n, c).ok());
  ASSERT_TRUE(gpu_->AddPositions(d_x, Up(wpe), n, period, offset, c).ok());
  const float* d_dx = Up(dx);
  ASSERT_TRUE(gpu_->EmbeddingLookupBackward(d_dwte, d_dx, d_tokens, first, vocab, n, c).ok());
  ASSERT_TRUE(gpu_->AddPositionsBackward(d_dwpe, d_dx, n, period, offset, c).ok());
  ExpectClose(d_x, x, 0, 0, "x");
  ExpectClose(d_dwte, dwte, 1e-6f, 1e-5f, "dwte");
  ExpectClose(d_dwpe, dwpe, 0, 0, "dwpe");  // the same additions in the same order
}

TEST_F(DeviceKernels, VocabularySliceCrossEntropy) {
  const int n = 7, vocab = 40, valid = 33;
  const int64_t first = 40;  // the second slice of a vocabulary of 73
  const std::vector<float> logits = Random(size_t(n) * vocab, 5, 2.0f);
  std::vector<int32_t> targets = Tokens(n, 73, 6);
  targets[0] = 41;  // at least one target in the slice
  std::vector<float> max(n), sum(n), target(n), probs(size_t(n) * vocab), losses(n);
  ASSERT_TRUE(cpu_->LogitMax(max.data(), logits.data(), n, vocab, valid).ok());
  ASSERT_TRUE(cpu_->SoftmaxExp(probs.data(), sum.data(), target.data(), logits.data(), max.data(),
                               targets.data(), first, n, vocab, valid)
                  .ok());
  ASSERT_TRUE(cpu_->SoftmaxLoss(probs.data(), losses.data(), sum.data(), target.data(), max.data(),
                                n, vocab, valid)
                  .ok());
  std::vector<float> dlogits(probs.size());
  ASSERT_TRUE(cpu_->CrossEntropyBackward(dlogits.data(), probs.data(), targets.data(), first, 0.25f,
                                         n, vocab)
                  .ok());

  const float* d_logits = Up(logits);
  const int32_t* d_targets = Up(targets);
  float* d_max = Up(std::vector<float>(n));
  float* d_sum = Up(std::vector<float>(n));
  float* d_target = Up(std::vector<float>(n));
  float* d_probs = Up(std::vector<float>(probs.size()));
  float* d_losses = Up(std::vector<float>(n));
  float* d_dlogits = Up(std::vector<float>(probs.size()));
  ASSERT_TRUE(gpu_->LogitMax(d_max, d_logits, n, vocab, valid).ok());
  ASSERT_TRUE(
      gpu_->SoftmaxExp(d_probs, d_sum, d_target, d_logits, d_max, d_targets, first, n, vocab, valid)
          .ok());
  ASSERT_TRUE(gpu_->SoftmaxLoss(d_probs, d_losses, d_sum, d_target, d_max, n, vocab, valid).ok());
  ASSERT_TRUE(
      gpu_->CrossEntropyBackward(d_dlogits, d_probs, d_targets, first, 0.25f, n, vocab).ok());
  ExpectClose(d_max, max, 0, 0, "max");
  ExpectClose(d_target, target, 0, 0, "target logit");
  ExpectClose(d_sum, sum, 1e-6f, 1e-5f, "sum");
  ExpectClose(d_losses, losses, 1e-5f, 1e-4f, "losses");
  ExpectClose(d_dlogits, dlogits, 1e-7f, 1e-4f, "dlogits");
}

TEST_F(DeviceKernels, BiasResidualAndOptimizerUpdates) {
  const int rows = 9, c = 13;
  const int64_t n = int64_t(rows) * c;
  std::vector<float> y = Random(size_t(n), 7), b = Random(size_t(c), 8), x = Random(size_t(n), 9);
  float* d_y = Up(y);
  ASSERT_TRUE(cpu_->AddBias(y.data(), b.data(), rows, c).ok());
  ASSERT_TRUE(cpu_->AddInPlace(y.data(), x.data(), n).ok());
  ASSERT_TRUE(gpu_->AddBias(d_y, Up(b), rows, c).ok());
  ASSERT_TRUE(gpu_->AddInPlace(d_y, Up(x), n).ok());
  ExpectClose(d_y, y, 0, 0, "y");

  std::vector<float> p = Random(size_t(n), 10), g = Random(size_t(n), 11);
  std::vector<float> m(size_t(n), 0.0f), v(size_t(n), 0.0f), momentum(size_t(n), 0.0f);
  float* d_p = Up(p);
  const float* d_g = Up(g);
  float* d_m = Up(m);
  float* d_v = Up(v);
  const Kernels::AdamWArgs args{0.999f, 0.01f, 0.9f, 0.95f, 1e-8f, 0.2236068f, 0.75f};
  for (int step = 0; step < 3; ++step) {
    ASSERT_TRUE(cpu_->AdamW(p.data(), g.data(), DType::kF32, m.data(), v.data(), n, args).ok());
    ASSERT_TRUE(gpu_->AdamW(d_p, d_g, DType::kF32, d_m, d_v, n, args).ok());
  }
  ExpectClose(d_p, p, 1e-7f, 1e-6f, "adamw params");
  ExpectClose(d_v, v, 1e-9f, 1e-6f, "adamw exp_avg_sq");
  float* d_momentum = Up(momentum);
  for (int step = 0; step < 2; ++step) {
    ASSERT_TRUE(
        cpu_->Sgd(p.data(), g.data(), DType::kF32, momentum.data(), n, 0.1f, 0.9f, 0.01f, step == 0,
                  0.75f).ok());
    ASSERT_TRUE(gpu_->Sgd(d_p, d_g, DType::kF32, d_momentum, n, 0.1f, 0.9f, 0.01f, step == 0,
                          0.75f).ok());
  }
  ExpectClose(d_p, p, 1e-6f, 1e-6f, "sgd params");
  ASSERT_TRUE(cpu_->Scale(p.data(), n, 0.5f).ok());
  ASSERT_TRUE(gpu_->Scale(d_p, n, 0.5f).ok());
  ExpectClose(d_p, p, 1e-6f, 1e-6f, "scaled");
}

// Mixed precision's kernels round exactly as the CPU's BFloat16 does, bit for bit.
TEST_F(DeviceKernels, Bf16ConversionsAndGradientsMatchTheCpu) {
  const int64_t n = 4099;
  const std::vector<float> x = Random(size_t(n), 20), y = Random(size_t(n), 21);
  std::vector<BFloat16> narrow(static_cast<size_t>(n)), back_from_gpu(static_cast<size_t>(n));
  ASSERT_TRUE(cpu_->Convert(narrow.data(), DType::kBF16, x.data(), DType::kF32, n).ok());
  float* d_x = Up(x);
  auto d_narrow = alloc_.Allocate(size_t(n) * 2, MemoryCategory::kOther).value();
  ASSERT_TRUE(gpu_->Convert(d_narrow->data(), DType::kBF16, d_x, DType::kF32, n).ok());
  ASSERT_TRUE(cpu_->Accumulate(narrow.data(), DType::kBF16, y.data(), DType::kF32, n).ok());
  ASSERT_TRUE(gpu_->Accumulate(d_narrow->data(), DType::kBF16, Up(y), DType::kF32, n).ok());
  ASSERT_TRUE(gpu_->ToHost(back_from_gpu.data(), d_narrow->data(), size_t(n) * 2).ok());
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(back_from_gpu[i].bits, narrow[i].bits) << i;
  const double cpu = cpu_->AddSquares(narrow.data(), DType::kBF16, n, 0.0).value();
  absl::StatusOr<double> gpu = gpu_->AddSquares(d_narrow->data(), DType::kBF16, n, 0.0);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  EXPECT_NEAR(*gpu, cpu, 1e-9 * cpu);
}

TEST_F(DeviceKernels, SumOfSquaresInDouble) {
  const std::vector<float> x = Random(1 << 20, 12);  // more elements than one pass of blocks
  const double cpu = cpu_->AddSquares(x.data(), int64_t(x.size()), 2.0).value();
  absl::StatusOr<double> gpu = gpu_->AddSquares(Up(x), int64_t(x.size()), 2.0);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  EXPECT_NEAR(*gpu, cpu, 1e-9 * cpu);
}

TEST_F(DeviceKernels, LayersThroughTheInterface) {
  const int b = 2, t = 16, c = 32, nh = 4, n = b * t;
  const std::vector<float> x = Random(size_t(n) * c, 13), w = Random(size_t(3 * c) * c, 14, 0.1f);
  const std::vector<float> bias = Random(size_t(3 * c), 15);
  std::vector<float> qkv(size_t(n) * 3 * c), y(size_t(n) * c), att(size_t(b) * nh * t * t);
  ASSERT_TRUE(cpu_->LinearForward(qkv.data(), x.data(), w.data(), bias.data(), n, c, 3 * c).ok());
  ASSERT_TRUE(cpu_->AttentionForward(y.data(), att.data(), qkv.data(), b, t, c, nh).ok());
  float* d_qkv = Up(std::vector<float>(qkv.size()));
  float* d_y = Up(std::vector<float>(y.size()));
  float* d_att = Up(std::vector<float>(att.size()));
  ASSERT_TRUE(gpu_->LinearForward(d_qkv, Up(x), Up(w), Up(bias), n, c, 3 * c).ok());
  ASSERT_TRUE(gpu_->AttentionForward(d_y, d_att, d_qkv, b, t, c, nh).ok());
  ExpectClose(d_qkv, qkv, 1e-5f, 1e-4f, "qkv");
  ExpectClose(d_y, y, 1e-5f, 1e-4f, "attention y");
  EXPECT_EQ(gpu_->AttentionScratch(t, nh), int64_t(nh) * t * t);
}

// bf16 matmul operands (cuBLAS's bf16 GEMM against oneDNN's): both sum the same rounded
// products in fp32, so they agree to fp32 summation, not just to bf16.
TEST_F(DeviceKernels, BF16MatmulsMatchTheCpu) {
  absl::StatusOr<std::unique_ptr<Kernels>> gpu16 =
      Kernels::Create({DeviceType::kCUDA, 0}, MatmulInputs::kBF16);
  ASSERT_TRUE(gpu16.ok()) << gpu16.status();
  std::unique_ptr<Kernels> cpu16 = Kernels::Create(Device::CPU(), MatmulInputs::kBF16).value();
  const int n = 24, c = 32, oc = 40, b = 2, t = 12, nh = 2;
  const std::vector<float> x = Random(size_t(n) * c, 30), w = Random(size_t(oc) * c, 31),
                           bias = Random(size_t(oc), 32), dy = Random(size_t(n) * oc, 33);
  std::vector<float> y(size_t(n) * oc), dx(size_t(n) * c), dw(w.size(), 0.0f), db(oc, 0.0f);
  ASSERT_TRUE(cpu16->LinearForward(y.data(), x.data(), w.data(), bias.data(), n, c, oc).ok());
  ASSERT_TRUE(
      cpu16->LinearBackward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), n, c, oc)
          .ok());
  float* d_y = Up(std::vector<float>(y.size()));
  float* d_dx = Up(std::vector<float>(dx.size()));
  float* d_dw = Up(std::vector<float>(dw.size()));
  float* d_db = Up(std::vector<float>(db.size()));
  const float* d_x = Up(x);
  const float* d_w = Up(w);
  ASSERT_TRUE((*gpu16)->LinearForward(d_y, d_x, d_w, Up(bias), n, c, oc).ok());
  ASSERT_TRUE((*gpu16)->LinearBackward(d_dx, d_dw, d_db, Up(dy), d_x, d_w, n, c, oc).ok());
  ExpectClose(d_y, y, 1e-5f, 1e-5f, "bf16 linear y");
  ExpectClose(d_dx, dx, 1e-5f, 1e-5f, "bf16 linear dx");
  ExpectClose(d_dw, dw, 1e-5f, 1e-5f, "bf16 linear dw");

  const int cc = 16;
  const std::vector<float> qkv = Random(size_t(b) * t * 3 * cc, 34);
  std::vector<float> ya(size_t(b) * t * cc), att(size_t(b) * nh * t * t);
  ASSERT_TRUE(cpu16->AttentionForward(ya.data(), att.data(), qkv.data(), b, t, cc, nh).ok());
  float* d_ya = Up(std::vector<float>(ya.size()));
  float* d_att = Up(std::vector<float>(att.size()));
  ASSERT_TRUE((*gpu16)->AttentionForward(d_ya, d_att, Up(qkv), b, t, cc, nh).ok());
  ExpectClose(d_att, att, 1e-5f, 1e-4f, "bf16 attention probabilities");
  // P is rounded to bf16 on its way into P·V: a P that differs in its last fp32 bit may
  // round to the neighbouring bf16, so Y agrees to bf16's resolution.
  ExpectClose(d_ya, ya, 1e-2f, 1e-2f, "bf16 attention y");
}

// The activations a bf16 matmul reads, kept in bf16 on the device: LayerNorm and GELU
// write the fp32 result rounded (to the CPU's bf16 values, up to a neighbouring bf16
// where the fp32 results differ in their last bit), and the linear layer and attention
// reading them give, bit for bit, what they give reading the fp32 values they round.
TEST_F(DeviceKernels, Bf16ActivationsMatchTheCpuAndTheRoundedFp32Inputs) {
  absl::StatusOr<std::unique_ptr<Kernels>> made =
      Kernels::Create({DeviceType::kCUDA, 0}, MatmulInputs::kBF16);
  ASSERT_TRUE(made.ok()) << made.status();
  Kernels& gpu16 = **made;
  ASSERT_EQ(gpu16.activation_operand_type(), DType::kBF16);
  std::unique_ptr<Kernels> cpu16 = Kernels::Create(Device::CPU(), MatmulInputs::kBF16).value();
  const int n = 24, c = 32, oc = 40;
  const std::vector<float> x = Random(size_t(n) * c, 40), w = Random(size_t(c), 41),
                           b = Random(size_t(c), 42), lw = Random(size_t(oc) * c, 43),
                           dy = Random(size_t(n) * oc, 44);
  // LayerNorm's fp32 and bf16 outputs on the device; the CPU's bf16 output.
  std::vector<BFloat16> cpu_ln(size_t(n) * c), gpu_ln(cpu_ln.size());
  std::vector<float> mean(n), rstd(n);
  ASSERT_TRUE(cpu16->LayerNormForward({cpu_ln.data(), DType::kBF16}, mean.data(), rstd.data(),
                                      x.data(), w.data(), b.data(), n, c).ok());
  float* d_mean = Up(std::vector<float>(n));
  float* d_rstd = Up(std::vector<float>(n));
  float* d_ln32 = Up(std::vector<float>(size_t(n) * c));
  BFloat16* d_ln16 = Up(std::vector<BFloat16>(size_t(n) * c));
  const float *d_x = Up(x), *d_w = Up(w), *d_b = Up(b);
  ASSERT_TRUE(gpu16.LayerNormForward(d_ln32, d_mean, d_rstd, d_x, d_w, d_b, n, c).ok());
  ASSERT_TRUE(gpu16.LayerNormForward({d_ln16, DType::kBF16}, d_mean, d_rstd, d_x, d_w, d_b, n, c)
                  .ok());
  ASSERT_TRUE(gpu16.ToHost(gpu_ln.data(), d_ln16, sizeof(BFloat16) * gpu_ln.size()).ok());
  for (size_t i = 0; i < gpu_ln.size(); ++i) {
    ASSERT_LE(std::abs(int(gpu_ln[i].bits) - int(cpu_ln[i].bits)), 1) << "layernorm bf16 " << i;
  }
  // The linear layer over the fp32 output and over the kept bf16 one: the same products.
  float* y[2];
  float* dw[2];
  const float* d_lw = Up(lw);
  const float* d_dy = Up(dy);
  for (int kept = 0; kept < 2; ++kept) {
    const ConstTypedPtr in = kept ? ConstTypedPtr(d_ln16, DType::kBF16) : ConstTypedPtr(d_ln32);
    y[kept] = Up(std::vector<float>(size_t(n) * oc));
    dw[kept] = Up(std::vector<float>(lw.size()));
    ASSERT_TRUE(gpu16.LinearForward(y[kept], in, d_lw, nullptr, n, c, oc).ok());
    ASSERT_TRUE(gpu16.LinearBackward(nullptr, dw[kept], nullptr, d_dy, in, d_lw, n, c, oc).ok());
  }
  std::vector<float> host[2];
  for (float** pair : {y, dw}) {
    const size_t count = pair == y ? size_t(n) * oc : lw.size();
    for (int kept = 0; kept < 2; ++kept) {
      host[kept].resize(count);
      ASSERT_TRUE(gpu16.ToHost(host[kept].data(), pair[kept], sizeof(float) * count).ok());
    }
    EXPECT_EQ(host[0], host[1]) << (pair == y ? "linear y" : "linear dw");
  }
  // GELU's bf16 output is its fp32 output rounded, and a bf16 matmul input of the fp32
  // kernels is refused.
  float* d_g32 = Up(std::vector<float>(size_t(n) * c));
  BFloat16* d_g16 = Up(std::vector<BFloat16>(size_t(n) * c));
  ASSERT_TRUE(gpu16.GeluForward(d_g32, d_x, int64_t(n) * c).ok());
  ASSERT_TRUE(gpu16.GeluForward({d_g16, DType::kBF16}, d_x, int64_t(n) * c).ok());
  std::vector<float> g32(size_t(n) * c);
  std::vector<BFloat16> g16(g32.size());
  ASSERT_TRUE(gpu16.ToHost(g32.data(), d_g32, sizeof(float) * g32.size()).ok());
  ASSERT_TRUE(gpu16.ToHost(g16.data(), d_g16, sizeof(BFloat16) * g16.size()).ok());
  for (size_t i = 0; i < g16.size(); ++i) {
    ASSERT_EQ(g16[i].bits, BFloat16::FromFloat(g32[i]).bits) << "gelu bf16 " << i;
  }
  EXPECT_FALSE(gpu_->LinearForward(y[0], {d_ln16, DType::kBF16}, d_lw, nullptr, n, c, oc).ok());
}

}  // namespace
}  // namespace tally
