// --grad_compression (core/train/options.h) on data parallelism's seam (core/parallel/seams.h): the
// replica's hook, PowerSGD's low-rank sum (core/parallel/powersgd.h) or 1-bit Adam, an
// optimizer that wraps the AdamW the replica made and averages the momentum in place of
// the gradients (core/parallel/onebit_adam.h).
#include <memory>
#include <utility>

#include "core/parallel/onebit_adam.h"
#include "core/parallel/powersgd.h"
#include "core/runtime/status_macros.h"
#include "core/train/extensions.h"

namespace tally::extensions {
namespace {

class GradientCompression : public train::Extension {
 public:
  absl::Status Fill(const train::TrainOptions& options, const train::SeamGroups& groups,
                    train::Seams& seams) const override {
    using HookOr = absl::StatusOr<std::unique_ptr<parallel::GradientHook>>;
    const train::ParallelOptions& p = options.parallel;
    comm::Communicator* dp = groups.dp.get();
    const comm::Algorithm algorithm = p.allreduce;
    if (p.PowerSgd()) {
      const int rank = p.powersgd_rank;
      const int64_t warmup = p.powersgd_warmup_steps;
      const uint64_t seed = options.training.seed;
      seams.replica_hook = [=](const model::ParameterLayout& layout,
                               std::unique_ptr<optim::Optimizer>&, Allocator& alloc) -> HookOr {
        ASSIGN_OR_RETURN(std::unique_ptr<parallel::PowerSgd> powersgd,
                         parallel::PowerSgd::Create(dp, layout, rank, seed, algorithm, alloc));
        return std::make_unique<parallel::PowerSgdHook>(std::move(powersgd), *dp, warmup);
      };
    }
    if (p.OneBitAdam()) {
      const int64_t warmup = p.onebit_warmup_steps;
      seams.replica_hook = [=](const model::ParameterLayout& layout,
                               std::unique_ptr<optim::Optimizer>& optimizer,
                               Allocator& alloc) -> HookOr {
        ASSIGN_OR_RETURN(std::unique_ptr<parallel::OneBitAdam> onebit,
                         parallel::OneBitAdam::Create(std::move(optimizer), dp, warmup, algorithm,
                                                      alloc, parallel::OneBitParts(layout)));
        auto hook = std::make_unique<parallel::OneBitAdamHook>(*onebit, dp->size());
        optimizer = std::move(onebit);
        return std::unique_ptr<parallel::GradientHook>(std::move(hook));
      };
    }
    return absl::OkStatus();
  }
};

}  // namespace

TALLY_REGISTER_EXTENSION(compression, 10, GradientCompression);

}  // namespace tally::extensions
