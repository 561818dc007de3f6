// Kernels on the CPU: the reference kernels of this directory, and the loops the model
// used to run inline (bias, embedding slices, the vocabulary-parallel softmax, the
// optimizers), in the order of operations every CPU result so far was computed in.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/runtime/kernels/cpu/attention.h"
#include "core/runtime/kernels/cpu/convert.h"
#include "core/runtime/kernels/cpu/fast_math.h"
#include "core/runtime/kernels/cpu/gelu.h"
#include "core/runtime/kernels/cpu/layernorm.h"
#include "core/runtime/kernels/cpu/linear.h"
#include "core/runtime/kernels/cpu/optimizer.h"
#include "core/runtime/kernels/cpu/parallel.h"
#include "core/runtime/kernels/cpu/gemm.h"
#include "core/runtime/kernels/kernels.h"
#include "core/runtime/kernels/work.h"

namespace tally {
namespace {

absl::Status UnsupportedConversion(DType to, DType from) {
  return absl::InvalidArgumentError(
      absl::StrCat("[kernels] no conversion from ", Name(from), " to ", Name(to)));
}

class CpuKernels final : public Kernels {
 public:
  explicit CpuKernels(MatmulInputs inputs) : inputs_(inputs) {}
  Device device() const override { return Device::CPU(); }

  absl::Status Copy(void* to, const void* from, size_t bytes) override {
    if (to != from) std::memmove(to, from, bytes);
    return absl::OkStatus();
  }
  absl::Status FromHost(void* to, const void* host, size_t bytes) override {
    return Copy(to, host, bytes);
  }
  absl::Status ToHost(void* host, const void* from, size_t bytes) override {
    return Copy(host, from, bytes);
  }
  absl::Status Zero(void* to, size_t bytes) override {
    std::memset(to, 0, bytes);
    return absl::OkStatus();
  }

  MatmulInputs matmul_inputs() const override { return inputs_; }

  absl::Status LinearForward(float* y, ConstTypedPtr x, ConstTypedPtr w, const float* b, int n,
                             int c, int oc) override {
    CountLinearForward(n, c, oc);
    return WithOperand(x, [&](auto* xs) {
      return WithOperand(w, [&](auto* ws) {
        cpu::LinearForward(y, xs, ws, b, n, c, oc, inputs_);
        return absl::OkStatus();
      });
    });
  }
  absl::Status LinearBackward(float* dx, float* dw, float* db, const float* dy, ConstTypedPtr x,
                              ConstTypedPtr w, int n, int c, int oc) override {
    CountLinearBackward(n, c, oc);
    return WithOperand(x, [&](auto* xs) {
      return WithOperand(w, [&](auto* ws) {
        cpu::LinearBackward(dx, dw, db, dy, xs, ws, n, c, oc, /*accumulate_dx=*/false, inputs_);
        return absl::OkStatus();
      });
    });
  }
  absl::Status AttentionForward(float* y, float* att, ConstTypedPtr qkv, int b, int t, int c,
                                int nh) override {
    CountAttentionForward(b, t, c, nh);
    return WithOperand(qkv, [&](auto* q) {
      cpu::AttentionForward(y, att, q, b, t, c, nh, inputs_);
      return absl::OkStatus();
    });
  }
  int64_t AttentionScratch(int t, int) const override { return int64_t(t) * t; }
  absl::Status AttentionBackward(float* dqkv, float* scratch, const float* dy, ConstTypedPtr qkv,
                                 const float* att, int b, int t, int c, int nh) override {
    CountAttentionBackward(b, t, c, nh);
    return WithOperand(qkv, [&](auto* q) {
      cpu::AttentionBackward(dqkv, scratch, dy, q, att, b, t, c, nh, inputs_);
      return absl::OkStatus();
    });
  }
  absl::Status LayerNormForward(TypedPtr y, float* mean, float* rstd, const float* x,
                                const float* w, const float* b, int n, int c) override {
    CountLayerNormForward(n, c);
    return WithOutput(y, [&](auto* ys) {
      cpu::LayerNormForward(ys, mean, rstd, x, w, b, n, c);
      return absl::OkStatus();
    });
  }
  absl::Status LayerNormBackward(float* dx, float* dw, float* db, const float* dy, const float* x,
                                 const float* w, const float* mean, const float* rstd, int n,
                                 int c) override {
    CountLayerNormBackward(n, c);
    cpu::LayerNormBackward(dx, dw, db, dy, x, w, mean, rstd, n, c);
    return absl::OkStatus();
  }
  absl::Status GeluForward(TypedPtr y, const float* x, int64_t n) override {
    CountGeluForward(n);
    return WithOutput(y, [&](auto* ys) {
      cpu::GeluForward(ys, x, long(n));
      return absl::OkStatus();
    });
  }
  absl::Status GeluBackward(float* dx, const float* x, const float* dy, int64_t n) override {
    CountGeluBackward(n);
    cpu::GeluBackward(dx, x, dy, long(n));
    return absl::OkStatus();
  }
  absl::Status AddInPlace(float* y, const float* x, int64_t n) override {
    CountResidual(n);
    cpu::ParallelFor(n, cpu::GrainFor(1), [&](int64_t first, int64_t last) {
      for (int64_t i = first; i < last; ++i) y[i] += x[i];
    });
    return absl::OkStatus();
  }
  absl::Status AddBias(float* y, const float* b, int64_t rows, int c) override {
    cpu::ParallelFor(rows, cpu::GrainFor(c), [&](int64_t first, int64_t last) {
      for (int64_t i = first; i < last; ++i) {
        float* row = y + i * c;
        for (int j = 0; j < c; ++j) row[j] += b[j];
      }
    });
    return absl::OkStatus();
  }

