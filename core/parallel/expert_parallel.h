// Expert parallelism (GShard; Megatron-LM's and DeepSpeed-MoE's expert-parallel groups):
// each layer's E experts split over the N ranks of the "ep" group, which are data-parallel
// ranks training on their own tokens (core/parallel/topology.h). moe.h's layer routes its
// tokens, then
//
//   counts    an all-to-all of E int64 (scope layer{l}.counts): how many rows each rank
//             sends each of another's experts
//   dispatch  an all-to-all-v of the kept choices' rows (C values each, the matmuls'
//             operand type): the rows for rank j's experts to rank j (layer{l}.dispatch)
//   combine   the experts' outputs (C fp32 values a row) back the same way
//             (layer{l}.combine)
//
// and backward sends the outputs' gradients out and the inputs' gradients back the same
// two ways (phase backward). Per layer and micro-batch, rank r sends Σ_{j≠r} (rows to rank
// j)·C·e bytes in dispatch and Σ_{j≠r} (rows from rank j)·C·4 in combine: with balanced
// routing each all-to-all moves (N−1)/N of the rank's n·k rows, the seed's estimate.
//
//   ExpertParallel experts(groups.ep.get(), model_device);
//   GPT::Create(..., &experts);
#pragma once

#include <cstdint>
#include <vector>

#include "core/model/expert_split.h"
#include "core/runtime/comm/communicator.h"
#include "core/runtime/comm/ledger/expected_calls.h"

namespace tally::parallel {

class ExpertParallel final : public model::ExpertSplit {
 public:
  // `group`: the ep group (not owned; it must outlive this); `device`: where the rows are.
  ExpertParallel(comm::Communicator* group, Device device) : group_(group), device_(device) {}

  int size() const override { return group_->size(); }
  int rank() const override { return group_->rank(); }
  absl::StatusOr<std::vector<int64_t>> ExchangeCounts(std::span<const int64_t> per_expert,
                                                      const std::string& scope) const override;
  absl::Status AllToAllRows(ConstTypedPtr send, std::span<const int64_t> send_rows, TypedPtr recv,
                            std::span<const int64_t> recv_rows, int64_t c,
                            const std::string& scope) const override;

 private:
  comm::Communicator* group_;
  Device device_;
};

// One step's calls of fixed size as data (core/runtime/comm/ledger/expected_calls.h): each
// held layer's routing counts, E int64 (`n_experts`) in each micro-batch's forward, again
// in backward when the forward is recomputed. The rows' all-to-alls carry what the
// routing chose: the ledger keeps the sizes each call was given
// (TrafficLedger::expected), which the report reads instead.
struct RoutingShape {
  int ranks = 1, rank = 0;  // the ep group
  std::vector<int> layers = {};
  int n_experts = 0;
  int64_t micro_batches = 1;
  bool recompute = false;
};
comm::ExpectedCalls RoutingCountCalls(const RoutingShape& shape);

}  // namespace tally::parallel
