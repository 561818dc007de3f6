#include "runtime/signals.h"

#include <atomic>
#include <cstdio>

namespace tally {
namespace {

std::atomic<int> received{0};

void OnSignal(int signal) {
  int none = 0;
  if (received.compare_exchange_strong(none, signal)) return;
  // The second signal: the default action (the process ends by the signal).
  std::signal(signal, SIG_DFL);
  std::raise(signal);
}

}  // namespace

StopSignals::StopSignals() {
  received = 0;
  struct sigaction action = {};
  action.sa_handler = OnSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGINT, &action, &old_int_);
  sigaction(SIGTERM, &action, &old_term_);
}

StopSignals::~StopSignals() {
  sigaction(SIGINT, &old_int_, nullptr);
  sigaction(SIGTERM, &old_term_, nullptr);
}

int StopSignal() { return received.load(); }

void NoteStopSignal(int signal) {
  int none = 0;
  received.compare_exchange_strong(none, signal);
}

const char* SignalName(int signal) {
  if (signal == SIGINT) return "SIGINT";
  if (signal == SIGTERM) return "SIGTERM";
  static thread_local char name[32];
  std::snprintf(name, sizeof(name), "signal %d", signal);
  return name;
}

}  // namespace tally
