#include "extensions/zero_pp/quantize.h"

#include <algorithm>
#include <cmath>

#include "core/runtime/comm/algorithms/partition.h"
#include "core/runtime/comm/ledger/names.h"
#include "core/runtime/status_macros.h"
#include "extensions/zero_pp/names.h"

namespace tally::extensions {
namespace {

template <typename T>
float ScaleOf(const T* x, int64_t n, int qmax = 127) {
  float most = 0;
  for (int64_t i = 0; i < n; ++i) most = std::max(most, std::fabs(AsFloat(x[i])));
  return most / float(qmax);
}

template <typename T>
void QuantizeTyped(const T* x, int64_t n, int64_t block, int8_t* q, float* scales) {
  for (int64_t b = 0, begin = 0; begin < n; ++b, begin = BlockEnd(begin, n, block)) {
    const int64_t end = BlockEnd(begin, n, block);
    const float scale = ScaleOf(x + begin, end - begin);
    scales[b] = scale;
    for (int64_t i = begin; i < end; ++i) {
      // |x| <= 127·scale, so the quotient rounds into [-127, 127].
      q[i] = scale > 0 ? int8_t(std::nearbyint(AsFloat(x[i]) / scale)) : 0;
    }
  }
}

// Block by block, so that the inner loops vectorise.
template <typename T>
void DequantizeTyped(const int8_t* q, const float* scales, int64_t n, int64_t block, T* x) {
  for (int64_t b = 0, begin = 0; begin < n; ++b, begin = BlockEnd(begin, n, block)) {
    const int64_t end = BlockEnd(begin, n, block);
    const float scale = scales[b];
    for (int64_t i = begin; i < end; ++i) x[i] = StoredAs<T>(float(q[i]) * scale);
  }
}

template <typename T>
ErrorSums ErrorTyped(const T* x, int64_t n, int64_t block) {
  ErrorSums sums;
  for (int64_t begin = 0; begin < n; begin = BlockEnd(begin, n, block)) {
    const int64_t end = BlockEnd(begin, n, block);
    const float scale = ScaleOf(x + begin, end - begin);
    for (int64_t i = begin; i < end; ++i) {
      const float v = AsFloat(x[i]);
      const float back = scale > 0 ? AsFloat(StoredAs<T>(std::nearbyint(v / scale) * scale)) : 0;
      sums.residual += double(back - v) * double(back - v);
      sums.value += double(v) * double(v);
    }
  }
  return sums;
}

}  // namespace

float BlockScale(const float* x, int64_t n, int qmax) { return ScaleOf(x, n, qmax); }

void Quantize(ConstTypedPtr x, int64_t n, int64_t block, int8_t* q, float* scales) {
  if (x.type == DType::kBF16) return QuantizeTyped(x.as<BFloat16>(), n, block, q, scales);
  QuantizeTyped(x.as<float>(), n, block, q, scales);
}

void Dequantize(const int8_t* q, const float* scales, int64_t n, int64_t block, TypedPtr x) {
  if (x.type == DType::kBF16) return DequantizeTyped(q, scales, n, block, x.as<BFloat16>());
  DequantizeTyped(q, scales, n, block, x.as<float>());
}

ErrorSums QuantizationError(ConstTypedPtr x, int64_t n, int64_t block) {
  if (x.type == DType::kBF16) return ErrorTyped(x.as<BFloat16>(), n, block);
  return ErrorTyped(x.as<float>(), n, block);
}

int64_t ScalesPerRank(int64_t count, int ranks, int64_t block) {
  return BlocksOf(comm::ChunkOf(count, ranks, 0).count, block);
}

absl::Status QuantizedGather::Post(const Tensor& mine, const Tensor& all, bool blocking) {
  comm::Communicator& group = *group_;
  const int p = group.size();
  const int64_t blocks = ScalesPerRank(all.numel(), p, block_);
  Allocator comm_memory(group.allocator().ledger(), all.device());
  auto buffer = [&](int64_t n, DType type) {
    return Tensor::Empty({n}, type, comm_memory, MemoryCategory::kComm);
  };
  ASSIGN_OR_RETURN(q_mine_, buffer(mine.numel(), DType::kI8));
  ASSIGN_OR_RETURN(scales_mine_, buffer(blocks, DType::kF32));  // zeros past its own
  ASSIGN_OR_RETURN(q_all_, buffer(all.numel(), DType::kI8));
  ASSIGN_OR_RETURN(scales_all_, buffer(blocks * p, DType::kF32));
  all_ = all;
  if (mine.device().type != DeviceType::kMeta) {
    Quantize(ConstTypedPtr(mine.raw_data(), mine.dtype()), mine.numel(), block_,
             q_mine_.data<int8_t>(), scales_mine_.data<float>());
  }
  if (blocking) {
    {
      comm::LabelScope label(group.ledger(), extensions::scope::kQwz);
      RETURN_IF_ERROR(group.AllGather(q_mine_, q_all_, algorithm_));
    }
    comm::LabelScope label(group.ledger(), extensions::scope::kQwzScales);
    RETURN_IF_ERROR(group.AllGather(scales_mine_, scales_all_, algorithm_));
    return Finish();
  }
  {
    comm::LabelScope label(group.ledger(), extensions::scope::kQwz);
    ASSIGN_OR_RETURN(q_work_, group.IAllGather(q_mine_, q_all_, algorithm_));
  }
  comm::LabelScope label(group.ledger(), extensions::scope::kQwzScales);
  ASSIGN_OR_RETURN(scales_work_, group.IAllGather(scales_mine_, scales_all_, algorithm_));
  return absl::OkStatus();
}

absl::Status QuantizedGather::Finish() {
  absl::Status status;
  for (auto* work : {&q_work_, &scales_work_}) {
    if (*work != nullptr) status.Update((*work)->Wait());
    work->reset();
  }
  RETURN_IF_ERROR(status);
  if (all_.device().type != DeviceType::kMeta) {
    const int p = group_->size();
    const int64_t blocks = scales_all_.numel() / p;
    for (int r = 0; r < p; ++r) {
      const comm::Chunk c = comm::ChunkOf(all_.numel(), p, r);
      Dequantize(q_all_.data<int8_t>() + c.offset, scales_all_.data<float>() + r * blocks, c.count,
                 block_, TypedPtr(all_.Flat(c.offset, c.end()).raw_data(), all_.dtype()));
    }
  }
  q_mine_ = scales_mine_ = q_all_ = scales_all_ = all_ = Tensor();
  return absl::OkStatus();
}

}  // namespace tally::extensions
