// Running the programs as a user does: a shell command's exit code and output, and the
// JSON files it writes.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>

#include "gtest/gtest.h"
#include "core/runtime/json_reader.h"

namespace tally {

struct Result {
  int exit_code;
  std::string output;  // stdout and stderr together
};

inline Result RunCommand(const std::string& command) {
  Result r{-1, ""};
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return r;
  std::array<char, 4096> buffer;
  size_t n;
  while ((n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0) r.output.append(buffer.data(), n);
  int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

// A JSON file the program wrote (an empty object if it is not valid JSON).
inline JsonValue ReadJson(const std::string& path) {
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  absl::StatusOr<JsonValue> doc = ParseJson(text);
  EXPECT_TRUE(doc.ok()) << path << ": " << doc.status();
  return doc.ok() ? *doc : JsonValue();
}

// A path in the test's scratch folder.
inline std::string Temp(const std::string& name) { return ::testing::TempDir() + "/" + name; }

}  // namespace tally