  absl::Status EmbeddingLookup(float* x, const int32_t* tokens, const float* wte, int64_t first,
                               int vocab, int64_t n, int c) override {
    cpu::ParallelFor(n, cpu::GrainFor(c), [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        float* out = x + i * c;
        const int64_t row = tokens[i] - first;
        if (row >= 0 && row < vocab) {
          std::memcpy(out, wte + row * c, sizeof(float) * size_t(c));
        } else {
          std::fill(out, out + c, 0.0f);
        }
      }
    });
    return absl::OkStatus();
  }
  absl::Status EmbeddingLookupBackward(float* dwte, const float* dx, const int32_t* tokens,
                                       int64_t first, int vocab, int64_t n, int c) override {
    // By columns: a token's row takes its positions' gradients in order.
    cpu::ParallelFor(c, cpu::GrainFor(n), [&](int64_t begin, int64_t end) {
      for (int64_t i = 0; i < n; ++i) {
        const int64_t row = tokens[i] - first;
        if (row < 0 || row >= vocab) continue;
        const float* g = dx + i * c;
        float* tok = dwte + row * c;
        for (int64_t k = begin; k < end; ++k) tok[k] += g[k];
      }
    });
    return absl::OkStatus();
  }
  absl::Status AddPositions(float* x, const float* wpe, int64_t rows, int period, int offset,
                            int c) override {
    cpu::ParallelFor(rows, cpu::GrainFor(c), [&](int64_t first, int64_t last) {
      for (int64_t i = first; i < last; ++i) {
        const float* pos = wpe + (offset + i % period) * c;
        float* out = x + i * c;
        for (int k = 0; k < c; ++k) out[k] += pos[k];
      }
    });
    return absl::OkStatus();
  }
  absl::Status AddPositionsBackward(float* dwpe, const float* dx, int64_t rows, int period,
                                    int offset, int c) override {
    cpu::ParallelFor(c, cpu::GrainFor(rows), [&](int64_t first, int64_t last) {
      for (int64_t i = 0; i < rows; ++i) {
        const float* g = dx + i * c;
        float* pos = dwpe + (offset + i % period) * c;
        for (int64_t k = first; k < last; ++k) pos[k] += g[k];
      }
    });
    return absl::OkStatus();
  }

