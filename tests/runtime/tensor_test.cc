#include "core/runtime/tensor.h"

#include "gtest/gtest.h"

namespace tally {
namespace {

TEST(Tensor, EmptyIsZeroFilledAndChargedToItsCategory) {
  MemoryLedger ledger;
  Allocator alloc(&ledger);
  {
    Tensor t = Tensor::Empty({4, 8}, DType::kF32, alloc, MemoryCategory::kParams).value();
    EXPECT_EQ(t.numel(), 32);
    EXPECT_EQ(t.nbytes(), 128u);
    for (int i = 0; i < 32; ++i) EXPECT_EQ(t.data<float>()[i], 0.0f);
    EXPECT_EQ(ledger.current(MemoryCategory::kParams), 128);
    Tensor g = Tensor::Empty({16}, DType::kF32, alloc, MemoryCategory::kGrads).value();
    EXPECT_EQ(ledger.current_total(), 192);
  }
  EXPECT_EQ(ledger.current_total(), 0);
  EXPECT_EQ(ledger.peak(MemoryCategory::kParams), 128);
  EXPECT_EQ(ledger.peak(MemoryCategory::kGrads), 64);
  EXPECT_EQ(ledger.peak_total(), 192);
  ledger.ResetPeaks();
  EXPECT_EQ(ledger.peak_total(), 0);
}

TEST(MemoryLedger, WhatIsHeldWhileTrainingIsPausedRaisesOnlyItsOwnPeak) {
  MemoryLedger ledger;
  ledger.Charge(MemoryCategory::kParams, 100);
  ledger.Charge(MemoryCategory::kActivations, 50);
  ledger.Release(MemoryCategory::kActivations, 50);
  EXPECT_EQ(ledger.paused_peak_total(), 0);
  {
    MemoryLedger::TrainingPausedScope paused(&ledger);
    {
      MemoryLedger::TrainingPausedScope nested(&ledger);
      ledger.Charge(MemoryCategory::kActivations, 80);
    }
    ledger.Charge(MemoryCategory::kActivations, 10);  // still paused: the outer scope lives
    EXPECT_EQ(ledger.current_total(), 190);
    ledger.Release(MemoryCategory::kActivations, 90);
  }
  EXPECT_EQ(ledger.peak(MemoryCategory::kActivations), 50);
  EXPECT_EQ(ledger.peak_total(), 150);
  EXPECT_EQ(ledger.paused_peak_total(), 190);
  ledger.Charge(MemoryCategory::kActivations, 60);  // training again
  EXPECT_EQ(ledger.peak(MemoryCategory::kActivations), 60);
  EXPECT_EQ(ledger.peak_total(), 160);
  // The ledger travels to rank 0 as bytes, the paused peak with it.
  ByteWriter w;
  ledger.Encode(w);
  MemoryLedger copy;
  ByteReader r(w.bytes());
  ASSERT_TRUE(copy.Decode(r));
  EXPECT_EQ(copy.paused_peak_total(), 190);
  EXPECT_EQ(copy.peak_total(), 160);
}

TEST(Tensor, SliceIsAViewOfTheSameStorage) {
  MemoryLedger ledger;
  Allocator alloc(&ledger);
  Tensor t = Tensor::Empty({5, 3}, DType::kF32, alloc).value();
  for (int i = 0; i < 15; ++i) t.data<float>()[i] = float(i);
  Tensor rows = t.Slice(1, 3);
  EXPECT_EQ(rows.shape(), (Shape{2, 3}));
  EXPECT_EQ(rows.data<float>()[0], 3.0f);
  rows.data<float>()[5] = -1.0f;  // element (2, 2) of t
  EXPECT_EQ(t.data<float>()[8], -1.0f);
  EXPECT_EQ(ledger.current_total(), 60);  // no copy was made

  Tensor flat = t.Flat(13, 15);
  EXPECT_EQ(flat.data<float>()[1], 14.0f);
  Tensor reshaped = t.Reshape({15}).value();
  EXPECT_EQ(reshaped.data<float>()[8], -1.0f);
  EXPECT_FALSE(t.Reshape({4, 4}).ok());
  EXPECT_EQ(t.Slice(5, 5).numel(), 0);
}

TEST(Tensor, RejectsNegativeDimensions) {
  Allocator alloc(nullptr);
  absl::StatusOr<Tensor> t = Tensor::Empty({3, -1}, DType::kF32, alloc);
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(TensorDeathTest, WrongTypeOrOutOfRangeSliceIsAnInvariantViolation) {
  Allocator alloc(nullptr);
  Tensor t = Tensor::Empty({4}, DType::kF32, alloc).value();
  EXPECT_DEATH(t.data<int32_t>(), "tensor is f32, asked for i32");
  EXPECT_DEATH(t.Slice(2, 5), "Slice\\(2, 5\\)");
}

TEST(DType, SizesNamesAndBFloat16Rounding) {
  EXPECT_EQ(SizeOf(DType::kBF16), 2u);
  EXPECT_EQ(ParseDType("f64").value(), DType::kF64);
  EXPECT_FALSE(ParseDType("f16").ok());
  EXPECT_EQ(BFloat16::FromFloat(1.0f).bits, 0x3f80);
  EXPECT_EQ(BFloat16::FromFloat(3.0f).ToFloat(), 3.0f);
  // 1 + 2^-8 lies halfway between two bf16 values and rounds to the even one, 1.0.
  EXPECT_EQ(BFloat16::FromFloat(1.0f + 0x1.0p-8f).ToFloat(), 1.0f);
}

}  // namespace
}  // namespace tally
