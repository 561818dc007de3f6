// The CPU's bf16 matmuls (MatmulInputs::kBF16): each product is the fp32 product of the
// operands rounded to bf16 — against a double-precision reference over the rounded
// operands (what is left is fp32 summation, ~1e-6), while the unrounded fp32 product is
// ~1e-3 away (bf16 keeps 8 bits of mantissa: a relative error up to 2^-9 per operand).
#include <algorithm>
#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "core/runtime/dtype.h"
#include "core/runtime/kernels/cpu/attention.h"
#include "core/runtime/kernels/cpu/gemm.h"
#include "core/runtime/kernels/cpu/linear.h"
#include "core/runtime/kernels/kernels.h"
#include "tests/runtime/kernels/random_inputs.h"

namespace tally::cpu {
namespace {

double Rounded(float x) { return BFloat16::FromFloat(x).ToFloat(); }

// The largest |got - want| relative to the largest |want|.
double Error(const std::vector<float>& got, const std::vector<double>& want) {
  double err = 0, scale = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    err = std::max(err, std::abs(got[i] - want[i]));
    scale = std::max(scale, std::abs(want[i]));
  }
  return err / scale;
}

TEST(BF16Matmul, RoundsToNearestEvenAndKeepsNaN) {
  const float in[] = {1.0f, 1.00390625f /* 1 + 2^-8: a tie, to even */,
                      1.01171875f /* 1 + 3·2^-8: a tie, up to even */, -2.5f, NAN};
  BFloat16 out[5];
  RoundToBF16(out, in, 1, 5, 5);
  EXPECT_EQ(out[0].ToFloat(), 1.0f);
  EXPECT_EQ(out[1].ToFloat(), 1.0f);
  EXPECT_EQ(out[2].ToFloat(), 1.015625f);
  EXPECT_EQ(out[3].ToFloat(), -2.5f);
  EXPECT_TRUE(std::isnan(out[4].ToFloat()));
  // A leading dimension: rows of 2 taken from rows of 3.
  const float strided[] = {1, 2, 99, 3, 4, 99};
  BFloat16 packed[4];
  RoundToBF16(packed, strided, 2, 2, 3);
  EXPECT_EQ(packed[2].ToFloat(), 3.0f);
}

TEST(BF16Matmul, LinearIsTheFp32LinearOfRoundedOperands) {
  const int n = 37, c = 48, oc = 29;  // odd sizes: no kernel's favourite shape
  std::vector<float> x = Random(n * c, 1), w = Random(oc * c, 2), b = Random(oc, 3),
                     dy = Random(n * oc, 4);
  std::vector<double> y_ref(n * oc), dx_ref(n * c), dw_ref(oc * c, 0.5);
  for (int i = 0; i < n; ++i) {
    for (int o = 0; o < oc; ++o) {
      double s = b[o];
      for (int k = 0; k < c; ++k) s += Rounded(x[i * c + k]) * Rounded(w[o * c + k]);
      y_ref[i * oc + o] = s;
      for (int k = 0; k < c; ++k) {
        dx_ref[i * c + k] += Rounded(dy[i * oc + o]) * Rounded(w[o * c + k]);
        dw_ref[o * c + k] += Rounded(dy[i * oc + o]) * Rounded(x[i * c + k]);
      }
    }
  }
  for (MatmulInputs inputs : {MatmulInputs::kBF16, MatmulInputs::kF32}) {
    std::vector<float> y(n * oc), dx(n * c), dw(oc * c, 0.5f), db(oc);
    LinearForward(y.data(), x.data(), w.data(), b.data(), n, c, oc, inputs);
    LinearBackward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), n, c, oc,
                   /*accumulate_dx=*/false, inputs);
    if (inputs == MatmulInputs::kBF16) {
      EXPECT_LT(Error(y, y_ref), 1e-6);
      EXPECT_LT(Error(dx, dx_ref), 1e-6);
      EXPECT_LT(Error(dw, dw_ref), 1e-6);
    } else {  // fp32 operands are not rounded: visibly elsewhere
      EXPECT_GT(Error(y, y_ref), 1e-4);
      EXPECT_GT(Error(dx, dx_ref), 1e-4);
      EXPECT_GT(Error(dw, dw_ref), 1e-4);
    }
    double db0 = 0;  // the bias gradient is a plain fp32 column sum either way
    for (int i = 0; i < n; ++i) db0 += dy[i * oc];
    EXPECT_NEAR(db[0], db0, 1e-5);
  }
}

