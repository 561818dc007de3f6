// Where a tensor's bytes live: CPU memory, or a CUDA device's (runtime/cuda/cuda.h).
#pragma once

#include <string>

namespace tally {

enum class DeviceType { kCPU, kCUDA };

struct Device {
  DeviceType type = DeviceType::kCPU;
  int index = 0;  // GPU ordinal for kCUDA; 0 for the CPU

  static Device CPU() { return Device{}; }
  bool operator==(const Device&) const = default;
  std::string ToString() const {
    return type == DeviceType::kCPU ? "cpu" : "cuda:" + std::to_string(index);
  }
};

}  // namespace tally
