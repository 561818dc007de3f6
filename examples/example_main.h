// The main() of every example program: parse the flags, run, and turn a Status into one
// line on stderr and a non-zero exit code: 1 for an error, and an exception that escapes
// `run` (std::bad_alloc, ...) is one too; 128 + N for a run stopped by signal N
// (kCancelled, runtime/signals.h); 2 for a stray argument.
//
//   int main(int argc, char** argv) { return tally::RunExample(argc, argv, "usage", Main); }
#pragma once

#include <algorithm>
#include <cstdio>
#include <exception>
#include <initializer_list>
#include <new>
#include <string>
#include <string_view>
#include <vector>

#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
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

// The names of the flags on the command line, as RunExample saw them before parsing
// (this abseil does not say which flags were given): "--a=1 -b 2 --noc" gives a, b, c.
inline std::vector<std::string>& GivenFlags() {
  static std::vector<std::string> names;
  return names;
}

inline void RecordGivenFlags(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "--") break;
    if (arg.size() < 2 || arg[0] != '-') continue;
    arg.remove_prefix(arg[1] == '-' ? 2 : 1);
    std::string name(arg.substr(0, arg.find('=')));
    if (absl::FindCommandLineFlag(name) == nullptr && name.rfind("no", 0) == 0) name = name.substr(2);
    GivenFlags().push_back(name);
  }
}

}  // namespace internal_example

// Whether the flag `name` was given on the command line (a default spelled out counts).
inline bool FlagGiven(std::string_view name) {
  const std::vector<std::string>& given = internal_example::GivenFlags();
  return std::find(given.begin(), given.end(), name) != given.end();
}

// The flags given on the command line, as "--name", sorted, but those named in `except`.
inline std::vector<std::string> FlagsGivenBut(std::initializer_list<std::string_view> except) {
  std::vector<std::string> out;
  for (const std::string& name : internal_example::GivenFlags()) {
    if (std::find(except.begin(), except.end(), name) == except.end()) out.push_back("--" + name);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

inline int RunExample(int argc, char** argv, const char* usage, absl::Status (*run)()) {
  absl::SetProgramUsageMessage(usage);
  internal_example::RecordGivenFlags(argc, argv);
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
  internal_example::RecordGivenFlags(argc, argv);
  std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  const std::vector<std::string> arguments(positional.begin() + 1, positional.end());
  return internal_example::Finish([&] { return run(arguments); });
}

}  // namespace tally