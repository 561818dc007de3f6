// Completion: a one-shot event carrying a Status, the rendezvous point of one message.
//
// The waiter spins for a short while (a message between two awake ranks lands in well
// under a microsecond) and then sleeps on a futex, so that 64 ranks on 2 cores do not
// starve each other. It wakes every `slice` to ask `give_up` whether to stop waiting.
//
// States: pending -> claimed (a peer is copying) -> done, or pending -> cancelled (the
// waiter gave up first). A peer must Claim() before it touches the waiter's buffer, and a
// waiter can only cancel what nobody has claimed, so no copy ever lands in a buffer whose
// owner has stopped waiting for it.
#pragma once

#include <atomic>
#include <cstdint>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/time/time.h"

namespace tally::comm::threads {

struct WaitPolicy {
  absl::Duration spin = absl::Microseconds(50);  // zero when ranks outnumber cores
  absl::Duration slice = absl::Milliseconds(20);
};

class Completion {
 public:
  // pending -> claimed. False if the waiter already gave up.
  bool Claim();
  // -> done with `status`, waking the waiter. Called once, by whoever claimed or owns it.
  void Complete(absl::Status status);
  bool done() const;

  // Waits until done and returns the completion's status, or returns the first non-OK
  // status of `give_up` if the event could be cancelled before anybody claimed it.
  absl::Status Wait(const WaitPolicy& policy, absl::FunctionRef<absl::Status()> give_up);

  // Gives up at once if nobody has claimed the event; otherwise waits for the transfer
  // under way to finish. Used when a request is dropped without being waited for.
  void CancelOrFinish();

 private:
  static constexpr uint32_t kPending = 0, kClaimed = 1, kDone = 2, kCancelled = 3;
  static constexpr uint32_t kStateMask = 3, kSleeper = 4;

  bool TryCancel();
  void Sleep(uint32_t observed, absl::Duration slice);

  std::atomic<uint32_t> state_{kPending};
  absl::Status status_;  // written before the release of kDone
};

}  // namespace tally::comm::threads
