// Stopping a run by signal: while a StopSignals object lives, the first SIGINT or SIGTERM
// is only recorded (the run reads StopSignal() at its next step boundary, stops there,
// and exits 128 + the signal); a second one ends the process at once, as if no handler
// were installed.
//
//   StopSignals signals;                  // for the length of the run
//   if (StopSignal() != 0) { ...stop... }
#pragma once

#include <csignal>

namespace tally {

class StopSignals {
 public:
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

 private:
  struct sigaction old_int_, old_term_;
};

// The first SIGINT or SIGTERM received while a StopSignals lived (0: none).
int StopSignal();

// Records `signal` as received, unless one was (a signal another process of the job
// received, agreed on by all).
void NoteStopSignal(int signal);

// "SIGINT", "SIGTERM", or "signal N".
const char* SignalName(int signal);

}  // namespace tally
