// What the bad-input tests share: a program given bad flags answers with one clear line
// on stderr and exit code 1, soon.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "core/runtime/clock.h"
#include "tests/e2e/run_command.h"

namespace tally {

inline int Lines(const std::string& text) { return int(std::count(text.begin(), text.end(), '\n')); }

struct Case {
  std::string flags, message;
};

// Each case: exit code 1, one line that says `message`, within `seconds`.
inline void ExpectOneClearLine(const std::string& program, const std::vector<Case>& cases,
                               double seconds = 20) {
  for (const Case& c : cases) {
    const int64_t start = MonotonicNanos();
    Result r = RunCommand("timeout 60 " + program + " " + c.flags);
    EXPECT_EQ(r.exit_code, 1) << c.flags << ": " << r.output;
    EXPECT_TRUE(absl::StrContains(r.output, c.message)) << c.flags << ": " << r.output;
    EXPECT_EQ(Lines(r.output), 1) << c.flags << ": " << r.output;
    EXPECT_LT(SecondsSince(start), seconds) << c.flags;
  }
}

}  // namespace tally
