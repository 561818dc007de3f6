// The main() of every example program: parse the flags, run, and turn a Status into one
// line on stderr and a non-zero exit code: 1 for an error, and an exception that escapes
// `run` (std::bad_alloc, ...) is one too; 128 + N for a run stopped by signal N
// (kCancelled, core/runtime/signals.h); 2 for a stray argument. -h and --help print the flags
// with their defaults and exit 0; an unknown flag is one line naming the nearest ones.
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
#include <utility>
#include <vector>

#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/runtime/signals.h"

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

// The program's own flags (not abseil's), by name.
inline std::vector<const absl::CommandLineFlag*> OwnFlags() {
  std::vector<const absl::CommandLineFlag*> flags;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (flag->Filename().find("examples/") != std::string::npos) flags.push_back(flag);
  }
  std::sort(flags.begin(), flags.end(), [](auto* a, auto* b) { return a->Name() < b->Name(); });
  return flags;
}

// Edits from a to b: insertions, deletions, replacements and swaps of two neighbours
// (the optimal string alignment distance), so that "stesp" is one from "steps".
inline size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

// The sections --help lists a program's flags under, in order (SetHelpSections).
struct HelpSection {
  std::string title;
  std::vector<std::string> flags;
};
inline std::vector<HelpSection>& HelpSections() {
  static std::vector<HelpSection> sections;
  return sections;
}

// "  --name=default\n      help\n", the default as written (a float widened to double,
// 0.0010000000474974513, prints as 0.001).
inline std::string HelpEntry(const absl::CommandLineFlag& flag) {
  std::string value = flag.DefaultValue();
  double real = 0;
  if (value.find_first_of(".e") != std::string::npos && absl::SimpleAtod(value, &real)) {
    value = absl::StrFormat("%.7g", real);
  }
  return absl::StrCat("  --", flag.Name(), "=", value, "\n      ", flag.Help(), "\n");
}

// --help (or -h): the usage line and every flag with its default on stdout, by section
// (then any flag no section names, as "other"), or sorted without sections.
inline void PrintHelp() {
  std::string out = std::string(absl::ProgramUsageMessage()) + "\n\nflags (--name=value; default after '='):\n";
  std::vector<const absl::CommandLineFlag*> rest = OwnFlags();
  for (const HelpSection& section : HelpSections()) {
    absl::StrAppend(&out, "\n", section.title, ":\n");
    for (const std::string& name : section.flags) {
      auto it = std::find_if(rest.begin(), rest.end(), [&](auto* f) { return f->Name() == name; });
      if (it == rest.end()) continue;  // not this program's, or listed already
      absl::StrAppend(&out, HelpEntry(**it));
      rest.erase(it);
    }
  }
  if (!HelpSections().empty() && !rest.empty()) absl::StrAppend(&out, "\nother:\n");
  for (const absl::CommandLineFlag* flag : rest) absl::StrAppend(&out, HelpEntry(*flag));
  std::fwrite(out.data(), 1, out.size(), stdout);
}

// Reads the flag names of the command line before abseil parses it: records them
// (FlagGiven), answers -h and --help (exit code 0), and refuses an unknown flag with the
// nearest names (exit code 1). -1: go on and parse.
inline int RecordGivenFlags(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "--") break;
    if (arg.size() < 2 || arg[0] != '-') continue;
    if (arg == "-h" || arg == "--help" || arg == "-help") {
      PrintHelp();
      return 0;
    }
    arg.remove_prefix(arg[1] == '-' ? 2 : 1);
    const size_t equals = arg.find('=');
    std::string name(arg.substr(0, equals));
    const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (flag == nullptr && name.rfind("no", 0) == 0 && absl::FindCommandLineFlag(name.substr(2)) != nullptr) {
      name = name.substr(2);
      flag = absl::FindCommandLineFlag(name);
    } else if (flag == nullptr) {
      std::vector<std::string> near;
      for (const absl::CommandLineFlag* f : OwnFlags()) {
        const std::string candidate(f->Name());
        if (EditDistance(name, candidate) <= std::max<size_t>(1, name.size() / 4) ||
            (name.size() >= 3 && candidate.find(name) != std::string::npos)) {
          near.push_back("--" + candidate);
        }
      }
      std::string line = absl::StrCat("Unknown command line flag '", name, "'");
      if (!near.empty()) {
        if (near.size() > 5) near.resize(5);
        absl::StrAppend(&line, " (did you mean ", absl::StrJoin(near, " or "), "?)");
      }
      std::fprintf(stderr, "%s\n", line.c_str());
      return 1;
    }
    GivenFlags().push_back(name);
    // "--name value": the value is the next argument, unless the flag is a bool.
    if (equals == std::string_view::npos && flag != nullptr && !flag->IsOfType<bool>()) ++i;
  }
  return -1;
}

}  // namespace internal_example

// The sections --help groups the program's flags in, each flag by its name (call before
// RunExample).
inline void SetHelpSections(std::vector<internal_example::HelpSection> sections) {
  internal_example::HelpSections() = std::move(sections);
}

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
  if (const int code = internal_example::RecordGivenFlags(argc, argv); code >= 0) return code;
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
  if (const int code = internal_example::RecordGivenFlags(argc, argv); code >= 0) return code;
  std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  const std::vector<std::string> arguments(positional.begin() + 1, positional.end());
  return internal_example::Finish([&] { return run(arguments); });
}

}  // namespace tally