TEST(BF16Matmul, AttentionRoundsQKVAndTheProbabilities) {
  const int b = 2, t = 9, c = 16, nh = 2, hs = c / nh;
  std::vector<float> qkv = Random(b * t * 3 * c, 5);
  std::vector<float> y(b * t * c), att(b * nh * t * t);
  AttentionForward(y.data(), att.data(), qkv.data(), b, t, c, nh, MatmulInputs::kBF16);
  // P = softmax(round(Q)·round(K)ᵀ/√hs) in fp32; Y = round(P)·round(V).
  std::vector<double> p_ref(att.size()), y_ref(y.size());
  for (int i = 0; i < b; ++i) {
    for (int h = 0; h < nh; ++h) {
      auto at = [&](int pos, int which, int d) {
        return Rounded(qkv[(i * t + pos) * 3 * c + which * c + h * hs + d]);
      };
      for (int row = 0; row < t; ++row) {
        std::vector<double> s(row + 1);
        double max = -1e300, sum = 0;
        for (int col = 0; col <= row; ++col) {
          for (int d = 0; d < hs; ++d) s[col] += at(row, 0, d) * at(col, 1, d);
          s[col] /= std::sqrt(double(hs));
          max = std::max(max, s[col]);
        }
        for (int col = 0; col <= row; ++col) sum += std::exp(s[col] - max);
        const int base = ((i * nh + h) * t + row) * t;
        for (int col = 0; col <= row; ++col) p_ref[base + col] = std::exp(s[col] - max) / sum;
        for (int d = 0; d < hs; ++d) {
          double out = 0;  // from the kernel's own P, rounded as it enters P·V
          for (int col = 0; col <= row; ++col) out += Rounded(att[base + col]) * at(col, 2, d);
          y_ref[(i * t + row) * c + h * hs + d] = out;
        }
      }
    }
  }
  EXPECT_LT(Error(att, p_ref), 1e-5);
  EXPECT_LT(Error(y, y_ref), 1e-6);
  // Backward: within bf16's rounding of the fp32 kernel's gradient, and not equal to it.
  std::vector<float> dy = Random(b * t * c, 6), scratch(t * t), d16(qkv.size()), d32(qkv.size());
  AttentionBackward(d16.data(), scratch.data(), dy.data(), qkv.data(), att.data(), b, t, c, nh,
                    MatmulInputs::kBF16);
  AttentionBackward(d32.data(), scratch.data(), dy.data(), qkv.data(), att.data(), b, t, c, nh);
  const std::vector<double> want(d32.begin(), d32.end());
  EXPECT_LT(Error(d16, want), 3 * std::ldexp(1.0, -8));
  EXPECT_GT(Error(d16, want), 1e-5);
}

std::vector<BFloat16> ToBF16(const std::vector<float>& x) {
  std::vector<BFloat16> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = BFloat16::FromFloat(x[i]);
  return y;
}