  absl::Status LogitMax(float* max, const float* logits, int n, int vocab, int valid) override {
    CountLogitsPass(n, vocab, 1);
    cpu::ParallelFor(n, cpu::GrainFor(valid), [&](int64_t first, int64_t last) {
      for (int64_t i = first; i < last; ++i) {
        const float* row = logits + i * vocab;
        float m = -INFINITY;
        for (int j = 0; j < valid; ++j) m = std::max(m, row[j]);
        max[i] = m;
      }
    });
    return absl::OkStatus();
  }
  absl::Status SoftmaxExp(float* probs, float* sum, float* target, const float* logits,
                          const float* max, const int32_t* targets, int64_t first, int n, int vocab,
                          int valid) override {
    CountLogitsPass(n, vocab, 2);
    cpu::ParallelFor(n, cpu::GrainFor(2 * vocab), [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const float* row = logits + i * vocab;
        float* p = probs + i * vocab;
        cpu::ExpMinus(p, row, max[i], valid);  // the global max: exp cannot overflow
        float s = 0;
        for (int j = 0; j < valid; ++j) s += p[j];
        std::fill(p + valid, p + vocab, 0.0f);
        sum[i] = s;
        const int64_t column = targets[i] - first;
        target[i] = column >= 0 && column < valid ? row[column] : 0.0f;
      }
    });
    return absl::OkStatus();
  }
  absl::Status SoftmaxLoss(float* probs, float* losses, const float* sum, const float* target,
                           const float* max, int n, int vocab, int valid) override {
    CountLogitsPass(n, vocab, 2);
    cpu::ParallelFor(n, cpu::GrainFor(vocab), [&](int64_t first, int64_t last) {
      for (int64_t i = first; i < last; ++i) {
        float* p = probs + i * vocab;
        const float inv = 1.0f / sum[i];
        for (int j = 0; j < valid; ++j) p[j] *= inv;
        // log p[target] from the logits, which keeps precision where p underflows.
        losses[i] = std::log(sum[i]) - (target[i] - max[i]);
      }
    });
    return absl::OkStatus();
  }
  absl::Status CrossEntropyBackward(float* dlogits, const float* probs, const int32_t* targets,
                                    int64_t first, float dloss, int n, int vocab) override {
    CountLogitsPass(n, vocab, 2);
    cpu::ParallelFor(n, cpu::GrainFor(vocab), [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const float* p = probs + i * vocab;
        float* d = dlogits + i * vocab;
        for (int j = 0; j < vocab; ++j) d[j] = p[j] * dloss;
        const int64_t column = targets[i] - first;
        if (column >= 0 && column < vocab) d[column] -= dloss;
      }
    });
    return absl::OkStatus();
  }

  absl::Status Convert(void* to, DType to_type, const void* from, DType from_type,
                       int64_t n) override {
    if (to_type == from_type) return Copy(to, from, size_t(n) * SizeOf(to_type));
    if (to_type == DType::kBF16 && from_type == DType::kF32) {
      cpu::RoundToBF16(static_cast<BFloat16*>(to), static_cast<const float*>(from), 1, n, n);
      return absl::OkStatus();
    }
    if (to_type == DType::kF32 && from_type == DType::kBF16) {
      auto* y = static_cast<float*>(to);
      const auto* x = static_cast<const BFloat16*>(from);
      cpu::ParallelFor(n, cpu::GrainFor(1), [&](int64_t first, int64_t last) {
        cpu::Widen(y + first, x + first, last - first);
      });
      return absl::OkStatus();
    }
    return UnsupportedConversion(to_type, from_type);
  }
  absl::Status Accumulate(void* to, DType to_type, const void* from, DType from_type,
                          int64_t n) override {
    if (to_type != DType::kF32 && to_type != DType::kBF16) {
      return UnsupportedConversion(to_type, from_type);
    }
    return WithValues(from_type, from, [&](auto* x) -> absl::Status {
      return WithOutput(TypedPtr(to, to_type), [&](auto* y) -> absl::Status {
        cpu::ParallelFor(n, cpu::GrainFor(1), [&](int64_t first, int64_t last) {
          cpu::Accumulate(y + first, x + first, last - first);
        });
        return absl::OkStatus();
      });
    });
  }

  absl::StatusOr<double> AddSquares(const void* x, DType type, int64_t n, double sum) override {
    // Blocks of 2^14 elements, each one cpu::SumOfSquares (eight lanes, in a fixed order)
    // on whichever thread takes it, the blocks' sums then added to `sum` in order: the same
    // bits on any thread count.
    constexpr int64_t kBlock = int64_t(1) << 14;
    const int64_t blocks = (n + kBlock - 1) / kBlock;
    thread_local std::vector<double> partial;
    partial.assign(size_t(blocks), 0.0);  // kept between calls: no allocation once grown
    double* block_sums = partial.data();
    return WithValues(type, x, [&](auto* g) -> absl::StatusOr<double> {
      cpu::ParallelFor(blocks, 1, [&](int64_t first, int64_t last) {
        for (int64_t b = first; b < last; ++b) {
          block_sums[b] = cpu::SumOfSquares(g + b * kBlock, std::min(kBlock, n - b * kBlock));
        }
      });
      for (int64_t b = 0; b < blocks; ++b) sum += block_sums[b];
      return sum;
    });
  }
  absl::Status Scale(void* x, DType type, int64_t n, float factor) override {
    if (type == DType::kF32) {
      auto* y = static_cast<float*>(x);
      cpu::ParallelFor(n, cpu::GrainFor(1), [&](int64_t first, int64_t last) {
        for (int64_t i = first; i < last; ++i) y[i] *= factor;
      });
      return absl::OkStatus();
    }
    if (type != DType::kBF16) return UnsupportedConversion(type, DType::kF32);
    auto* y = static_cast<BFloat16*>(x);
    cpu::ParallelFor(n, cpu::GrainFor(1), [&](int64_t first, int64_t last) {
      for (int64_t i = first; i < last; ++i) y[i] = BFloat16::FromFloat(y[i].ToFloat() * factor);
    });
    return absl::OkStatus();
  }
  absl::Status AdamW(float* params, const void* grads, DType grad_type, float* m, float* v,
                     int64_t n, const AdamWArgs& a) override {
    CountAdamW(n);
    return WithValues(grad_type, grads, [&](auto* grad) -> absl::Status {
      cpu::ParallelFor(n, cpu::GrainFor(8), [&](int64_t first, int64_t last) {
        cpu::AdamW(params + first, grad + first, m + first, v + first, last - first, a);
      });
      return absl::OkStatus();
    });
  }
  absl::Status Sgd(float* params, const void* grads, DType grad_type, float* momentum, int64_t n,
                   float lr, float mu, float wd, bool first, float grad_scale) override {
    return WithValues(grad_type, grads, [&](auto* grad) -> absl::Status {
      cpu::ParallelFor(n, cpu::GrainFor(4), [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          float g = cpu::Clipped(grad[i], grad_scale) + wd * params[i];
          momentum[i] = first ? g : mu * momentum[i] + g;
          params[i] -= lr * momentum[i];
        }
      });
      return absl::OkStatus();
    });
  }

 private:
  // body(values as const float* or const BFloat16*: gradients, matmul inputs), whose
  // result it returns; an error for any other type.
  template <typename Body>
  static auto WithValues(DType type, const void* grads, Body body)
      -> decltype(body(static_cast<const float*>(nullptr))) {
    if (type == DType::kF32) return body(static_cast<const float*>(grads));
    if (type == DType::kBF16) return body(static_cast<const BFloat16*>(grads));
    return UnsupportedConversion(type, DType::kF32);
  }

  // WithValues for a matmul input, which is bf16 only when the matmuls take bf16.
  template <typename Body>
  absl::Status WithOperand(ConstTypedPtr x, Body body) const {
    if (x.type == DType::kBF16 && inputs_ != MatmulInputs::kBF16) {
      return absl::InvalidArgumentError(absl::StrCat("[kernels] a matmul input of type ",
                                                     Name(x.type), " with ", Name(inputs_),
                                                     " matmul inputs"));
    }
    return WithValues(x.type, x.data, body);
  }
  // body(y as float* or BFloat16*); an error for any other type.
  template <typename Body>
  static absl::Status WithOutput(TypedPtr y, Body body) {
    if (y.type == DType::kF32) return body(y.as<float>());
    if (y.type == DType::kBF16) return body(y.as<BFloat16>());
    return UnsupportedConversion(y.type, DType::kF32);
  }

  MatmulInputs inputs_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Kernels>> Kernels::Create(Device device, MatmulInputs inputs) {
  if (device.type == DeviceType::kCUDA) return CreateCudaKernels(device.index, inputs);
  if (device.type == DeviceType::kMeta) return CreateMetaKernels(inputs);
  if (inputs == MatmulInputs::kTF32) {
    return absl::InvalidArgumentError(
        "[kernels] TF32 matmuls are CUDA's (--tf32 needs --device=cuda)");
  }
  return std::unique_ptr<Kernels>(new CpuKernels(inputs));
}

}  // namespace tally
