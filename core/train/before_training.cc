// What can be known wrong before training allocates anything (before_training.h).

#include "core/train/before_training.h"

#include <cstdint>
#include <iterator>
#include <limits>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/data/dataset.h"
#include "core/runtime/files.h"
#include "core/runtime/memory_ledger.h"
#include "core/runtime/status_macros.h"

namespace tally::train {

namespace {

// No output onto another output or onto an input (the same file by device and inode,
// links included): one would replace the other. --save onto --load resumes, and is
// allowed.
absl::Status CheckNoClobbering(const TrainOptions& o) {
  struct Named {
    const char* flag;
    const std::string* path;
    bool output;
  };
  const Named files[] = {{"--data", &o.data.path, false},
                         {"--load", &o.checkpoint.load, false},
                         {"--save", &o.checkpoint.save, true},
                         {"--metrics_json", &o.output.metrics_json, true},
                         {"--traffic_json", &o.output.traffic_json, true},
                         {"--trace", &o.output.trace, true},
                         {"--report_html", &o.output.report_html, true}};
  for (size_t i = 0; i < std::size(files); ++i) {
    for (size_t j = i + 1; j < std::size(files); ++j) {
      const Named &a = files[i], &b = files[j];
      if ((!a.output && !b.output) || a.path->empty() || b.path->empty()) continue;
      if (std::string(a.flag) == "--load" && std::string(b.flag) == "--save") continue;
      if (!SameFile(*a.path, *b.path)) continue;
      return absl::InvalidArgumentError(absl::StrCat(
          "[train] ", a.flag, "='", *a.path, "' and ", b.flag, "='", *b.path, "' are one file: ",
          b.flag, " would replace ", a.output ? absl::StrCat("what ", a.flag, " writes") : absl::StrCat(a.flag, "'s file"),
          "; give each output a path of its own"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckBeforeTraining(const TrainOptions& options, int ranks_here, bool writes_outputs) {
  int64_t data_bytes = data::kEmbeddedCorpusBytes;
  if (!options.data.path.empty()) {
    ASSIGN_OR_RETURN(data_bytes, CheckInputFile(options.data.path, "[data]", data::kMaxDataBytes));
  }
  if (!options.checkpoint.load.empty()) {
    RETURN_IF_ERROR(
        CheckInputFile(options.checkpoint.load, "[checkpoint]", std::numeric_limits<int64_t>::max())
            .status());
  }
  for (auto [path, flag] : {std::pair{&options.checkpoint.save, "--save"},
                            {&options.output.metrics_json, "--metrics_json"},
                            {&options.output.traffic_json, "--traffic_json"},
                            {&options.output.trace, "--trace"},
                            {&options.output.report_html, "--report_html"}}) {
    if (writes_outputs && !path->empty()) {
      RETURN_IF_ERROR(CheckOutputFile(*path, absl::StrCat("[train] ", flag)));
    }
  }
  if (writes_outputs) RETURN_IF_ERROR(CheckNoClobbering(options));
  // A dry run's model is nowhere, but its bookkeeping is here.
  if (options.dry_run) {
    return FitsInMemory(options.DryRunHostBytes(),
                        absl::StrFormat("[train] this dry run (%d rank(s) x %d layer(s) x %d micro-batch(es) "
                                        "a step: the ranks' threads, meta tensors and the record of "
                                        "every collective call, no model values)",
                                        options.world(), options.model.n_layer,
                                        options.accumulation_steps()));
  }
  // The model is in GPU memory.
  if (options.placement.device != DeviceType::kCPU) return absl::OkStatus();
  return FitsInMemory(options.EstimatedBytes(ranks_here, data_bytes),
                      absl::StrCat("[train] this run (", ranks_here, " rank(s): parameters, gradients, "
                                   "optimizer state, one micro-batch's activations, the data)"));
}

}  // namespace tally::train
