// safetensors files (the Hugging Face format): an 8-byte little-endian header length, a
// JSON header, then the raw little-endian tensor data.
//
//   {"__metadata__": {"step": "100"},
//    "wte.weight": {"dtype": "F32", "shape": [256, 256], "data_offsets": [0, 262144]}, ...}
//
// data_offsets are byte ranges relative to the end of the header. tally writes F32
// tensors only, in the order given, and reads F32 tensors back with every offset, shape
// and size checked, so a truncated or corrupted file is an error, never a crash: the
// file must be a regular file of at most `max_bytes`, its header valid JSON without
// duplicate keys, with a `__metadata__` object of strings, and its tensors' byte ranges
// must be the packed sequence the header declares (sorted by offset they tile the data
// from 0 to the end of the file: no gap, no overlap, no trailing bytes).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/runtime/tensor.h"

namespace tally {

struct SafetensorsEntry {
  std::string name;
  Shape shape;
  const float* data;  // NumElements(shape) floats
};

absl::Status WriteSafetensors(const std::string& path, const std::vector<SafetensorsEntry>& tensors,
                              const std::map<std::string, std::string>& metadata);

struct SafetensorsFile {
  std::map<std::string, std::string> metadata;
  struct Tensor {
    Shape shape;
    std::vector<float> data;
  };
  std::map<std::string, Tensor> tensors;
};

absl::StatusOr<SafetensorsFile> ReadSafetensors(const std::string& path, int64_t max_bytes);

}  // namespace tally
