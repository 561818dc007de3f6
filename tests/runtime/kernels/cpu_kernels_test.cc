// Every CPU kernel's backward against central finite differences, in double precision
// (where fp32 rounding would hide an error), and the forwards against plain formulas.
#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "core/runtime/kernels/cpu/attention.h"
#include "core/runtime/kernels/cpu/cross_entropy.h"
#include "core/runtime/kernels/cpu/embedding.h"
#include "core/runtime/kernels/cpu/gelu.h"
#include "core/runtime/kernels/cpu/layernorm.h"
#include "core/runtime/kernels/cpu/linear.h"

namespace tally::cpu {
namespace {

using Vec = std::vector<double>;

Vec Random(size_t n, int seed, double scale = 1.0) {
  std::mt19937 gen(seed);
  std::normal_distribution<double> dist(0.0, scale);
  Vec v(n);
  for (double& x : v) x = dist(gen);
  return v;
}

double Dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Compares `analytic` with the central difference of `loss` in every element of `x`.
void ExpectGradient(Vec& x, const Vec& analytic, const std::function<double()>& loss,
                    const char* what) {
  const double eps = 1e-5;
  ASSERT_EQ(x.size(), analytic.size());
  for (size_t i = 0; i < x.size(); ++i) {
    double saved = x[i];
    x[i] = saved + eps;
    double up = loss();
    x[i] = saved - eps;
    double down = loss();
    x[i] = saved;
    double numeric = (up - down) / (2 * eps);
    EXPECT_NEAR(analytic[i], numeric, 1e-6 + 1e-6 * std::abs(numeric)) << what << "[" << i << "]";
  }
}

TEST(CpuKernels, LinearForwardAndBackward) {
  const int n = 5, c = 4, oc = 3;
  Vec x = Random(n * c, 1), w = Random(oc * c, 2), b = Random(oc, 3), r = Random(n * oc, 4);
  auto loss = [&] {
    Vec y(n * oc);
    LinearForward(y.data(), x.data(), w.data(), b.data(), n, c, oc);
    return Dot(y, r);
  };
  Vec y(n * oc);
  LinearForward(y.data(), x.data(), w.data(), b.data(), n, c, oc);
  EXPECT_NEAR(y[1 * oc + 2], b[2] + x[4] * w[8] + x[5] * w[9] + x[6] * w[10] + x[7] * w[11], 1e-12);
  Vec dx(n * c), dw(oc * c), db(oc);
  LinearBackward(dx.data(), dw.data(), db.data(), r.data(), x.data(), w.data(), n, c, oc);
  ExpectGradient(x, dx, loss, "dx");
  ExpectGradient(w, dw, loss, "dw");
  ExpectGradient(b, db, loss, "db");
  // Gradients of the weights accumulate; dx accumulates only when asked.
  LinearBackward(dx.data(), dw.data(), db.data(), r.data(), x.data(), w.data(), n, c, oc, true);
  Vec dw_once(oc * c), db_once(oc), dx_once(n * c);
  LinearBackward(dx_once.data(), dw_once.data(), db_once.data(), r.data(), x.data(), w.data(), n,
                 c, oc);
  EXPECT_NEAR(dw[0], 2 * dw_once[0], 1e-12);
  EXPECT_NEAR(dx[0], 2 * dx_once[0], 1e-12);
}

TEST(CpuKernels, LayerNormForwardAndBackward) {
  const int n = 4, c = 6;
  Vec x = Random(n * c, 5, 2.0), w = Random(c, 6), b = Random(c, 7), r = Random(n * c, 8);
  auto loss = [&] {
    Vec y(n * c), mean(n), rstd(n);
    LayerNormForward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), n, c);
    return Dot(y, r);
  };
  Vec y(n * c), mean(n), rstd(n);
  LayerNormForward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), n, c);
  for (int i = 0; i < n; ++i) {  // normalised rows: (y - b)/w has mean 0 and variance ~1
    double m = 0, v = 0;
    for (int j = 0; j < c; ++j) m += (y[i * c + j] - b[j]) / w[j];
    for (int j = 0; j < c; ++j) v += std::pow((y[i * c + j] - b[j]) / w[j] - m / c, 2);
    EXPECT_NEAR(m / c, 0.0, 1e-9);
    EXPECT_NEAR(v / c, 1.0, 1e-3);
  }
  Vec dx(n * c), dw(c), db(c);
  LayerNormBackward(dx.data(), dw.data(), db.data(), r.data(), x.data(), w.data(), mean.data(),
                    rstd.data(), n, c);
  ExpectGradient(x, dx, loss, "dx");
  ExpectGradient(w, dw, loss, "dw");
  ExpectGradient(b, db, loss, "db");
}

