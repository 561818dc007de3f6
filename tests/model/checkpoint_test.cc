// A checkpoint's compression state (core/model/checkpoint.h): every rank's buffers come back
// as they were saved, under their key, and a file whose state is malformed is refused
// with a line that names it.
#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "core/model/checkpoint.h"
#include "core/model/parameters.h"
#include "core/optim/optimizer.h"
#include "core/runtime/allocator.h"
#include "core/runtime/safetensors.h"
#include "tests/model/tiny_model.h"

namespace tally::model {
namespace {

TEST(CheckpointCompression, EveryRanksStateComesBackUnderItsKey) {
  const GPTConfig config = TinyCheckpointModel();
  const ParameterLayout layout = ParameterLayout::ForGPT(config);
  std::vector<float> params(size_t(layout.total()), 0.5f);
  Allocator alloc(nullptr);
  auto adam = optim::AdamW::Create({}, layout.total(), alloc).value();
  CompressionState saved{.key = "onebit_adam on dp 2", .tensors = {}};
  saved.tensors[CompressionTensorName(0, "onebit_adam.own.worker_error")] = {1, -2, 3};
  saved.tensors[CompressionTensorName(1, "onebit_adam.own.worker_error")] = {-0.25f};
  EXPECT_EQ(CompressionTensorName(1, "powersgd.q"), "compression.rank1.powersgd.q");
  const std::string path = ::testing::TempDir() + "/compression_state.safetensors";
  ASSERT_TRUE(SaveCheckpoint(path, config, params.data(), adam.get(), 7, {}, saved).ok());

  std::vector<float> into(params.size());
  auto optimizer = optim::AdamW::Create({}, layout.total(), alloc).value();
  absl::StatusOr<LoadedCheckpoint> loaded = LoadCheckpoint(path, config, into.data(), optimizer.get());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->step, 7);
  EXPECT_EQ(loaded->compression.key, saved.key);
  EXPECT_EQ(loaded->compression.tensors, saved.tensors);
  EXPECT_EQ(into, params);

  // A file of the model alone has no state and no key.
  ASSERT_TRUE(SaveCheckpoint(path, config, params.data(), adam.get(), 7).ok());
  loaded = LoadCheckpoint(path, config, into.data(), optimizer.get());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_TRUE(loaded->compression.key.empty());
  EXPECT_TRUE(loaded->compression.tensors.empty());
}

TEST(CheckpointCompression, MalformedStateIsRefused) {
  const GPTConfig config = TinyCheckpointModel();
  const ParameterLayout layout = ParameterLayout::ForGPT(config);
  std::vector<float> params(size_t(layout.total()), 0.5f);
  const std::vector<float> state = {1, 2, 3, 4};
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> bad_state = {1, nan};
  struct Case {
    const char* name;
    Shape shape;
    const float* data;
    bool keyed;
    const char* words;
  };
  for (const Case& c : {Case{"compression.rank0.powersgd.q", {4}, state.data(), false,
                             "has a tensor 'compression.rank0.powersgd.q' but no 'compression' key"},
                        Case{"compression.rank0.powersgd.q", {2, 2}, state.data(), true,
                             "is (2, 2), not of one dimension"},
                        Case{"compression.rank0.powersgd.q", {2}, bad_state.data(), true,
                             "holds a non-finite value (nan) at element 1"},
                        Case{"compressed.rank0.powersgd.q", {4}, state.data(), true,
                             "has a tensor 'compressed.rank0.powersgd.q' that a model of"}}) {
    SCOPED_TRACE(c.words);
    std::vector<SafetensorsEntry> entries;
    for (const ParamSpec& spec : layout.specs()) {
      entries.push_back({spec.name, spec.shape, params.data() + spec.offset});
    }
    entries.push_back({c.name, c.shape, c.data});
    std::map<std::string, std::string> metadata = {
        {"format", "tally"}, {"step", "1"}, {"optimizer", "none"}, {"n_layer", "1"},
        {"n_head", "2"}, {"n_embd", "8"}, {"seq_len", "4"}, {"vocab_size", "16"}};
    if (c.keyed) metadata["compression"] = "powersgd rank 1 on dp 2";
    const std::string path = ::testing::TempDir() + "/bad_compression_state.safetensors";
    ASSERT_TRUE(WriteSafetensors(path, entries, metadata).ok());
    std::vector<float> into(params.size());
    absl::StatusOr<LoadedCheckpoint> loaded = LoadCheckpoint(path, config, into.data(), nullptr);
    ASSERT_FALSE(loaded.ok());
    EXPECT_TRUE(absl::StrContains(loaded.status().message(), c.words)) << loaded.status();
  }
}

}  // namespace
}  // namespace tally::model
