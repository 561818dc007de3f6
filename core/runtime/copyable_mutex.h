// A mutex a copyable class can hold: a copy gets a mutex of its own (what it guards is
// copied by the class, while no other thread uses the source).
//
//   class Ledger {
//     void Add(int64_t n) { std::lock_guard<std::mutex> lock(mu_.get()); total_ += n; }
//     CopyableMutex mu_;
//     int64_t total_ = 0;
//   };
#pragma once

#include <mutex>

namespace tally {

class CopyableMutex {
 public:
  CopyableMutex() = default;
  CopyableMutex(const CopyableMutex&) {}
  CopyableMutex& operator=(const CopyableMutex&) { return *this; }
  std::mutex& get() const { return mu_; }

 private:
  mutable std::mutex mu_;
};

}  // namespace tally
