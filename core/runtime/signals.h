// Stopping a run by signal: while a StopSignals object lives, the first SIGINT or SIGTERM
// is only recorded (the run reads StopSignal() at its next step boundary, stops there,
// and exits 128 + the signal); a second one ends the process at once, as if no handler
// were installed.
//
// The signals are kept from the threads that compute: the constructing thread blocks
// them (and so every thread it or its threads start afterwards: the ranks, OpenMP's
// workers), and a thread of the object's own waits for them. A handler that interrupted
// a matmul would run on that matmul's stack, below oneDNN's JIT code's frame, and a
// signal there corrupted the heap one time in three. Threads that already existed (a
// BLAS's pool, an MPI library's) may still take one, and then run the same handler,
// which only records it.
//
//   StopSignals signals;                  // for the length of the run
//   if (StopSignal() != 0) { ...stop... }
#pragma once

#include <csignal>
#include <thread>

namespace tally {

class StopSignals {
 public:
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

 private:
  struct sigaction old_int_, old_term_;
  sigset_t old_mask_;
  std::thread waiter_;  // sigwait()s for the signals until the destructor wakes it
};

// The first SIGINT or SIGTERM received while a StopSignals lived (0: none).
int StopSignal();

// Records `signal` as received, unless one was (a signal another process of the job
// received, agreed on by all).
void NoteStopSignal(int signal);

// "SIGINT", "SIGTERM", or "signal N".
const char* SignalName(int signal);

}  // namespace tally
