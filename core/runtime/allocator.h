// Allocator: hands out storage and charges it to a MemoryLedger category.
//
//   MemoryLedger ledger;
//   Allocator alloc(&ledger);
//   std::shared_ptr<Storage> s = alloc.Allocate(4096, MemoryCategory::kActivations);
//
// Storage is 64-byte aligned (a cache line; enough for any SIMD load) and zero-filled
// (host memory asked for as Fill::kNone is left as it comes: for a buffer its user writes
// whole before reading it), and
// gives its bytes back to the ledger when the last reference to it dies. An allocator of
// a CUDA device hands out device memory (core/runtime/cuda/cuda.h), charged the same way; one
// of the meta device charges the bytes and takes none (device.h): its storage's data is an
// address no memory is mapped at. An Allocator
// belongs to one rank and is used from that rank's thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "core/runtime/device.h"
#include "core/runtime/memory_ledger.h"

namespace tally {

class Storage {
 public:
  Storage(void* data, size_t bytes, Device device, MemoryLedger* ledger, MemoryCategory category);
  // Memory somebody else owns: never freed here, never charged to a ledger.
  static std::shared_ptr<Storage> Borrow(void* data, size_t bytes, Device device);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }
  MemoryCategory category() const { return category_; }

 private:
  void* data_;
  size_t bytes_;
  Device device_;
  MemoryLedger* ledger_;  // not owned; may be null
  MemoryCategory category_;
  bool owned_ = true;
};

class Allocator {
 public:
  // `ledger` may be null (nothing is counted); it must outlive every storage handed out.
  explicit Allocator(MemoryLedger* ledger, Device device = Device::CPU())
      : ledger_(ledger), device_(device) {}

  enum class Fill { kZero, kNone };
  absl::StatusOr<std::shared_ptr<Storage>> Allocate(size_t bytes, MemoryCategory category,
                                                    Fill fill = Fill::kZero);

  MemoryLedger* ledger() const { return ledger_; }
  Device device() const { return device_; }

 private:
  MemoryLedger* ledger_;
  Device device_;
};

}  // namespace tally