TEST(CpuKernels, GeluForwardAndBackward) {
  const int n = 50;
  Vec x = Random(n, 9, 2.0), r = Random(n, 10);
  auto loss = [&] {
    Vec y(n);
    GeluForward(y.data(), x.data(), n);
    return Dot(y, r);
  };
  Vec y(n);
  GeluForward(y.data(), x.data(), n);
  double x0 = x[0];
  EXPECT_NEAR(y[0], 0.5 * x0 * (1 + std::tanh(std::sqrt(2 / M_PI) * (x0 + 0.044715 * x0 * x0 * x0))),
              1e-12);
  Vec dx(n);
  GeluBackward(dx.data(), x.data(), r.data(), n);
  ExpectGradient(x, dx, loss, "dx");
}

TEST(CpuKernels, EmbeddingForwardAndBackward) {
  const int b = 2, t = 3, c = 4, v = 5;
  std::vector<int32_t> tokens = {4, 0, 4, 1, 2, 1};
  Vec wte = Random(v * c, 11), wpe = Random(t * c, 12), r = Random(b * t * c, 13);
  auto loss = [&] {
    Vec x(b * t * c);
    EmbeddingForward(x.data(), tokens.data(), wte.data(), wpe.data(), b, t, c);
    return Dot(x, r);
  };
  Vec x(b * t * c);
  EmbeddingForward(x.data(), tokens.data(), wte.data(), wpe.data(), b, t, c);
  EXPECT_EQ(x[(1 * t + 2) * c + 3], wte[1 * c + 3] + wpe[2 * c + 3]);
  Vec dwte(v * c), dwpe(t * c);
  EmbeddingBackward(dwte.data(), dwpe.data(), r.data(), tokens.data(), b, t, c);
  ExpectGradient(wte, dwte, loss, "dwte");
  ExpectGradient(wpe, dwpe, loss, "dwpe");
}

TEST(CpuKernels, CrossEntropyForwardAndBackward) {
  const int n = 4, v = 7;
  Vec logits = Random(n * v, 14, 3.0);
  std::vector<int32_t> targets = {0, 6, 3, 3};
  const double dloss = 1.0 / n;
  auto loss = [&] {
    Vec losses(n), probs(n * v);
    CrossEntropyForward(losses.data(), probs.data(), logits.data(), targets.data(), n, v);
    double sum = 0;
    for (double l : losses) sum += l;
    return sum * dloss;
  };
  Vec losses(n), probs(n * v);
  CrossEntropyForward(losses.data(), probs.data(), logits.data(), targets.data(), n, v);
  double z = 0;
  for (int j = 0; j < v; ++j) z += std::exp(logits[v + j]);
  EXPECT_NEAR(losses[1], -std::log(std::exp(logits[v + 6]) / z), 1e-12);
  Vec dlogits(n * v);
  CrossEntropyBackward(dlogits.data(), probs.data(), targets.data(), dloss, n, v);
  ExpectGradient(logits, dlogits, loss, "dlogits");
}

TEST(CpuKernels, AttentionForwardAndBackward) {
  const int b = 2, t = 5, c = 6, nh = 2, hs = c / nh;
  Vec qkv = Random(b * t * 3 * c, 15), r = Random(b * t * c, 16);
  auto loss = [&] {
    Vec y(b * t * c), att(b * nh * t * t);
    AttentionForward(y.data(), att.data(), qkv.data(), b, t, c, nh);
    return Dot(y, r);
  };
  Vec y(b * t * c), att(b * nh * t * t);
  AttentionForward(y.data(), att.data(), qkv.data(), b, t, c, nh);
  // Plain-loop reference for one output element: batch 1, position 3, head 1, dim 2.
  {
    int i = 1, pos = 3, h = 1, d = 2;
    auto at = [&](int tt, int which, int dim) { return qkv[(i * t + tt) * 3 * c + which * c + h * hs + dim]; };
    std::vector<double> s(pos + 1);
    double max = -1e300, sum = 0, out = 0;
    for (int u = 0; u <= pos; ++u) {
      for (int e = 0; e < hs; ++e) s[u] += at(pos, 0, e) * at(u, 1, e);
      s[u] /= std::sqrt(double(hs));
      max = std::max(max, s[u]);
    }
    for (int u = 0; u <= pos; ++u) sum += std::exp(s[u] - max);
    for (int u = 0; u <= pos; ++u) out += std::exp(s[u] - max) / sum * at(u, 2, d);
    EXPECT_NEAR(y[(i * t + pos) * c + h * hs + d], out, 1e-12);
    EXPECT_EQ(att[((i * nh + h) * t + pos) * t + pos + 1], 0.0);  // masked
  }
  Vec dqkv(b * t * 3 * c), scratch(t * t);
  AttentionBackward(dqkv.data(), scratch.data(), r.data(), qkv.data(), att.data(), b, t, c, nh);
  ExpectGradient(qkv, dqkv, loss, "dqkv");
}

}  // namespace
}  // namespace tally::cpu
