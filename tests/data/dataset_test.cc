#include "core/data/dataset.h"

#include <cstdio>
#include <fstream>
#include <vector>

#include "absl/strings/match.h"
#include "core/data/corpus.h"
#include "gtest/gtest.h"

namespace tally::data {
namespace {

TEST(Corpus, IsDeterministicTextWithStructure) {
  std::string a = GenerateCorpus(5000), b = GenerateCorpus(5000);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, GenerateCorpus(5000, 7));
  EXPECT_EQ(a.size(), 5000u);
  EXPECT_TRUE(absl::StrContains(a, " the "));
  // English-like bytes: far from uniform (ln 256 = 5.55 nats).
  double h = UnigramEntropy(GenerateCorpus(200000));
  EXPECT_GT(h, 2.5);
  EXPECT_LT(h, 3.5);
}

TEST(Dataset, BatchOrderIsTheDocumentedOffsets) {
  std::string path = ::testing::TempDir() + "/digits.txt";
  std::string text;
  for (int i = 0; i < 1000; ++i) text += char('a' + i % 26);
  std::ofstream(path) << text;
  Dataset ds = LoadDataset(path, 8).value();
  EXPECT_EQ(ds.train.tokens(), 900);
  EXPECT_EQ(ds.val.tokens(), 100);
  EXPECT_EQ(ds.train.sequences(), (900 - 1) / 8);
  std::vector<int32_t> in(2 * 8), out(2 * 8);
  // Sequences 3 and 4: tokens [24, 32) and [32, 40), targets shifted by one.
  ds.train.Fill(3, 2, in.data(), out.data());
  EXPECT_EQ(in[0], text[24]);
  EXPECT_EQ(out[0], text[25]);
  EXPECT_EQ(in[8], text[32]);
  EXPECT_EQ(out[15], text[40]);
  // The order wraps around after S sequences.
  ds.train.Fill(ds.train.sequences(), 1, in.data(), out.data());
  EXPECT_EQ(in[0], text[0]);
  // Validation starts at byte 900.
  ds.val.Fill(0, 1, in.data(), out.data());
  EXPECT_EQ(in[0], text[900]);
}

TEST(Dataset, MissingEmptyAndTooShortFilesAreErrors) {
  EXPECT_TRUE(absl::StrContains(LoadDataset("/nonexistent/file", 8).status().message(), "cannot open"));
  std::string empty = ::testing::TempDir() + "/empty.txt";
  std::ofstream(empty).close();
  EXPECT_TRUE(absl::StrContains(LoadDataset(empty, 8).status().message(), "is empty"));
  std::string small = ::testing::TempDir() + "/small.txt";
  std::ofstream(small) << std::string(50, 'x');
  EXPECT_TRUE(absl::StrContains(LoadDataset(small, 8).status().message(), "validation split"));
}

TEST(Dataset, EmbeddedCorpusByDefault) {
  Dataset ds = LoadDataset("", 128).value();
  EXPECT_EQ(ds.source, "embedded corpus");
  EXPECT_EQ(ds.bytes, kEmbeddedCorpusBytes);
}

}  // namespace
}  // namespace tally::data
