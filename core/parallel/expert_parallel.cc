#include "core/parallel/expert_parallel.h"

#include <algorithm>

#include "core/runtime/comm/ledger/names.h"
#include "core/runtime/status_macros.h"

namespace tally::parallel {

absl::StatusOr<std::vector<int64_t>> ExpertParallel::ExchangeCounts(
    std::span<const int64_t> per_expert, const std::string& scope) const {
  comm::LabelScope label(group_->ledger(), scope);
  return group_->ExchangeCounts(per_expert);
}

absl::Status ExpertParallel::AllToAllRows(ConstTypedPtr send, std::span<const int64_t> send_rows,
                                          TypedPtr recv, std::span<const int64_t> recv_rows,
                                          int64_t c, const std::string& scope) const {
  comm::LabelScope label(group_->ledger(), scope);
  std::vector<int64_t> send_counts, recv_counts;
  int64_t sends = 0, receives = 0;
  for (size_t j = 0; j < send_rows.size(); ++j) {
    send_counts.push_back(send_rows[j] * c);
    recv_counts.push_back(recv_rows[j] * c);
    sends += send_counts.back();
    receives += recv_counts.back();
  }
  Tensor in = Tensor::Borrow(TypedPtr(const_cast<void*>(send.data), send.type), sends, device_);
  Tensor out = Tensor::Borrow(recv, receives, device_);
  return group_->AllToAllV(in, send_counts, out, recv_counts);
}

comm::ExpectedCalls RoutingCountCalls(const RoutingShape& s) {
  comm::ExpectedCalls calls;
  for (const comm::Phase phase : {comm::Phase::kForward, comm::Phase::kBackward}) {
    if (phase == comm::Phase::kBackward && !s.recompute) continue;
    for (int l : s.layers) {
      calls.push_back({.group = comm::group::kEp,
                       .primitive = comm::Primitive::kAllToAll,
                       .phase = phase,
                       .scope = comm::scope::Layer(l, comm::scope::kCounts),
                       .count = s.n_experts,
                       .element = 8,
                       .calls = s.micro_batches,
                       .ranks = s.ranks,
                       .rank = s.rank});
    }
  }
  return calls;
}

}  // namespace tally::parallel
