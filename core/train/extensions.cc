#include "core/train/extensions.h"

#include <algorithm>
#include <tuple>
#include <utility>

#include "core/runtime/status_macros.h"

namespace tally::train {
namespace {

struct Registered {
  std::string name;
  int order = 0;
  std::unique_ptr<Extension> extension;
};

std::vector<Registered>& Registry() {
  static std::vector<Registered>* registry = new std::vector<Registered>();
  return *registry;
}

}  // namespace

bool RegisterExtension(std::string name, int order, std::unique_ptr<Extension> extension) {
  std::vector<Registered>& all = Registry();
  all.push_back({std::move(name), order, std::move(extension)});
  std::stable_sort(all.begin(), all.end(), [](const Registered& a, const Registered& b) {
    return std::tie(a.order, a.name) < std::tie(b.order, b.name);
  });
  return true;
}

std::vector<std::string> RegisteredExtensions() {
  std::vector<std::string> names;
  for (const Registered& r : Registry()) names.push_back(r.name);
  return names;
}

absl::StatusOr<Seams> FillSeams(const TrainOptions& options, const SeamGroups& groups) {
  Seams seams;
  for (const Registered& r : Registry()) RETURN_IF_ERROR(r.extension->Fill(options, groups, seams));
  return seams;
}

}  // namespace tally::train
