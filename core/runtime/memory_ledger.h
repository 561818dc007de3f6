// The memory ledger: how many bytes one rank holds, now and at its peak, by category.
//
// Every allocation made through an Allocator is charged to one category and released when
// its storage dies, so the savings of a sharding strategy (ZeRO, sequence parallel) are
// read off the ledger rather than asserted:
//
//   MemoryLedger ledger;
//   Allocator alloc(&ledger);
//   { Tensor t = ...Empty({1024}, DType::kF32, alloc, MemoryCategory::kParams); }
//   ledger.peak(MemoryCategory::kParams) == 4096, ledger.current(MemoryCategory::kParams) == 0
//
// One ledger belongs to one rank; it is not shared between threads.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"

#include "core/runtime/byte_stream.h"
#include "core/runtime/copyable_mutex.h"

namespace tally {

enum class MemoryCategory : uint8_t {
  kParams,
  kGrads,
  kOptimizer,
  kActivations,
  kComm,
  kOther,
};
inline constexpr int kNumMemoryCategories = 6;

const char* Name(MemoryCategory category);  // "params", "grads", ...

class MemoryLedger {
 public:
  void Charge(MemoryCategory category, int64_t bytes);
  void Release(MemoryCategory category, int64_t bytes);

  int64_t current(MemoryCategory category) const { return current_[Index(category)]; }
  int64_t peak(MemoryCategory category) const { return peak_[Index(category)]; }
  int64_t current_total() const { return current_total_; }
  // The largest total held at any one moment (not the sum of the per-category peaks).
  int64_t peak_total() const { return peak_total_; }

  // Starts a new measurement window: peaks restart from what is held now.
  void ResetPeaks();

  // Evaluation and sampling run between training steps, on buffers of their own: while
  // a TrainingPausedScope lives, charges count in current() as always but raise only
  // paused_peak_total(), so that the peaks above are the training steps' alone (what
  // the memory formula predicts).
  class TrainingPausedScope {
   public:
    explicit TrainingPausedScope(MemoryLedger* ledger);
    ~TrainingPausedScope();
    TrainingPausedScope(const TrainingPausedScope&) = delete;
    TrainingPausedScope& operator=(const TrainingPausedScope&) = delete;

   private:
    MemoryLedger* ledger_;
    bool was_ = false;
  };
  // The largest total held while training was paused (0: never paused).
  int64_t paused_peak_total() const { return paused_peak_total_; }

  // The ledger as bytes, and back (false: not a ledger's bytes).
  void Encode(ByteWriter& w) const;
  bool Decode(ByteReader& r);

 private:
  static int Index(MemoryCategory c) { return static_cast<int>(c); }

  // Charge, Release and ResetPeaks may come from a rank's communication thread too
  // (a non-blocking collective's scratch).
  CopyableMutex mu_;
  std::array<int64_t, kNumMemoryCategories> current_{};
  std::array<int64_t, kNumMemoryCategories> peak_{};
  int64_t current_total_ = 0;
  int64_t peak_total_ = 0;
  bool paused_ = false;
  int64_t paused_peak_total_ = 0;
};

// The machine's physical memory in bytes.
int64_t PhysicalMemoryBytes();

// Whether `needed_bytes` (a lower bound of what a run will take; in double, so that no
// size wraps) fits in this machine's memory; if not, "<what> needs at least X GiB of
// memory, and this machine has Y GiB" (kResourceExhausted).
absl::Status FitsInMemory(double needed_bytes, const std::string& what);

}  // namespace tally
