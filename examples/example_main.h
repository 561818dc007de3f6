// The main() of every example program: parse the flags, run, and turn a Status into one
// line on stderr and a non-zero exit code: 1 for an error, and an exception that escapes
// `run` (std::bad_alloc, ...) is one too; 128 + N for a run stopped by signal N
// (kCancelled, runtime/signals.h); 2 for a stray argument.
//
//   int main(int argc, char** argv) { return tally::RunExample(argc, argv, "usage", Main); }
#pragma once

#include <cstdio>
#include <exception>
#include <new>
#include <string>
#include <vector>

#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "runtime/signals.h"

namespace tally {

namespace internal_example {

// Runs `run`, and turns its Status (or an exception) into the exit code.
template <typename Run>
int Finish(Run run) {
  absl::Status status;
  try {
    status = run();
  } catch (const std::bad_alloc&) {
    status = absl::ResourceExhaustedError("out of memory (std::bad_alloc); try smaller sizes");
  } catch (const std::exception& e) {
    status = absl::InternalError(std::string("unexpected error: ") + e.what());
  } catch (...) {
    status = absl::InternalError("unexpected error (an unknown exception)");
  }
  if (absl::IsCancelled(status) && StopSignal() != 0) {
    if (!status.message().empty()) std::fprintf(stderr, "%s\n", std::string(status.message()).c_str());
    return 128 + StopSignal();
  }
  if (!status.ok()) {
    // An error without a message was reported by another process of the job (MPI).
    if (!status.message().empty()) std::fprintf(stderr, "%s\n", std::string(status.message()).c_str());
    return 1;
  }
  return 0;
}

}  // namespace internal_example

inline int RunExample(int argc, char** argv, const char* usage, absl::Status (*run)()) {
  absl::SetProgramUsageMessage(usage);
  std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  if (positional.size() > 1) {
    std::fprintf(stderr, "unexpected argument '%s' (flags are --name=value)\n", positional[1]);
    return 2;
  }
  return internal_example::Finish([&] { return run(); });
}

// The same for a program that takes arguments besides its flags (tally_compare's files):
// `run` gets them, in order.
inline int RunExampleWithArguments(int argc, char** argv, const char* usage,
                                   absl::Status (*run)(const std::vector<std::string>&)) {
  absl::SetProgramUsageMessage(usage);
  std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  const std::vector<std::string> arguments(positional.begin() + 1, positional.end());
  return internal_example::Finish([&] { return run(arguments); });
}

}  // namespace tally