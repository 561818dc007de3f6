// The meta device's kernels (device.h): every operation does nothing, so a dry run
// (--dry_run) runs the model's real code, with its real allocations booked, in no time.
// The kernels count their work (work.h) as every device's kernels do.
// A value read back to the host is zero (the loss, the gradient norm's squares), and the
// scratch a kernel asks for is the CPU kernels', so that a dry run books what a CPU run
// takes.
#include "core/runtime/kernels/kernels.h"

#include <cstring>

#include "core/runtime/kernels/work.h"

namespace tally {
namespace {

class MetaKernels final : public Kernels {
 public:
  explicit MetaKernels(MatmulInputs inputs) : inputs_(inputs) {}

  Device device() const override { return Device::Meta(); }
  MatmulInputs matmul_inputs() const override { return inputs_; }

  absl::Status Copy(void*, const void*, size_t) override { return absl::OkStatus(); }
  absl::Status FromHost(void*, const void*, size_t) override { return absl::OkStatus(); }
  absl::Status ToHost(void* host, const void*, size_t bytes) override {
    if (bytes > 0) std::memset(host, 0, bytes);
    return absl::OkStatus();
  }
  absl::Status Zero(void*, size_t) override { return absl::OkStatus(); }

  absl::Status LinearForward(float*, ConstTypedPtr, ConstTypedPtr, const float*, int n, int c,
                             int oc) override {
    CountLinearForward(n, c, oc);
    return absl::OkStatus();
  }
  absl::Status LinearBackward(float*, float*, float*, const float*, ConstTypedPtr, ConstTypedPtr,
                              int n, int c, int oc) override {
    CountLinearBackward(n, c, oc);
    return absl::OkStatus();
  }
  absl::Status AttentionForward(float*, float*, ConstTypedPtr, int b, int t, int c,
                                int nh) override {
    CountAttentionForward(b, t, c, nh);
    return absl::OkStatus();
  }
  // The CPU kernels' (cpu_kernels.cc): one head's T×T probabilities' gradients.
  int64_t AttentionScratch(int t, int) const override { return int64_t(t) * t; }
  absl::Status AttentionBackward(float*, float*, const float*, ConstTypedPtr, const float*, int b,
                                 int t, int c, int nh) override {
    CountAttentionBackward(b, t, c, nh);
    return absl::OkStatus();
  }
  absl::Status LayerNormForward(TypedPtr, float*, float*, const float*, const float*,
                                const float*, int n, int c) override {
    CountLayerNormForward(n, c);
    return absl::OkStatus();
  }
  absl::Status LayerNormBackward(float*, float*, float*, const float*, const float*,
                                 const float*, const float*, const float*, int n,
                                 int c) override {
    CountLayerNormBackward(n, c);
    return absl::OkStatus();
  }
  absl::Status GeluForward(TypedPtr, const float*, int64_t n) override {
    CountGeluForward(n);
    return absl::OkStatus();
  }
  absl::Status GeluBackward(float*, const float*, const float*, int64_t n) override {
    CountGeluBackward(n);
    return absl::OkStatus();
  }
  absl::Status AddInPlace(float*, const float*, int64_t n) override {
    CountResidual(n);
    return absl::OkStatus();
  }
  absl::Status AddBias(float*, const float*, int64_t, int) override { return absl::OkStatus(); }

  absl::Status EmbeddingLookup(float*, const int32_t*, const float*, int64_t, int, int64_t,
                               int) override {
    return absl::OkStatus();
  }
  absl::Status EmbeddingLookupBackward(float*, const float*, const int32_t*, int64_t, int,
                                       int64_t, int) override {
    return absl::OkStatus();
  }
  absl::Status AddPositions(float*, const float*, int64_t, int, int, int) override {
    return absl::OkStatus();
  }
  absl::Status AddPositionsBackward(float*, const float*, int64_t, int, int, int) override {
    return absl::OkStatus();
  }

  absl::Status LogitMax(float*, const float*, int n, int vocab, int) override {
    CountLogitsPass(n, vocab, 1);
    return absl::OkStatus();
  }
  absl::Status SoftmaxExp(float*, float*, float*, const float*, const float*, const int32_t*,
                          int64_t, int n, int vocab, int) override {
    CountLogitsPass(n, vocab, 2);
    return absl::OkStatus();
  }
  absl::Status SoftmaxLoss(float*, float*, const float*, const float*, const float*, int n,
                           int vocab, int) override {
    CountLogitsPass(n, vocab, 2);
    return absl::OkStatus();
  }
  absl::Status CrossEntropyBackward(float*, const float*, const int32_t*, int64_t, float, int n,
                                    int vocab) override {
    CountLogitsPass(n, vocab, 2);
    return absl::OkStatus();
  }

  absl::Status Convert(void*, DType, const void*, DType, int64_t) override {
    return absl::OkStatus();
  }
  absl::Status Accumulate(void*, DType, const void*, DType, int64_t) override {
    return absl::OkStatus();
  }

  absl::StatusOr<double> AddSquares(const void*, DType, int64_t, double sum) override {
    return sum;
  }
  absl::Status Scale(void*, DType, int64_t, float) override { return absl::OkStatus(); }
  absl::Status AdamW(float*, const void*, DType, float*, float*, int64_t n,
                     const AdamWArgs&) override {
    CountAdamW(n);
    return absl::OkStatus();
  }
  absl::Status Sgd(float*, const void*, DType, float*, int64_t, float, float, float, bool,
                   float) override {
    return absl::OkStatus();
  }

 private:
  MatmulInputs inputs_;
};

}  // namespace

std::unique_ptr<Kernels> CreateMetaKernels(MatmulInputs inputs) {
  return std::make_unique<MetaKernels>(inputs);
}

}  // namespace tally
