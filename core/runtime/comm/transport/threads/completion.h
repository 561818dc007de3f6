// Completion: the state word of one posted message, which its owner waits on.
//
//   pending -> linked -> done        (the peer posted its half after us: either side may
//                                     now claim the transfer and move the bytes)
//   pending -> done                  (the peer found our half queued and moved the bytes)
//
// The owner spins for a short while (a message between two awake ranks lands in well
// under a microsecond) and then sleeps on a futex, so that 64 ranks on 2 cores do not
// starve each other. Sleepers are woken by Link() and Complete().
#pragma once

#include <atomic>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace tally::comm::threads {

class Completion {
 public:
  enum State : uint32_t { kPending = 0, kLinked = 1, kDone = 2 };

  State state() const { return State(word_.load(std::memory_order_acquire) & kStateMask); }
  // pending -> linked, waking the owner so that it can claim the transfer.
  void Link();
  // -> done with `status`, waking the owner. Called once.
  void Complete(absl::Status status);
  // The status passed to Complete(); valid once state() is kDone.
  const absl::Status& status() const { return status_; }

  // Sleeps until the state changes from `seen` or `timeout` passes (spurious wake-ups are
  // possible; callers re-check).
  void SleepWhile(State seen, absl::Duration timeout);

 private:
  static constexpr uint32_t kStateMask = 3, kSleeper = 4;
  void Publish(uint32_t state);

  std::atomic<uint32_t> word_{kPending};
  absl::Status status_;  // written before the release of kDone
};

// Spins politely for a few cycles.
void CpuRelax();

}  // namespace tally::comm::threads
