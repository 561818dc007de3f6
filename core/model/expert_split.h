// Where a mixture-of-experts layer's experts are (moe.h): every one on this rank (Serial),
// or spread over the ranks of an expert-parallel group (core/parallel/expert_parallel.h),
// which each token's rows reach by an all-to-all with uneven counts and come back from
// by another. The model calls only this interface.
//
// Rank r of an expert-parallel group of N holds experts [r·E/N, (r+1)·E/N). Row blocks
// travel packed in rank order; `scope` names the call in the traffic ledger.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/runtime/dtype.h"

namespace tally::model {

class ExpertSplit {
 public:
  virtual ~ExpertSplit() = default;
  virtual int size() const = 0;
  virtual int rank() const = 0;

  // From the rows this rank sends each of the model's E experts (`per_expert`, in expert
  // order), what every rank sends each of this rank's E/N experts: N·(E/N) counts, source
  // by source (an all-to-all of E int64, each rank its experts' E/N).
  virtual absl::StatusOr<std::vector<int64_t>> ExchangeCounts(std::span<const int64_t> per_expert,
                                                              const std::string& scope) const = 0;
  // Rows of `c` values of send's type: send_rows[j] to rank j from `send`, recv_rows[j]
  // from rank j into `recv`, each packed in rank order (an all-to-all-v).
  virtual absl::Status AllToAllRows(ConstTypedPtr send, std::span<const int64_t> send_rows,
                                    TypedPtr recv, std::span<const int64_t> recv_rows, int64_t c,
                                    const std::string& scope) const = 0;
};

}  // namespace tally::model
