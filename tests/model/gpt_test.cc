// The whole model: shapes, initial loss, and every parameter tensor's gradient against
// central differences on a tiny config.
#include "core/model/gpt.h"

#include <cmath>
#include <cstring>
#include <string>
#include <random>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace tally::model {
namespace {

GPTConfig Tiny() {
  GPTConfig c;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 8;
  c.seq_len = 5;
  c.vocab_size = 11;
  return c;
}

TEST(GPTConfig, ValidatesAndCounts) {
  GPTConfig c;
  EXPECT_TRUE(c.Validate().ok());
  EXPECT_EQ(c.NumParams(), 256 * 256 + 128 * 256 + 4 * (12 * 256 * 256 + 13 * 256) + 2 * 256);
  c.n_head = 3;
  EXPECT_EQ(c.Validate().message(), "[config] n_embd (256) must be divisible by n_head (3)");
  c.n_head = 4;
  c.n_layer = 0;
  EXPECT_FALSE(c.Validate().ok());
  // The largest vocabulary with a wide model: the count is summed in double, so it cannot
  // wrap below the ceiling (an int sum of vocab_size + seq_len would).
  GPTConfig huge;
  huge.vocab_size = 2147483647;
  huge.n_embd = 1 << 20;
  huge.n_head = 1;
  EXPECT_TRUE(absl::StrContains(huge.Validate().message(), "tally counts at most")) << huge.Validate();
}

TEST(ParameterLayout, NamesOffsetsAndLayerRanges) {
  GPTConfig c = Tiny();
  ParameterLayout layout = ParameterLayout::ForGPT(c);
  EXPECT_EQ(layout.total(), c.NumParams());
  EXPECT_EQ(layout.specs().front().name, "wte.weight");
  EXPECT_EQ(layout.Find("h.1.attn.c_attn.weight")->shape, (Shape{24, 8}));
  EXPECT_TRUE(layout.Find("h.0.mlp.c_fc.weight")->decay);
  EXPECT_FALSE(layout.Find("h.0.mlp.c_fc.bias")->decay);
  // Units: embeddings, h.0, h.1, ln_f, tiling the buffer in order.
  ASSERT_EQ(layout.units().size(), size_t(c.n_layer + 2));
  const ParamUnit& h1 = layout.units()[layout.layer_unit(1)];
  EXPECT_EQ(h1.name, "h.1");
  EXPECT_EQ(h1.count(), 12 * 64 + 13 * 8);
  EXPECT_EQ(h1.begin, layout.Find("h.1.ln_1.weight")->offset);
  EXPECT_EQ(layout.units().front().begin, 0);
  EXPECT_EQ(layout.units()[ParameterLayout::kEmbeddings].end, layout.Find("h.0.ln_1.weight")->offset);
  for (size_t u = 1; u < layout.units().size(); ++u) {
    EXPECT_EQ(layout.units()[u].begin, layout.units()[u - 1].end);
  }
  EXPECT_EQ(layout.units().back().end, layout.total());
}

TEST(GPT, InitialLossIsNearLogVocab) {
  GPTConfig c;
  c.n_layer = 2;
  c.seq_len = 16;
  MemoryLedger ledger;
  Allocator alloc(&ledger);
  auto gpt = GPT::Create(c, alloc, 1).value();
  std::vector<int32_t> tokens(2 * 16), targets(2 * 16);
  for (size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = int32_t(i * 37 % 256);
    targets[i] = int32_t(i * 91 % 256);
  }
  float loss = gpt->Forward(tokens.data(), targets.data(), 2).value();
  EXPECT_NEAR(loss, std::log(256.0f), 0.1f);
  EXPECT_GT(ledger.current(MemoryCategory::kActivations), 0);
  EXPECT_EQ(ledger.current(MemoryCategory::kParams), 4 * c.NumParams());
}

// Under mixed precision the activations the matmuls read (both LayerNorm outputs, qkv,
// the attention output and the GELU output of every layer, and ln_f's output) are kept
// in bf16: 2 bytes fewer each, and nothing else changes size.
TEST(GPT, Bf16MatmulsKeepTheirInputActivationsInHalfTheBytes) {
  GPTConfig c;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_embd = 32;
  c.seq_len = 16;
  const int b = 3;
  const int64_t n = int64_t(b) * c.seq_len;
  int64_t bytes[2];
  for (MatmulInputs inputs : {MatmulInputs::kF32, MatmulInputs::kBF16}) {
    MemoryLedger ledger;
    Allocator alloc(&ledger);
    auto gpt = GPT::Create(c, alloc, 1).value();
    ASSERT_TRUE(gpt->UseKernels(Kernels::Create(Device::CPU(), inputs).value()).ok());
    GPT::Activations a = gpt->NewActivations(b, /*whole=*/true).value();
    EXPECT_EQ(a.operands.dtype(), inputs == MatmulInputs::kBF16 ? DType::kBF16 : DType::kF32);
    EXPECT_EQ(a.blocks[1].qkv.type, a.operands.dtype());
    EXPECT_EQ(a.lnf.type, a.operands.dtype());
    bytes[inputs == MatmulInputs::kBF16] = ledger.current(MemoryCategory::kActivations);
  }
  const int64_t per_layer = n * c.n_embd * (1 + 3 + 1 + 1 + 4);  // ln1 qkv atty ln2 fch_gelu
  EXPECT_EQ(bytes[0] - bytes[1], 2 * (c.n_layer * per_layer + n * c.n_embd));
}

// One forward and backward on one rank holds exactly activations.h's closed forms: a
// micro-batch's set, the scratch and the loss's 3n floats (the default model's shape at
// b = 8: 89292800 bytes, worked by hand from the table in the README).
TEST(GPT, ActivationsAreTheClosedForms) {
  GPTConfig c;
  const int b = 8;
  MemoryLedger ledger;
  Allocator alloc(&ledger);
  auto gpt = GPT::Create(c, alloc, 1).value();
  std::vector<int32_t> tokens(size_t(b) * c.seq_len, 7);
  ASSERT_TRUE(gpt->Forward(tokens.data(), tokens.data(), b).ok());
  ASSERT_TRUE(gpt->Backward(1.0f / float(tokens.size())).ok());
  ActivationShape shape;
  shape.config = c;
  shape.vocab_local = c.vocab_size;
  shape.attention_scratch = int64_t(c.seq_len) * c.seq_len;
  const int64_t n = int64_t(b) * c.seq_len;
  const int64_t predicted = CountActivations(shape, b, c.n_layer, true, true).Bytes(4) +
                            4 * (CountScratch(shape, b) + 3 * n);
  EXPECT_EQ(ledger.peak(MemoryCategory::kActivations), predicted);
  EXPECT_EQ(predicted, 89292800);
}

TEST(GPT, RejectsTokensOutsideTheVocabulary) {
  MemoryLedger ledger;
  Allocator alloc(&ledger);
  auto gpt = GPT::Create(Tiny(), alloc, 1).value();
  std::vector<int32_t> tokens(5, 3), targets(5, 3);
  tokens[2] = 11;
  EXPECT_FALSE(gpt->Forward(tokens.data(), targets.data(), 1).ok());
}

// A WeightStore that records the model's calls and hands out a Replica's buffers.
class RecordingStore : public WeightStore {
 public:
  explicit RecordingStore(Replica* replica) : replica_(replica) {}
  absl::StatusOr<float*> Params(int unit) override { return Log("P", unit, replica_->Params(unit)); }
  absl::StatusOr<ConstTypedPtr> Stored(int unit) override { return replica_->Stored(unit); }
  absl::Status ReleaseParams(int unit) override { return Log("R", unit, absl::OkStatus()); }
  absl::StatusOr<float*> OpenGrads(int unit) override { return Log("O", unit, replica_->OpenGrads(unit)); }
  absl::Status CloseGrads(int unit) override { return Log("C", unit, absl::OkStatus()); }
  absl::Status ZeroGrad() override { return replica_->ZeroGrad(); }
  absl::StatusOr<Tensor> TiedEmbeddingGrads() override { return replica_->TiedEmbeddingGrads(); }
  std::string calls;

