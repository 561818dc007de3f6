// The variants register themselves with the trainer (core/train/extensions.h) when a program
// that links them starts, and fill the stores' seams only for the options that ask.
#include "core/train/extensions.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace tally::train {
namespace {

TEST(Extensions, EveryVariantIsRegisteredInItsOrder) {
  // ZeRO++ and compression first (by name among equals), then HSDP, which wraps the
  // reducer ZeRO++ may have set.
  EXPECT_EQ(RegisteredExtensions(),
            (std::vector<std::string>{"compression", "zero_pp", "hsdp"}));
}

TEST(Extensions, FillOnlyWhatTheOptionsAskFor) {
  const parallel::Topology::Groups none;
  TrainOptions plain;
  plain.parallel.dp = 4;
  absl::StatusOr<Seams> seams = FillSeams(plain, none);
  ASSERT_TRUE(seams.ok()) << seams.status();
  EXPECT_EQ(seams->zero_reducer, nullptr);
  EXPECT_FALSE(seams->zero_gatherer);
  EXPECT_FALSE(seams->replica_hook);
  EXPECT_TRUE(seams->zero_gathers_checkpoint);

  TrainOptions powersgd = plain;
  powersgd.parallel.grad_compression = parallel::GradCompression::kPowerSgd;
  seams = FillSeams(powersgd, none);
  ASSERT_TRUE(seams.ok()) << seams.status();
  EXPECT_TRUE(seams->replica_hook);
  EXPECT_FALSE(seams->zero_gatherer);

  TrainOptions qwz = plain;
  qwz.parallel.zero = 3;
  qwz.parallel.zero_quantized_weights = true;
  seams = FillSeams(qwz, none);
  ASSERT_TRUE(seams.ok()) << seams.status();
  EXPECT_TRUE(seams->zero_gatherer);
  EXPECT_EQ(seams->zero_reducer, nullptr);
  EXPECT_FALSE(seams->replica_hook);
}

}  // namespace
}  // namespace tally::train
