// Where a tensor's bytes live: CPU memory, or a CUDA device's (core/runtime/cuda/cuda.h), or
// nowhere: a "meta" tensor (PyTorch's device="meta") has a shape, a type and a place in
// the memory ledger at its real size, and no bytes. Kernels on it do nothing, and the
// collectives move no payload while counting every byte (a dry run, --dry_run).
#pragma once

#include <string>

namespace tally {

enum class DeviceType { kCPU, kCUDA, kMeta };

struct Device {
  DeviceType type = DeviceType::kCPU;
  int index = 0;  // GPU ordinal for kCUDA; 0 for the CPU

  static Device CPU() { return Device{}; }
  static Device Meta() { return Device{DeviceType::kMeta, 0}; }
  bool operator==(const Device&) const = default;
  std::string ToString() const {
    if (type == DeviceType::kMeta) return "meta";
    return type == DeviceType::kCPU ? "cpu" : "cuda:" + std::to_string(index);
  }
};

}  // namespace tally