 private:
  template <typename T>
  T Log(const char* what, int unit, T result) {
    calls += std::string(what) + std::to_string(unit) + " ";
    return result;
  }
  Replica* replica_;
};

// The contract ZeRO builds on: each unit is fetched just before its use and released
// right after, in forward and again in backward; its gradients are opened and closed
// around its backward, the embeddings' through the whole of it (the tied LM head first,
// the lookup last). Units: 0 embeddings, 1 h.0, 2 h.1, 3 ln_f.
TEST(GPT, FetchesAndReleasesEachUnitAroundItsUse) {
  MemoryLedger ledger;
  Allocator alloc(&ledger);
  const ParameterLayout layout = ParameterLayout::ForGPT(Tiny());
  auto replica = Replica::Create(layout, 1, alloc).value();
  RecordingStore store(replica.get());
  auto gpt = GPT::Create(Tiny(), alloc, &store).value();
  auto reference = GPT::Create(Tiny(), alloc, 1).value();
  std::vector<int32_t> tokens(5, 1), targets(5, 2);
  float loss = gpt->Forward(tokens.data(), targets.data(), 1).value();
  EXPECT_EQ(store.calls, "P0 P1 R1 P2 R2 P3 R3 R0 ");
  store.calls.clear();
  ASSERT_TRUE(gpt->Backward(0.2f).ok());
  EXPECT_EQ(store.calls, "P0 O0 P3 O3 C3 R3 P2 O2 C2 R2 P1 O1 C1 R1 C0 R0 ");
  // Through the store, the same numbers as with the model's own replica.
  EXPECT_EQ(loss, reference->Forward(tokens.data(), targets.data(), 1).value());
  ASSERT_TRUE(reference->ZeroGrad().ok());
  ASSERT_TRUE(reference->Backward(0.2f).ok());
  EXPECT_EQ(std::memcmp(replica->grads().raw_data(), reference->grads().raw_data(),
                        replica->grads().nbytes()),
            0);
}

// fp32 central differences with a step of 1e-2: rounding error ~3e-5, truncation ~1e-5.
TEST(GPT, GradientsMatchFiniteDifferences) {
  GPTConfig c = Tiny();
  MemoryLedger ledger;
  Allocator alloc(&ledger);
  auto gpt = GPT::Create(c, alloc, 7).value();
  // Larger weights than GPT-2's 0.02, so every path carries a sizeable gradient.
  std::mt19937 gen(3);
  std::normal_distribution<float> dist(0.0f, 0.3f);
  float* p = gpt->params().data<float>();
  for (int64_t i = 0; i < gpt->params().numel(); ++i) p[i] += dist(gen);
  const int b = 2, n = b * c.seq_len;
  std::vector<int32_t> tokens(n), targets(n);
  for (int i = 0; i < n; ++i) {
    tokens[i] = (i * 5 + 1) % c.vocab_size;
    targets[i] = (i * 3 + 2) % c.vocab_size;
  }
  auto loss = [&] { return double(gpt->Forward(tokens.data(), targets.data(), b).value()); };
  ASSERT_TRUE(gpt->ZeroGrad().ok());
  loss();
  ASSERT_TRUE(gpt->Backward(1.0f / n).ok());
  std::vector<float> analytic(gpt->grads().data<float>(),
                              gpt->grads().data<float>() + gpt->grads().numel());
  const double eps = 1e-2;
  for (const ParamSpec& spec : gpt->layout().specs()) {
    // A few elements of every tensor: first, last, and one in the middle.
    for (int64_t k : {int64_t(0), spec.numel / 2, spec.numel - 1}) {
      int64_t i = spec.offset + k;
      float saved = p[i];
      p[i] = saved + float(eps);
      double up = loss();
      p[i] = saved - float(eps);
      double down = loss();
      p[i] = saved;
      double numeric = (up - down) / (2 * eps);
      EXPECT_NEAR(analytic[i], numeric, 1e-3 + 2e-2 * std::abs(numeric)) << spec.name << "[" << k << "]";
    }
  }
}

}  // namespace
}  // namespace tally::model
