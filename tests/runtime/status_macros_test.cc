#include "core/runtime/status_macros.h"

#include "gtest/gtest.h"

namespace tally {
namespace {

absl::StatusOr<int> Half(int x) {
  if (x % 2 != 0) return absl::InvalidArgumentError("odd");
  return x / 2;
}

absl::StatusOr<int> Quarter(int x) {
  ASSIGN_OR_RETURN(int half, Half(x));
  ASSIGN_OR_RETURN(int quarter, Half(half));
  return quarter;
}

absl::Status CheckEven(int x) {
  RETURN_IF_ERROR(Half(x).status());
  return absl::OkStatus();
}

TEST(StatusMacros, PropagateErrorsAndValues) {
  EXPECT_EQ(Quarter(12).value(), 3);
  EXPECT_EQ(Quarter(6).status().message(), "odd");
  EXPECT_TRUE(CheckEven(4).ok());
  EXPECT_EQ(CheckEven(3).code(), absl::StatusCode::kInvalidArgument);
}

TEST(StatusMacrosDeathTest, CheckAbortsWithFileAndLine) {
  int held = 3;
  EXPECT_DEATH(CHECK(held < 2) << "held " << held, "status_macros_test.cc:.*CHECK failed: held < 2 held 3");
  CHECK(held == 3) << "never printed";
}

}  // namespace
}  // namespace tally
