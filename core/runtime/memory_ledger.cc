#include "core/runtime/memory_ledger.h"

#include <unistd.h>

#include <algorithm>

#include "absl/strings/str_format.h"
#include "core/runtime/status_macros.h"

namespace tally {

const char* Name(MemoryCategory category) {
  switch (category) {
    case MemoryCategory::kParams: return "params";
    case MemoryCategory::kGrads: return "grads";
    case MemoryCategory::kOptimizer: return "optimizer";
    case MemoryCategory::kActivations: return "activations";
    case MemoryCategory::kComm: return "comm";
    case MemoryCategory::kOther: return "other";
  }
  return "?";
}

void MemoryLedger::Charge(MemoryCategory category, int64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_.get());
  int i = Index(category);
  current_[i] += bytes;
  current_total_ += bytes;
  if (paused_) {
    paused_peak_total_ = std::max(paused_peak_total_, current_total_);
    return;
  }
  peak_[i] = std::max(peak_[i], current_[i]);
  peak_total_ = std::max(peak_total_, current_total_);
}

void MemoryLedger::Release(MemoryCategory category, int64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_.get());
  int i = Index(category);
  CHECK(current_[i] >= bytes) << "releasing " << bytes << " bytes of " << Name(category)
                              << " but only " << current_[i] << " are held";
  current_[i] -= bytes;
  current_total_ -= bytes;
}

void MemoryLedger::ResetPeaks() {
  std::lock_guard<std::mutex> lock(mu_.get());
  peak_ = current_;
  peak_total_ = current_total_;
}
MemoryLedger::TrainingPausedScope::TrainingPausedScope(MemoryLedger* ledger) : ledger_(ledger) {
  if (ledger_ == nullptr) return;
  std::lock_guard<std::mutex> lock(ledger_->mu_.get());
  was_ = ledger_->paused_;
  ledger_->paused_ = true;
  ledger_->paused_peak_total_ = std::max(ledger_->paused_peak_total_, ledger_->current_total_);
}

MemoryLedger::TrainingPausedScope::~TrainingPausedScope() {
  if (ledger_ == nullptr) return;
  std::lock_guard<std::mutex> lock(ledger_->mu_.get());
  ledger_->paused_ = was_;
}

void MemoryLedger::Encode(ByteWriter& w) const {
  for (int i = 0; i < kNumMemoryCategories; ++i) w.Int(current_[i]).Int(peak_[i]);
  w.Int(current_total_).Int(peak_total_).Int(paused_peak_total_);
}

bool MemoryLedger::Decode(ByteReader& r) {
  for (int i = 0; i < kNumMemoryCategories; ++i) {
    current_[i] = r.Int();
    peak_[i] = r.Int();
  }
  current_total_ = r.Int();
  peak_total_ = r.Int();
  paused_peak_total_ = r.Int();
  return r.ok();
}

int64_t PhysicalMemoryBytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? int64_t(pages) * page : int64_t(1) << 62;
}

absl::Status FitsInMemory(double needed_bytes, const std::string& what) {
  const double machine = double(PhysicalMemoryBytes()), gib = double(1 << 30);
  if (needed_bytes <= machine) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrFormat(
      "%s needs at least %.3g GiB of memory, and this machine has %.3g GiB", what,
      needed_bytes / gib, machine / gib));
}

}  // namespace tally
