// Checkpoint loading under a few thousand random mutations of a valid file: bit flips,
// truncations, bytes spliced into the header, edited numbers. The loader must never crash
// (scripts/test.sh runs this under AddressSanitizer and UBSan), and whatever it accepts
// must have every tensor in the shape the model gives it.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "core/model/checkpoint.h"
#include "core/model/parameters.h"
#include "core/optim/optimizer.h"
#include "core/runtime/allocator.h"
#include "core/runtime/rng.h"
#include "core/runtime/safetensors.h"
#include "tests/model/tiny_model.h"

namespace tally::model {
namespace {

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// One random change of `bytes`, of a kind chosen by `rng`.
std::string Mutate(std::string bytes, size_t header_end, std::mt19937_64& rng) {
  auto pick = [&](size_t n) { return size_t(rng() % std::max<size_t>(1, n)); };
  if (bytes.size() < 9) return bytes + char(rng());  // truncated already: grow it back
  header_end = std::min(header_end, bytes.size());
  switch (rng() % 6) {
    case 0: {  // flip a few bits anywhere
      for (int i = 0, n = 1 + int(rng() % 4); i < n; ++i) bytes[pick(bytes.size())] ^= char(1 << (rng() % 8));
      break;
    }
    case 1:  // flip a bit of the header (its length or its JSON)
      bytes[pick(header_end)] ^= char(1 << (rng() % 8));
      break;
    case 2:  // truncate
      bytes.resize(pick(bytes.size()));
      break;
    case 3: {  // a JSON-significant character into the header
      const char kChars[] = "{}[]:,\"0123456789-e. ";
      bytes[8 + pick(header_end - 8)] = kChars[pick(sizeof(kChars) - 1)];
      break;
    }
    case 4: {  // a digit of the header changed: offsets, shapes, sizes
      std::vector<size_t> digits;
      for (size_t i = 8; i < header_end; ++i) {
        if (bytes[i] >= '0' && bytes[i] <= '9') digits.push_back(i);
      }
      if (!digits.empty()) bytes[digits[pick(digits.size())]] = char('0' + rng() % 10);
      break;
    }
    default: {  // bytes appended, or the header length edited
      if (rng() % 2 == 0) {
        bytes.append(1 + pick(64), char(rng()));
      } else {
        bytes[pick(8)] = char(rng());
      }
      break;
    }
  }
  return bytes;
}

TEST(CheckpointFuzz, MutatedFilesNeverCrashNorLoadWrongShapes) {
  const GPTConfig config = TinyCheckpointModel();
  const ParameterLayout layout = ParameterLayout::ForGPT(config);
  Allocator alloc(nullptr);
  std::vector<float> params(size_t(layout.total()));
  FillNormal(params.data(), layout.total(), 7, StreamOf("params"), 0, 0.0f, 0.02f);
  auto adam = optim::AdamW::Create({}, layout.total(), alloc).value();
  const std::string good = ::testing::TempDir() + "/fuzz_good.safetensors";
  // With a compressed run's state too: two ranks' buffers under a key.
  CompressionState compression{.key = "powersgd rank 1 on dp 2", .tensors = {}};
  compression.tensors[CompressionTensorName(0, "powersgd.error")] = {0.5f, -1, 2};
  compression.tensors[CompressionTensorName(1, "powersgd.error")] = {0.25f, 3, -4};
  ASSERT_TRUE(SaveCheckpoint(good, config, params.data(), adam.get(), 3, {}, compression).ok());
  const std::string original = ReadAll(good);
  uint64_t header_length = 0;
  for (int i = 0; i < 8; ++i) header_length |= uint64_t(uint8_t(original[i])) << (8 * i);
  const size_t header_end = 8 + size_t(header_length);
  ASSERT_LT(header_end, original.size());

  std::mt19937_64 rng(2026);
  const std::string path = ::testing::TempDir() + "/fuzz.safetensors";
  int loaded = 0, refused = 0;
  std::vector<float> into(params.size());
  for (int trial = 0; trial < 3000; ++trial) {
    std::string mutated = Mutate(original, header_end, rng);
    for (int extra = int(rng() % 3); extra > 0; --extra) mutated = Mutate(mutated, header_end, rng);
    std::ofstream(path, std::ios::binary | std::ios::trunc) << mutated;
    auto optimizer = optim::AdamW::Create({}, layout.total(), alloc).value();
    absl::StatusOr<LoadedCheckpoint> result = LoadCheckpoint(path, config, into.data(), optimizer.get());
    if (!result.ok()) {
      ++refused;
      EXPECT_FALSE(result.status().message().empty()) << trial;
      continue;
    }
    ++loaded;
    // Accepted: every tensor of the file is one of the model's, in the model's shape.
    absl::StatusOr<SafetensorsFile> file = ReadSafetensors(path, int64_t(mutated.size()));
    ASSERT_TRUE(file.ok()) << trial << ": " << file.status();
    for (const ParamSpec& spec : layout.specs()) {
      auto it = file->tensors.find(spec.name);
      ASSERT_NE(it, file->tensors.end()) << trial << ": " << spec.name;
      EXPECT_EQ(it->second.shape, spec.shape) << trial << ": " << spec.name;
    }
    for (const auto& [name, values] : result->compression.tensors) {  // finite, under a key
      EXPECT_FALSE(result->compression.key.empty()) << trial << ": " << name;
      for (float v : values) EXPECT_TRUE(std::isfinite(v)) << trial << ": " << name;
    }
  }
  // Most mutations are refused; the ones that load changed only values (or nothing).
  EXPECT_GT(refused, 1000);
  std::printf("%d mutations loaded (values only), %d refused\n", loaded, refused);
}

}  // namespace
}  // namespace tally::model
