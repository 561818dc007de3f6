#include "core/data/dataset.h"

#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "core/data/corpus.h"
#include "core/runtime/files.h"
#include "core/runtime/rng.h"

namespace tally::data {

Split::Split(std::vector<int32_t> tokens, int seq_len)
    : tokens_(std::move(tokens)),
      seq_len_(seq_len),
      sequences_(tokens_.size() > 0 ? int64_t(tokens_.size() - 1) / seq_len : 0) {}

void Split::Fill(int64_t first, int count, int32_t* inputs, int32_t* targets) const {
  for (int s = 0; s < count; ++s) {
    int64_t offset = ((first + s) % sequences_) * seq_len_;
    std::memcpy(inputs + int64_t(s) * seq_len_, &tokens_[offset], sizeof(int32_t) * seq_len_);
    std::memcpy(targets + int64_t(s) * seq_len_, &tokens_[offset + 1], sizeof(int32_t) * seq_len_);
  }
}

Dataset Placeholder(int seq_len) {
  Dataset d;
  d.source = "none (a dry run)";
  d.train = Split(std::vector<int32_t>(size_t(seq_len) + 1, 0), seq_len);
  d.val = d.train;
  return d;
}

absl::StatusOr<Dataset> LoadDataset(const std::string& path, int seq_len) {
  Dataset ds;
  std::string text;
  if (path.empty()) {
    ds.source = "embedded corpus";
    text = GenerateCorpus(kEmbeddedCorpusBytes);
  } else {
    ds.source = path;
    absl::StatusOr<int64_t> size = CheckInputFile(path, "[data]", kMaxDataBytes);
    if (!size.ok()) return size.status();
    std::ifstream file(path, std::ios::binary);
    if (!file) return absl::NotFoundError(absl::StrCat("[data] cannot open '", path, "'"));
    text.resize(size_t(*size));
    file.read(text.data(), *size);
    if (file.gcount() != *size) return absl::DataLossError(absl::StrCat("[data] cannot read '", path, "'"));
    if (text.empty()) return absl::InvalidArgumentError(absl::StrCat("[data] '", path, "' is empty"));
  }
  ds.bytes = int64_t(text.size());
  ds.fingerprint = Fnv1a64(text);
  size_t split = text.size() * 9 / 10;
  ds.unigram_entropy = UnigramEntropy(text.substr(0, split));
  std::vector<int32_t> train(text.begin(), text.begin() + split);
  std::vector<int32_t> val(text.begin() + split, text.end());
  for (int32_t& t : train) t &= 0xff;  // bytes, not signed chars
  for (int32_t& t : val) t &= 0xff;
  if (int64_t(val.size()) < seq_len + 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "[data] ", ds.source, " has ", text.size(), " bytes: its validation split (the last 10%) ",
        "needs at least seq_len + 1 = ", seq_len + 1, " bytes; use a larger file or a shorter seq_len"));
  }
  ds.train = Split(std::move(train), seq_len);
  ds.val = Split(std::move(val), seq_len);
  return ds;
}

}  // namespace tally::data