// Under mixed precision the model keeps the activations its matmuls read in bf16: the
// LayerNorm and GELU that make them round as they write, and the linears and attention
// read them as they are. Every result is bit for bit the one of fp32 activations rounded
// as they enter the products.
TEST(BF16Matmul, ActivationsKeptInBf16GiveTheSameResultsBitForBit) {
  auto k = Kernels::Create(Device::CPU(), MatmulInputs::kBF16).value();
  ASSERT_EQ(k->activation_operand_type(), DType::kBF16);
  const int n = 21, c = 24, oc = 13;
  // LayerNorm and GELU: a bf16 y is the fp32 y rounded to nearest even.
  std::vector<float> x = Random(n * c, 7), w = Random(c, 8), b = Random(c, 9);
  std::vector<float> y32(n * c), mean(n), rstd(n);
  std::vector<BFloat16> y16(n * c);
  ASSERT_TRUE(k->LayerNormForward(y32.data(), mean.data(), rstd.data(), x.data(), w.data(),
                                  b.data(), n, c).ok());
  ASSERT_TRUE(k->LayerNormForward({y16.data(), DType::kBF16}, mean.data(), rstd.data(), x.data(),
                                  w.data(), b.data(), n, c).ok());
  for (int i = 0; i < n * c; ++i) ASSERT_EQ(y16[i].bits, BFloat16::FromFloat(y32[i]).bits) << i;
  ASSERT_TRUE(k->GeluForward(y32.data(), x.data(), n * c).ok());
  ASSERT_TRUE(k->GeluForward({y16.data(), DType::kBF16}, x.data(), n * c).ok());
  for (int i = 0; i < n * c; ++i) ASSERT_EQ(y16[i].bits, BFloat16::FromFloat(y32[i]).bits) << i;

  // The linear layer, forward and backward, with x and w each fp32 or kept in bf16 (a bf16
  // store's weights: core/model/weights.h).
  const std::vector<float> lw = Random(oc * c, 10), lb = Random(oc, 11), dy = Random(n * oc, 12);
  const std::vector<BFloat16> x16 = ToBF16(x), lw16 = ToBF16(lw);
  std::vector<float> out[4], dx[4], dw[4], db[4];
  for (int kept = 0; kept < 4; ++kept) {
    const ConstTypedPtr in = kept & 1 ? ConstTypedPtr(x16.data(), DType::kBF16) : x.data();
    const ConstTypedPtr weights = kept & 2 ? ConstTypedPtr(lw16.data(), DType::kBF16) : lw.data();
    out[kept].resize(n * oc);
    dx[kept].resize(n * c);
    dw[kept].assign(oc * c, 0.25f);
    db[kept].assign(oc, 0.5f);
    ASSERT_TRUE(k->LinearForward(out[kept].data(), in, weights, lb.data(), n, c, oc).ok());
    ASSERT_TRUE(k->LinearBackward(dx[kept].data(), dw[kept].data(), db[kept].data(), dy.data(), in,
                                  weights, n, c, oc).ok());
  }
  for (int kept = 1; kept < 4; ++kept) {
    EXPECT_EQ(out[0], out[kept]) << kept;
    EXPECT_EQ(dx[0], dx[kept]) << kept;
    EXPECT_EQ(dw[0], dw[kept]) << kept;
    EXPECT_EQ(db[0], db[kept]) << kept;
  }

  // Attention, forward and backward, with qkv fp32 or kept in bf16.
  const int batch = 2, t = 7, ac = 8, nh = 2;
  const std::vector<float> qkv = Random(batch * t * 3 * ac, 13), dya = Random(batch * t * ac, 14);
  const std::vector<BFloat16> qkv16 = ToBF16(qkv);
  std::vector<float> ya[2], att[2], dqkv[2];
  std::vector<float> scratch(k->AttentionScratch(t, nh));
  for (int kept = 0; kept < 2; ++kept) {
    const ConstTypedPtr in = kept ? ConstTypedPtr(qkv16.data(), DType::kBF16) : qkv.data();
    ya[kept].resize(batch * t * ac);
    att[kept].resize(batch * nh * t * t);
    dqkv[kept].resize(qkv.size());
    ASSERT_TRUE(k->AttentionForward(ya[kept].data(), att[kept].data(), in, batch, t, ac, nh).ok());
    ASSERT_TRUE(k->AttentionBackward(dqkv[kept].data(), scratch.data(), dya.data(), in,
                                     att[kept].data(), batch, t, ac, nh).ok());
  }
  EXPECT_EQ(ya[0], ya[1]);
  EXPECT_EQ(att[0], att[1]);
  EXPECT_EQ(dqkv[0], dqkv[1]);

  // Kernels whose matmuls take fp32 refuse a bf16 input rather than misread it.
  auto fp32 = Kernels::Create(Device::CPU()).value();
  EXPECT_EQ(fp32->activation_operand_type(), DType::kF32);
  const absl::Status refused = fp32->LinearForward(out[0].data(), {x16.data(), DType::kBF16},
                                                   lw.data(), lb.data(), n, c, oc);
  EXPECT_TRUE(absl::IsInvalidArgument(refused)) << refused;
  EXPECT_NE(refused.message().find("bf16"), std::string::npos) << refused.message();
  EXPECT_TRUE(absl::IsInvalidArgument(fp32->LinearForward(
      out[0].data(), x.data(), {lw16.data(), DType::kBF16}, lb.data(), n, c, oc)));
}

}  // namespace
}  // namespace tally::cpu
