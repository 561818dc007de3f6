// A small streaming JSON writer for reports (ledgers, benchmarks, metrics).
//
//   JsonWriter w;
//   w.BeginObject();
//   w.Key("op").String("all_reduce");
//   w.Key("sizes").BeginArray().Int(8).Int(16).EndArray();
//   w.EndObject();
//   std::string text = w.str();   // {"op":"all_reduce","sizes":[8,16]}
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"

namespace tally {

class JsonWriter {
 public:
  JsonWriter& BeginObject();
  JsonWriter& EndObject();
  JsonWriter& BeginArray();
  JsonWriter& EndArray();
  JsonWriter& Key(std::string_view key);
  JsonWriter& String(std::string_view value);
  JsonWriter& Int(int64_t value);
  // A whole number below 2^53 exactly, others to 9 significant digits; non-finite values
  // as null.
  JsonWriter& Double(double value);
  JsonWriter& Bool(bool value);
  JsonWriter& IntArray(const std::vector<int64_t>& values);

  const std::string& str() const { return out_; }

 private:
  void BeforeValue();

  std::string out_;
  std::vector<bool> first_;  // per open container: no element written yet
  bool after_key_ = false;
};

// Writes `text` to `path`, replacing it whole or not at all (core/runtime/files.h).
absl::Status WriteTextFile(const std::string& path, std::string_view text);

}  // namespace tally
