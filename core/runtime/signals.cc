#include "core/runtime/signals.h"

#include <pthread.h>

#include <atomic>
#include <cstdio>

namespace tally {
namespace {

std::atomic<int> received{0};
std::atomic<bool> closing{false};

void OnSignal(int signal) {
  int none = 0;
  if (received.compare_exchange_strong(none, signal)) return;
  // The second signal: the default action (the process ends by the signal).
  std::signal(signal, SIG_DFL);
  sigset_t one;
  sigemptyset(&one);
  sigaddset(&one, signal);
  pthread_sigmask(SIG_UNBLOCK, &one, nullptr);
  std::raise(signal);
}

sigset_t StopSet() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}

}  // namespace

StopSignals::StopSignals() {
  received = 0;
  closing = false;
  struct sigaction action = {};
  action.sa_handler = OnSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGINT, &action, &old_int_);
  sigaction(SIGTERM, &action, &old_term_);
  const sigset_t stop = StopSet();
  pthread_sigmask(SIG_BLOCK, &stop, &old_mask_);
  waiter_ = std::thread([stop] {
    for (;;) {
      int signal = 0;
      if (sigwait(&stop, &signal) != 0) continue;
      if (closing) return;
      OnSignal(signal);
    }
  });
}

StopSignals::~StopSignals() {
  closing = true;
  pthread_kill(waiter_.native_handle(), SIGTERM);  // wakes its sigwait; not recorded
  waiter_.join();
  pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr);
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
