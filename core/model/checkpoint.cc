#include "core/model/checkpoint.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/model/parameters.h"
#include "core/runtime/files.h"
#include "core/runtime/safetensors.h"
#include "core/runtime/status_macros.h"

namespace tally::model {
namespace {

constexpr char kOptimizerPrefix[] = "optimizer.";
constexpr char kCompressionPrefix[] = "compression.";

bool StartsWith(const std::string& name, const char* prefix) { return name.rfind(prefix, 0) == 0; }

std::map<std::string, std::string> Metadata(const GPTConfig& c, const optim::Optimizer* opt,
                                            int64_t step, const TrainedOn& run,
                                            const CompressionState& compression) {
  std::map<std::string, std::string> metadata = {
      {"format", "tally"},
      {"step", absl::StrCat(step)},
      {"precision", run.precision},
      {"optimizer", opt != nullptr ? opt->name() : "none"},
      {"n_layer", absl::StrCat(c.n_layer)},
      {"n_head", absl::StrCat(c.n_head)},
      {"n_embd", absl::StrCat(c.n_embd)},
      {"seq_len", absl::StrCat(c.seq_len)},
      {"vocab_size", absl::StrCat(c.vocab_size)},
      {"n_experts", absl::StrCat(c.n_experts)},
      {"moe_top_k", absl::StrCat(c.moe() ? c.moe_top_k : 0)}};
  if (!run.data.empty()) {
    metadata["data"] = run.data;
    metadata["data_bytes"] = absl::StrCat(run.data_bytes);
    metadata["data_fnv1a64"] = absl::StrFormat("%016x", run.data_fnv1a64);
  }
  if (!compression.key.empty()) metadata["compression"] = compression.key;
  return metadata;
}

// The run's record, as far as the file has it (nothing of it is checked).
TrainedOn TrainedOnOf(std::map<std::string, std::string>& metadata) {
  TrainedOn run;
  run.precision = metadata["precision"];
  uint64_t hash = 0;
  int64_t bytes = 0;
  if (absl::SimpleAtoi(metadata["data_bytes"], &bytes) &&
      absl::SimpleHexAtoi(metadata["data_fnv1a64"], &hash) && !metadata["data"].empty()) {
    run.data = metadata["data"];
    run.data_bytes = bytes;
    run.data_fnv1a64 = hash;
  }
  return run;
}

absl::Status CheckFinite(const std::string& path, const std::string& name,
                         const std::vector<float>& values) {
  for (size_t i = 0; i < values.size(); ++i) {
    if (!std::isfinite(values[i])) {
      return absl::DataLossError(absl::StrCat("[checkpoint] '", path, "': tensor '", name,
                                              "' holds a non-finite value (", values[i],
                                              ") at element ", i));
    }
  }
  return absl::OkStatus();
}

// Copies tensor `name` of `file` into `into` after checking its shape.
absl::Status Restore(const std::string& path, const SafetensorsFile& file, const std::string& name,
                     const ParamSpec& spec, const GPTConfig& config, float* into) {
  auto it = file.tensors.find(name);
  if (it == file.tensors.end()) {
    return absl::InvalidArgumentError(absl::StrCat("[checkpoint] '", path, "' has no tensor '",
                                                   name, "' (the flags ask for ",
                                                   config.ToString(), ")"));
  }
  if (it->second.shape != spec.shape) {
    return absl::InvalidArgumentError(absl::StrCat(
        "[checkpoint] '", path, "': ", name, " is ", ShapeToString(it->second.shape),
        " there, but ", ShapeToString(spec.shape), " for the flags (", config.ToString(), ")"));
  }
  const std::vector<float>& values = it->second.data;
  RETURN_IF_ERROR(CheckFinite(path, name, values));
  std::memcpy(into, values.data(), sizeof(float) * size_t(spec.numel));
  return absl::OkStatus();
}

// Up to 6 buffers a rank (1-bit Adam's two errors of up to three parts).
constexpr int64_t kMostCompressionTensors = 6 * kMostCompressedRanks;

// How many compression tensors the header of `path` names (read before the file, whose
// size they bound): none for anything but a regular file (opening a FIFO would block)
// whose header is at most `max_header` bytes; ReadSafetensors says what is wrong with it.
int64_t CompressionTensorsNamed(const std::string& path, int64_t max_header) {
  if (!CheckInputFile(path, "[checkpoint]", std::numeric_limits<int64_t>::max()).ok()) return 0;
  std::ifstream in(path, std::ios::binary);
  unsigned char length[8];
  if (!in.read(reinterpret_cast<char*>(length), 8)) return 0;
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t(length[i]) << (8 * i);
  if (n > uint64_t(max_header)) return 0;
  std::string text(size_t(n), '\0');
  if (!in.read(text.data(), std::streamsize(n))) return 0;
  const std::string quoted = absl::StrCat("\"", kCompressionPrefix, "rank");
  int64_t count = 0;
  for (size_t at = text.find(quoted); at != std::string::npos; at = text.find(quoted, at + 1)) ++count;
  return std::min(count, kMostCompressionTensors);
}

// Moves the compression tensors of `file` into `into` (their names begin with
// kCompressionPrefix): each of one dimension and finite, and only under a key.
absl::Status TakeCompressionState(const std::string& path, SafetensorsFile& file,
                                  CompressionState& into) {
  into.key = file.metadata["compression"];
  for (auto it = file.tensors.begin(); it != file.tensors.end();) {
    if (!StartsWith(it->first, kCompressionPrefix)) {
      ++it;
      continue;
    }
    const std::string& name = it->first;
    if (into.key.empty()) {
      return absl::DataLossError(absl::StrCat("[checkpoint] '", path, "' has a tensor '", name,
                                              "' but no 'compression' key in its __metadata__"));
    }
    if (it->second.shape.size() != 1) {
      return absl::DataLossError(absl::StrCat("[checkpoint] '", path, "': compression state '",
                                              name, "' is ", ShapeToString(it->second.shape),
                                              ", not of one dimension"));
    }
    RETURN_IF_ERROR(CheckFinite(path, name, it->second.data));
    into.tensors[name] = std::move(it->second.data);
    it = file.tensors.erase(it);
  }
  return absl::OkStatus();
}

}  // namespace

std::string CompressionTensorName(int rank, const std::string& buffer) {
  return absl::StrCat(kCompressionPrefix, "rank", rank, ".", buffer);
}

std::string TrainedOn::DataName() const {
  return data.empty() ? "unknown data" : absl::StrCat(data, " (", data_bytes, " bytes)");
}

absl::Status SaveCheckpoint(const std::string& path, const GPTConfig& config,
                            const float* params, optim::Optimizer* optimizer, int64_t step,
                            const TrainedOn& trained_on,
                            const CompressionState& compression) {
  const ParameterLayout layout = ParameterLayout::ForGPT(config);
  std::vector<SafetensorsEntry> entries;
  for (const ParamSpec& spec : layout.specs()) {
    entries.push_back({spec.name, spec.shape, params + spec.offset});
  }
  if (optimizer != nullptr) {
    for (auto& [state, tensor] : optimizer->State()) {
      for (const ParamSpec& spec : layout.specs()) {
        entries.push_back({absl::StrCat(kOptimizerPrefix, state, ".", spec.name), spec.shape,
                           tensor->data<float>() + spec.offset});
      }
    }
  }
  for (const auto& [name, values] : compression.tensors) {
    entries.push_back({name, {int64_t(values.size())}, values.data()});
  }
  return WriteSafetensors(path, entries,
                          Metadata(config, optimizer, step, trained_on, compression));
}

// Long, and kept whole: the checks run in the order a reader would make them (format,
// positions, shapes, metadata, compression state, names, optimizer), each with its own
// message.
absl::StatusOr<LoadedCheckpoint> LoadCheckpoint(const std::string& path, const GPTConfig& config,
                                                float* params, optim::Optimizer* optimizer) {
  const ParameterLayout layout = ParameterLayout::ForGPT(config);
  // The largest file a checkpoint of this model can be: the parameters, two optimizer
  // states, the compression tensors its header names (at most 2·(Φ + 1536) values a rank
  // for kMostCompressedRanks ranks), and a header of at most 512 bytes per tensor.
  // Nothing larger is read.
  const int64_t header = 4096 + 512 * (3 * int64_t(layout.specs().size()) + kMostCompressionTensors);
  const int64_t compressed = std::min(CompressionTensorsNamed(path, header) * (layout.total() + 512),
                                      kMostCompressedRanks * 2 * (layout.total() + 1536));
  const int64_t max_bytes = 8 + header + 4 * (3 * layout.total() + compressed);
  ASSIGN_OR_RETURN(SafetensorsFile file, ReadSafetensors(path, max_bytes));
  auto mismatch = [&](auto... parts) {
    return absl::InvalidArgumentError(absl::StrCat("[checkpoint] '", path, "' ", parts...));
  };
  if (file.metadata["format"] != "tally") {
    return absl::DataLossError(absl::StrCat("[checkpoint] '", path, "' has format '",
                                            file.metadata["format"],
                                            "' in its __metadata__; tally reads 'tally'"));
  }
  // A position table of another length is the likeliest mismatch: say so in its terms.
  auto wpe = file.tensors.find("wpe.weight");
  if (wpe != file.tensors.end() && !wpe->second.shape.empty() &&
      wpe->second.shape[0] != config.seq_len) {
    return mismatch("has a position table of ", wpe->second.shape[0], " positions; --seq_len=",
                    config.seq_len, " needs exactly that many");
  }
  for (const ParamSpec& spec : layout.specs()) {
    RETURN_IF_ERROR(Restore(path, file, spec.name, spec, config, params + spec.offset));
  }
  // Shapes can agree where the model does not (n_head): the metadata must agree too.
  // A file from before experts existed has no n_experts or moe_top_k: a dense model.
  for (const char* key : {"n_experts", "moe_top_k"}) file.metadata.try_emplace(key, "0");
  for (auto [key, value] : {std::pair{"n_layer", config.n_layer}, {"n_head", config.n_head},
                            {"n_embd", config.n_embd}, {"seq_len", config.seq_len},
                            {"vocab_size", config.vocab_size}, {"n_experts", config.n_experts},
                            {"moe_top_k", config.moe() ? config.moe_top_k : 0}}) {
    if (file.metadata[key] != absl::StrCat(value)) {
      return mismatch("was saved with ", key, "=", file.metadata[key], "; the flags ask for --",
                      key, "=", value);
    }
  }
  LoadedCheckpoint loaded;
  loaded.trained_on = TrainedOnOf(file.metadata);
  RETURN_IF_ERROR(TakeCompressionState(path, file, loaded.compression));
  if (!absl::SimpleAtoi(file.metadata["step"], &loaded.saved_step) || loaded.saved_step < 0) {
    loaded.saved_step = 0;  // a file of parameters only may name none
  }
  bool has_state = std::any_of(file.tensors.begin(), file.tensors.end(), [](const auto& t) {
    return StartsWith(t.first, kOptimizerPrefix);
  });
  // Every other tensor of the file is one the model (or, in this file, its optimizer) has.
  for (const auto& [name, tensor] : file.tensors) {
    const std::string base = StartsWith(name, kOptimizerPrefix)
                                 ? name.substr(name.find('.', sizeof(kOptimizerPrefix) - 1) + 1)
                                 : name;
    if (layout.Find(base) == nullptr) {
      return mismatch("has a tensor '", name, "' that a model of ", config.ToString(),
                      " does not have");
    }
  }
  if (!has_state || optimizer == nullptr) return loaded;

  if (file.metadata["optimizer"] != optimizer->name()) {
    return mismatch("holds ", file.metadata["optimizer"], " state, but --optimizer=", optimizer->name());
  }
  if (!absl::SimpleAtoi(file.metadata["step"], &loaded.step) || loaded.step < 0) {
    return absl::DataLossError(absl::StrCat("[checkpoint] '", path, "' has no valid step"));
  }
  for (auto& [state, tensor] : optimizer->State()) {
    for (const ParamSpec& spec : layout.specs()) {
      RETURN_IF_ERROR(Restore(path, file, absl::StrCat(kOptimizerPrefix, state, ".", spec.name),
                              spec, config, tensor->data<float>() + spec.offset));
    }
  }
  optimizer->set_step(loaded.step);
  loaded.has_optimizer = true;
  return loaded;
}

}  // namespace tally::model
