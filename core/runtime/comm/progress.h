// Progress: the communication thread that runs a communicator's non-blocking collectives
// while its rank computes.
//
// Why a thread. tally's algorithms (ring.h, naive.h, hierarchical.h) are written as the
// steps of one blocking call; making each a resumable state machine that the model polls
// between layers would rewrite every one of them, and the progress would still stop
// whenever the rank computes for long. A thread per communicator runs the very same code,
// so a non-blocking call moves the same bytes, in the same messages, into the same ledger
// rows, with the same sums (bit for bit), as the blocking one: the order of the calls of a
// group is kept by running them one after the other, in the order they were posted, and a
// blocking call on the group first waits for those queued before it (Drain).
//
// What it costs. The thread sleeps on a condition variable when it has nothing to run;
// while it runs a collective it spins and then sleeps in the transport's waits like a
// rank does. On a machine with fewer cores than ranks × 2, a communication thread and its
// rank share the cores: the transfer is hidden only while a core would otherwise idle,
// and its copies (the threads transport moves bytes with memcpy) take cycles from the
// compute. So overlap is worth it when there are cores (or a NIC, a GPU's copy engines)
// to spare; `tally_train --overlap` is off by default for that reason (README,
// Time: overlap).
//
// Only the threads transport runs its calls on another thread (Transport::
// RunsOnAnyThread): MPI is initialised for one thread's calls and NCCL enqueues on the
// rank's stream; there a non-blocking collective runs when it is posted and its Wait only
// books it.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace tally::comm {

class Progress {
 public:
  Progress();
  // Runs what is queued, then stops the thread.
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // Queues `task` behind those posted before it.
  void Post(std::function<void()> task);
  // Returns when every task posted so far has run.
  void Drain();

 private:
  void Loop();

  std::mutex mu_;
  std::condition_variable wake_, idle_;
  std::deque<std::function<void()>> tasks_;
  bool running_ = false;  // a task is running now
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace tally::comm
