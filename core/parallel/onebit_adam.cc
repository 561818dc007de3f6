#include "core/parallel/onebit_adam.h"

#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/runtime/comm/ledger/names.h"
#include "core/runtime/status_macros.h"

namespace tally::parallel {

OneBitShape OneBitShapeOf(int64_t count, int ranks) {
  const int64_t unit = 8 * int64_t(ranks);
  const int64_t padded = (count + unit - 1) / unit * unit;
  return {.padded = padded, .chunk = padded / ranks, .chunk_bytes = padded / ranks / 8};
}

comm::ExpectedCalls OneBitAdamCalls(int64_t count, const char* group, int ranks, int rank,
                                    std::vector<int> nodes) {
  const OneBitShape shape = OneBitShapeOf(count, ranks);
  comm::ExpectedCalls calls;
  auto add = [&](comm::Primitive primitive, const char* scope, int64_t n, int64_t element) {
    calls.push_back({.group = group,
                     .primitive = primitive,
                     .phase = comm::Phase::kOptimizer,
                     .scope = scope,
                     .count = n,
                     .element = element,
                     .ranks = ranks,
                     .rank = rank,
                     .nodes = nodes});
  };
  add(comm::Primitive::kAllToAll, comm::scope::kOneBitSigns, shape.padded / 8, 1);
  add(comm::Primitive::kAllGather, comm::scope::kOneBitScales, ranks, 4);
  add(comm::Primitive::kAllGather, comm::scope::kOneBitSigns, shape.padded / 8, 1);
  add(comm::Primitive::kAllGather, comm::scope::kOneBitScales, ranks, 4);
  return calls;
}

std::vector<OneBitPart> OneBitParts(const model::ParameterLayout& layout) {
  std::vector<OneBitPart> parts = {
      {.name = "own", .ranges = {}}, {.name = "replicated", .ranges = {}}, {.name = "tied", .ranges = {}}};
  if (layout.specs().empty()) return {};
  const bool pipelined = !(layout.first_stage() && layout.last_stage());
  for (const model::ParamSpec& spec : layout.specs()) {
    OneBitPart& part = pipelined && spec.name == "wte.weight" ? parts[2]
                       : layout.tp() > 1 && spec.replicated() ? parts[1]
                                                              : parts[0];
    if (!part.ranges.empty() && part.ranges.back().end() == spec.offset) {
      part.ranges.back().count += spec.numel;  // after the last: one range
    } else {
      part.ranges.push_back({spec.offset, spec.numel});
    }
    part.count += spec.numel;
  }
  std::erase_if(parts, [](const OneBitPart& p) { return p.count == 0; });
  return parts;
}

OneBitPart OneBitWhole(int64_t count) {
  return {.name = "own", .ranges = {{0, count}}, .count = count};
}

comm::ExpectedCalls OneBitAdamCalls(const std::vector<OneBitPart>& parts, const char* group,
                                    int ranks, int rank, std::vector<int> nodes) {
  comm::ExpectedCalls calls;
  for (const OneBitPart& part : parts) {
    comm::Append(calls, OneBitAdamCalls(part.count, group, ranks, rank, nodes));
  }
  return calls;
}

int64_t OneBitErrorBytes(const std::vector<OneBitPart>& parts, int ranks) {
  int64_t values = 0;
  for (const OneBitPart& part : parts) {
    const OneBitShape shape = OneBitShapeOf(part.count, ranks);
    values += shape.padded + shape.chunk;
  }
  return 4 * values;
}

namespace {

bool Positive(const uint8_t* bits, int64_t i) { return (bits[i / 8] >> (i % 8)) & 1; }

// x's scale √(Σx²/n), its sign bits into `bits` (zero-filled) and x − scale·sign(x) into
// `error` (which may be x itself); the sums of x² and of the error's squares added to
// `sums`.
float Compress(const float* x, int64_t n, uint8_t* bits, float* error, ErrorSums* sums) {
  double squares = 0;
  for (int64_t i = 0; i < n; ++i) squares += double(x[i]) * x[i];
  const float scale = float(std::sqrt(squares / double(n)));
  for (int64_t i = 0; i < n; ++i) {
    const bool positive = x[i] >= 0;  // sign(0) = +1
    if (positive) bits[i / 8] |= uint8_t(1u << (i % 8));
    error[i] = x[i] - (positive ? scale : -scale);
    sums->residual += double(error[i]) * error[i];
  }
  sums->value += squares;
  return scale;
}

}  // namespace

absl::StatusOr<std::unique_ptr<OneBitAverage>> OneBitAverage::Create(comm::Communicator* group,
                                                                     int64_t count,
                                                                     comm::Algorithm algorithm,
                                                                     Allocator& alloc) {
  std::unique_ptr<OneBitAverage> a(new OneBitAverage(group, count, algorithm));
  auto zeros = [&](int64_t n) -> absl::StatusOr<Tensor> {
    ASSIGN_OR_RETURN(Tensor t, Tensor::Empty({n}, DType::kF32, alloc, MemoryCategory::kOptimizer));
    if (alloc.device().type != DeviceType::kMeta) RETURN_IF_ERROR(t.SetZero());
    return t;
  };
  ASSIGN_OR_RETURN(a->worker_error_, zeros(a->shape_.padded));
  ASSIGN_OR_RETURN(a->server_error_, zeros(a->shape_.chunk));
  return a;
}

absl::Status OneBitAverage::Run(const Tensor& m, const std::vector<comm::Chunk>& ranges) {
  int64_t values = 0;
  for (const comm::Chunk& r : ranges) {
    if (r.offset < 0 || r.end() > m.numel()) return absl::InternalError("[onebit_adam] a range past m");
    values += r.count;
  }
  if (m.dtype() != DType::kF32 || values != count_) {
    return absl::InternalError(absl::StrCat("[onebit_adam] wants ", count_, " fp32 values, got ",
                                            values));
  }
  const int p = group_->size();
  const int64_t N = shape_.padded, c = shape_.chunk;
  const bool real = m.device().type != DeviceType::kMeta;
  Allocator memory(group_->allocator().ledger(), m.device());
  auto empty = [&](int64_t n, DType type) {
    return Tensor::Empty({n}, type, memory, MemoryCategory::kComm);
  };
  ASSIGN_OR_RETURN(Tensor signs, empty(N / 8, DType::kI8));
  ASSIGN_OR_RETURN(Tensor received, empty(N / 8, DType::kI8));
  ASSIGN_OR_RETURN(Tensor scale, empty(1, DType::kF32));
  ASSIGN_OR_RETURN(Tensor scales, empty(p, DType::kF32));
  auto bytes = [](Tensor& t) { return static_cast<uint8_t*>(t.raw_data()); };
  error_sums_ = ErrorSums();
  comm::PhaseScope phase(group_->ledger(), comm::Phase::kOptimizer);

  // 1. The worker's compression of y = m + e_w, formed in e_w's buffer and left there as
  // its new error.
  if (real) {
    float* y = worker_error_.data<float>();
    for (const comm::Chunk& r : ranges) {
      const float* from = m.data<float>() + r.offset;
      for (int64_t i = 0; i < r.count; ++i, ++y) *y = from[i] + *y;
    }
    y = worker_error_.data<float>();
    std::memset(bytes(signs), 0, size_t(N / 8));
    scale.data<float>()[0] = Compress(y, N, bytes(signs), y, &error_sums_);
  }
  // 2, 3. The signs to the chunks' servers, every rank's scale to every rank.
  {
    comm::LabelScope label(group_->ledger(), comm::scope::kOneBitSigns);
    RETURN_IF_ERROR(group_->AllToAll(signs, received, algorithm_));
  }
  {
    comm::LabelScope label(group_->ledger(), comm::scope::kOneBitScales);
    RETURN_IF_ERROR(group_->AllGather(scale, scales, algorithm_));
  }
  // 4. The server's average of its chunk, compressed again.
  // (z = the average + e_s likewise in e_s's buffer.)
  ASSIGN_OR_RETURN(Tensor server_signs, empty(c / 8, DType::kI8));
  if (real) {
    float* z = server_error_.data<float>();
    for (int64_t i = 0; i < c; ++i) {
      float sum = 0;
      for (int r = 0; r < p; ++r) {
        const float s = scales.data<float>()[r];
        sum += Positive(bytes(received) + r * shape_.chunk_bytes, i) ? s : -s;
      }
      z[i] = sum / float(p) + z[i];
    }
    std::memset(bytes(server_signs), 0, size_t(c / 8));
    scale.data<float>()[0] = Compress(z, c, bytes(server_signs), z, &error_sums_);
  }
  // 5. Every server's chunk to every rank.
  {
    comm::LabelScope label(group_->ledger(), comm::scope::kOneBitSigns);
    RETURN_IF_ERROR(group_->AllGather(server_signs, received, algorithm_));
  }
  {
    comm::LabelScope label(group_->ledger(), comm::scope::kOneBitScales);
    RETURN_IF_ERROR(group_->AllGather(scale, scales, algorithm_));
  }
  if (!real) return absl::OkStatus();
  // 6. The average, chunk by chunk, back into the ranges.
  int64_t k = 0;  // the value's place in the average
  for (const comm::Chunk& r : ranges) {
    float* into = m.data<float>() + r.offset;
    for (int64_t i = 0; i < r.count; ++i, ++k) {
      const float t = scales.data<float>()[k / c];
      into[i] = Positive(bytes(received), k) ? t : -t;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<OneBitAdam>> OneBitAdam::Create(
    std::unique_ptr<optim::Optimizer> adam, comm::Communicator* dp, int64_t warmup,
    comm::Algorithm algorithm, Allocator& alloc, std::vector<OneBitPart> parts) {
  auto* adamw = dynamic_cast<optim::AdamW*>(adam.get());
  if (adamw == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "[flags] --grad_compression=onebit_adam needs --optimizer=adamw, got ", adam->name()));
  }
  adam.release();
  std::unique_ptr<OneBitAdam> o(new OneBitAdam(std::unique_ptr<optim::AdamW>(adamw), warmup));
  const int64_t count = o->adam_->State()[0].second->numel();
  if (parts.empty()) parts.push_back(OneBitWhole(count));
  o->parts_ = std::move(parts);
  for (const OneBitPart& part : o->parts_) {
    ASSIGN_OR_RETURN(std::unique_ptr<OneBitAverage> average,
                     OneBitAverage::Create(dp, part.count, algorithm, alloc));
    o->averages_.push_back(std::move(average));
  }
  return o;
}

std::vector<std::pair<std::string, Tensor*>> OneBitAdam::CompressionState() {
  std::vector<std::pair<std::string, Tensor*>> state;
  for (size_t i = 0; i < parts_.size(); ++i) {
    const std::string part = absl::StrCat("onebit_adam.", parts_[i].name);
    state.push_back({part + ".worker_error", &averages_[i]->worker_error()});
    state.push_back({part + ".server_error", &averages_[i]->server_error()});
  }
  return state;
}

absl::Status OneBitAdam::Step(float* params, const void* grads, DType grad_type, float lr,
                              const std::vector<optim::Segment>& segments, float grad_scale) {
  error_sums_ = ErrorSums();
  adam_->set_step(step_);
  if (!Compressing()) {
    RETURN_IF_ERROR(adam_->Step(params, grads, grad_type, lr, segments, grad_scale));
    step_ = adam_->step();
    return absl::OkStatus();
  }
  if (grad_type != DType::kF32) {
    return absl::InternalError("[onebit_adam] wants fp32 gradients");
  }
  ++step_;
  adam_->set_step(step_);
  const optim::AdamWOptions& o = adam_->options();
  Tensor& m = *adam_->State()[0].second;
  const Tensor& v = *adam_->State()[1].second;
  const bool real = m.device().type != DeviceType::kMeta;
  const float* g = static_cast<const float*>(grads);
  float* mv = real ? m.data<float>() : nullptr;
  for (const optim::Segment& seg : segments) {  // the rank's own momentum
    for (int64_t i = seg.begin; real && i < seg.end; ++i) {
      const float clipped = g[i] * grad_scale;  // rounded to fp32, as AdamW reads it
      mv[i] = mv[i] + (1.0f - o.beta1) * (clipped - mv[i]);
    }
  }
  for (size_t i = 0; i < parts_.size(); ++i) {
    RETURN_IF_ERROR(averages_[i]->Run(m, parts_[i].ranges));
    error_sums_.Add(averages_[i]->error_sums());
  }
  if (!real) return absl::OkStatus();
  // AdamW's update with the averaged m and the frozen v (its correction at K = warmup).
  const double bias1 = 1.0 - std::pow(double(o.beta1), double(step_));
  const double bias2 = 1.0 - std::pow(double(o.beta2), double(warmup_));
  const float step_size = float(lr / bias1), bias2_sqrt = float(std::sqrt(bias2));
  const float* vv = v.data<float>();
  for (const optim::Segment& seg : segments) {
    const float keep = seg.decay ? float(1.0 - double(lr) * o.weight_decay) : 1.0f;
    float* p = params + seg.param_shift;
    for (int64_t i = seg.begin; i < seg.end; ++i) {
      const float kept = p[i] * keep;
      const float denom = std::sqrt(vv[i]) / bias2_sqrt + o.eps;
      p[i] = kept - step_size * (mv[i] / denom);
    }
  }
  return absl::OkStatus();
}

absl::Status OneBitAdamHook::Reduce(Tensor& grads) {
  if (grads.device().type == DeviceType::kCPU) {
    const float p = float(ranks_);
    float* g = grads.data<float>();
    for (int64_t i = 0; i < grads.numel(); ++i) g[i] *= p;
  }
  return absl::OkStatus();
}

}  // namespace tally::parallel
