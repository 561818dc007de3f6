#include "core/parallel/powersgd.h"

#include <cmath>
#include <string>
#include <utility>

#include "core/runtime/comm/ledger/names.h"
#include "core/runtime/rng.h"
#include "core/runtime/status_macros.h"

namespace tally::parallel {

PowerSgdSplit SplitForPowerSgd(const model::ParameterLayout& layout, int rank) {
  PowerSgdSplit split;
  for (const model::ParamSpec& spec : layout.specs()) {
    const bool matrix = spec.shape.size() == 2;
    const int64_t m = matrix ? spec.shape[0] : 0, n = matrix ? spec.shape[1] : 0;
    if (matrix && (m + n) * rank < m * n) {
      split.matrices.push_back({spec.offset, m, n});
      split.p_values += m * rank;
      split.q_values += n * rank;
    } else {
      split.whole.push_back({spec.offset, spec.numel});
      split.whole_values += spec.numel;
    }
  }
  return split;
}

comm::ExpectedCalls PowerSgdCalls(const PowerSgdSplit& split, const char* group, int ranks,
                                  int rank, std::vector<int> nodes) {
  comm::ExpectedCalls calls;
  for (auto [scope, count] : {std::pair{comm::scope::kPowerSgdWhole, split.whole_values},
                              {comm::scope::kPowerSgdP, split.p_values},
                              {comm::scope::kPowerSgdQ, split.q_values}}) {
    if (count == 0) continue;
    calls.push_back({.group = group,
                     .primitive = comm::Primitive::kAllReduce,
                     .phase = comm::Phase::kBackward,
                     .scope = scope,
                     .count = count,
                     .element = 4,
                     .ranks = ranks,
                     .rank = rank,
                     .nodes = nodes});
  }
  return calls;
}

absl::StatusOr<std::unique_ptr<PowerSgd>> PowerSgd::Create(comm::Communicator* dp,
                                                          const model::ParameterLayout& layout,
                                                          int rank, uint64_t seed,
                                                          comm::Algorithm algorithm,
                                                          Allocator& alloc) {
  std::unique_ptr<PowerSgd> p(new PowerSgd(dp, SplitForPowerSgd(layout, rank), rank, algorithm));
  int64_t errors = 0, qs = 0, ps = 0;
  for (const PowerSgdMatrix& m : p->split_.matrices) {
    p->error_at_.push_back(errors);
    p->q_at_.push_back(qs);
    p->p_at_.push_back(ps);
    errors += m.rows * m.cols;
    qs += m.cols * rank;
    ps += m.rows * rank;
  }
  ASSIGN_OR_RETURN(p->error_, Tensor::Empty({errors}, DType::kF32, alloc, MemoryCategory::kOptimizer));
  ASSIGN_OR_RETURN(p->q_, Tensor::Empty({qs}, DType::kF32, alloc, MemoryCategory::kOptimizer));
  if (alloc.device().type == DeviceType::kMeta) return p;
  RETURN_IF_ERROR(p->error_.SetZero());
  float* q = p->q_.data<float>();
  for (size_t i = 0; i < p->split_.matrices.size(); ++i) {
    const PowerSgdMatrix& m = p->split_.matrices[i];
    FillNormal(q + p->q_at_[i], m.cols * rank, seed, StreamOf("powersgd"), uint64_t(i) << 32, 0, 1);
  }
  return p;
}

Tensor PowerSgd::error(size_t i) const {
  const PowerSgdMatrix& m = split_.matrices[i];
  return error_.Flat(error_at_[i], error_at_[i] + m.rows * m.cols);
}

Tensor PowerSgd::q(size_t i) const {
  return q_.Flat(q_at_[i], q_at_[i] + split_.matrices[i].cols * rank_);
}

namespace {

// Gram-Schmidt over the r columns of the row-major m × r `p`, in place.
void Orthonormalize(float* p, int64_t m, int r) {
  for (int j = 0; j < r; ++j) {
    for (int k = 0; k < j; ++k) {
      double dot = 0;
      for (int64_t i = 0; i < m; ++i) dot += double(p[i * r + j]) * p[i * r + k];
      for (int64_t i = 0; i < m; ++i) p[i * r + j] = float(p[i * r + j] - dot * p[i * r + k]);
    }
    double norm = 0;
    for (int64_t i = 0; i < m; ++i) norm += double(p[i * r + j]) * p[i * r + j];
    const double scale = 1.0 / (std::sqrt(norm) + 1e-8);
    for (int64_t i = 0; i < m; ++i) p[i * r + j] = float(p[i * r + j] * scale);
  }
}

// out (a × c) = x (a × b) · y (b × c), row-major, sums in double; `tx`: x is stored b × a.
void Multiply(const float* x, const float* y, float* out, int64_t a, int64_t b, int64_t c,
              bool tx) {
  for (int64_t i = 0; i < a; ++i) {
    for (int64_t k = 0; k < c; ++k) {
      double sum = 0;
      for (int64_t j = 0; j < b; ++j) sum += double(tx ? x[j * a + i] : x[i * b + j]) * y[j * c + k];
      out[i * c + k] = float(sum);
    }
  }
}

}  // namespace

absl::Status PowerSgd::Reduce(const Tensor& grads) {
  Allocator comm_memory(dp_->allocator().ledger(), grads.device());
  auto empty = [&](int64_t count) {
    return Tensor::Empty({count}, DType::kF32, comm_memory, MemoryCategory::kComm);
  };
  ASSIGN_OR_RETURN(Tensor whole, empty(split_.whole_values));
  ASSIGN_OR_RETURN(Tensor p, empty(split_.p_values));
  ASSIGN_OR_RETURN(Tensor q_mine, empty(split_.q_values));
  const bool values = grads.device().type != DeviceType::kMeta;
  const int r = rank_;
  float* g = values ? grads.data<float>() : nullptr;
  error_sums_ = ErrorSums();
  int64_t at = 0;
  for (const comm::Chunk& c : split_.whole) {  // packed in buffer order
    if (values) std::copy(g + c.offset, g + c.end(), whole.data<float>() + at);
    for (int64_t k = c.offset; values && k < c.end(); ++k) error_sums_.value += double(g[k]) * g[k];
    at += c.count;
  }
  if (split_.whole_values > 0) {
    comm::LabelScope label(dp_->ledger(), comm::scope::kPowerSgdWhole);
    RETURN_IF_ERROR(dp_->AllReduce(whole, comm::ReduceOp::kSum, algorithm_));
  }
  if (values) {
    at = 0;
    for (const comm::Chunk& c : split_.whole) {
      std::copy(whole.data<float>() + at, whole.data<float>() + at + c.count, g + c.offset);
      at += c.count;
    }
  }
  if (split_.matrices.empty()) return absl::OkStatus();
  // Δ = M + E (kept in E), P = Δ·Q.
  for (size_t i = 0; values && i < split_.matrices.size(); ++i) {
    const PowerSgdMatrix& m = split_.matrices[i];
    float* delta = error_.data<float>() + error_at_[i];
    for (int64_t k = 0; k < m.rows * m.cols; ++k) delta[k] += g[m.offset + k];
    Multiply(delta, q_.data<float>() + q_at_[i], p.data<float>() + p_at_[i], m.rows, m.cols, r,
             false);
  }
  {
    comm::LabelScope label(dp_->ledger(), comm::scope::kPowerSgdP);
    RETURN_IF_ERROR(dp_->AllReduce(p, comm::ReduceOp::kSum, algorithm_));
  }
  // P orthonormal, this rank's Q_w = Δᵀ·P, and E = Δ − P·Q_wᵀ.
  for (size_t i = 0; values && i < split_.matrices.size(); ++i) {
    const PowerSgdMatrix& m = split_.matrices[i];
    float* pi = p.data<float>() + p_at_[i];
    float* qi = q_mine.data<float>() + q_at_[i];
    float* delta = error_.data<float>() + error_at_[i];
    Orthonormalize(pi, m.rows, r);
    Multiply(delta, pi, qi, m.cols, m.rows, r, /*tx=*/true);
    for (int64_t a = 0; a < m.rows; ++a) {
      for (int64_t b = 0; b < m.cols; ++b) {
        double sent = 0;
        for (int k = 0; k < r; ++k) sent += double(pi[a * r + k]) * qi[b * r + k];
        const float had = delta[a * m.cols + b];
        delta[a * m.cols + b] = float(had - sent);
        error_sums_.value += double(had) * had;
        error_sums_.residual += double(delta[a * m.cols + b]) * delta[a * m.cols + b];
      }
    }
  }
  {
    comm::LabelScope label(dp_->ledger(), comm::scope::kPowerSgdQ);
    RETURN_IF_ERROR(dp_->AllReduce(q_mine, comm::ReduceOp::kSum, algorithm_));
  }
  if (!values) return absl::OkStatus();
  // M = P·Qᵀ with the summed Q, which the next step starts from.
  std::copy(q_mine.data<float>(), q_mine.data<float>() + split_.q_values, q_.data<float>());
  for (size_t i = 0; i < split_.matrices.size(); ++i) {
    const PowerSgdMatrix& m = split_.matrices[i];
    const float* pi = p.data<float>() + p_at_[i];
    const float* qi = q_.data<float>() + q_at_[i];
    for (int64_t a = 0; a < m.rows; ++a) {
      for (int64_t b = 0; b < m.cols; ++b) {
        double sum = 0;
        for (int k = 0; k < r; ++k) sum += double(pi[a * r + k]) * qi[b * r + k];
        g[m.offset + a * m.cols + b] = float(sum);
      }
    }
  }
  return absl::OkStatus();
}

absl::Status PowerSgdHook::Reduce(Tensor& grads) {
  comm::PhaseScope phase(dp_.ledger(), comm::Phase::kBackward);
  return powersgd_->Reduce(grads);
}

}  // namespace tally::parallel
