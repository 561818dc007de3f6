#include "model/checkpoint.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "model/parameters.h"
#include "runtime/safetensors.h"
#include "runtime/status_macros.h"

namespace tally::model {
namespace {

constexpr char kOptimizerPrefix[] = "optimizer.";

std::map<std::string, std::string> Metadata(const GPTConfig& c, const optim::Optimizer* opt,
                                            int64_t step, const TrainedOn& run) {
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
  for (size_t i = 0; i < values.size(); ++i) {
    if (!std::isfinite(values[i])) {
      return absl::DataLossError(absl::StrCat("[checkpoint] '", path, "': tensor '", name,
                                              "' holds a non-finite value (", values[i],
                                              ") at element ", i));
    }
  }
  std::memcpy(into, values.data(), sizeof(float) * size_t(spec.numel));
  return absl::OkStatus();
}

}  // namespace

std::string TrainedOn::DataName() const {
  return data.empty() ? "unknown data" : absl::StrCat(data, " (", data_bytes, " bytes)");
}

absl::Status SaveCheckpoint(const std::string& path, const GPTConfig& config,
                            const float* params, optim::Optimizer* optimizer, int64_t step,
                            const TrainedOn& trained_on) {
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
  return WriteSafetensors(path, entries, Metadata(config, optimizer, step, trained_on));
}

// Long, and kept whole: the checks run in the order a reader would make them (format,
// positions, shapes, metadata, names, optimizer), each with its own message.
absl::StatusOr<LoadedCheckpoint> LoadCheckpoint(const std::string& path, const GPTConfig& config,
                                                float* params, optim::Optimizer* optimizer) {
  const ParameterLayout layout = ParameterLayout::ForGPT(config);
  // The largest file a checkpoint of this model can be: the parameters and two optimizer
  // states, and a header of at most 512 bytes per tensor. Nothing larger is read.
  const int64_t tensors = 3 * int64_t(layout.specs().size());
  const int64_t max_bytes = 8 + 4096 + 512 * tensors + 3 * 4 * layout.total();
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
  if (!absl::SimpleAtoi(file.metadata["step"], &loaded.saved_step) || loaded.saved_step < 0) {
    loaded.saved_step = 0;  // a file of parameters only may name none
  }
  bool has_state = std::any_of(file.tensors.begin(), file.tensors.end(), [](const auto& t) {
    return t.first.rfind(kOptimizerPrefix, 0) == 0;
  });
  // Every tensor of the file is one the model (or, in this file, its optimizer) has.
  for (const auto& [name, tensor] : file.tensors) {
    const std::string base = name.rfind(kOptimizerPrefix, 0) == 0
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
