// A plan beside the run it describes (measured.h).
#include "lab/plan/measured.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/parallel/pipeline_parallel.h"
#include "core/runtime/comm/ledger/names.h"
#include "core/runtime/status_macros.h"

namespace tally::plan {

namespace {

using comm::LedgerKey;
using comm::Primitive;

// ZeRO's passes: over the dp group (and the experts' edp), or over its shard group with
// the replicas' all-reduce (HSDP, hpZ, qgZ's two hops).
bool ZeroPass(const LedgerKey& k) {
  return ((k.group == comm::group::kDp || k.group == comm::group::kEdp ||
           k.group == comm::group::kDpShard) &&
          k.primitive != Primitive::kAllReduce) ||
         k.group == comm::group::kDpReplicate;
}

}  // namespace

LedgerRows PlanLedgerRows(const std::string& strategy, int zero) {
  if (strategy == "dp all-reduce" && zero == 0) {
    return [](const LedgerKey& k) {
      return k.group == comm::group::kDp && k.primitive == Primitive::kAllReduce && k.label.empty();
    };
  }
  if (strategy == absl::StrCat("zero-", zero)) {  // the dense part over dp, experts over edp
    return [](const LedgerKey& k) {
      return (k.group == comm::group::kDp || k.group == comm::group::kEdp) &&
             k.primitive != Primitive::kAllReduce;
    };
  }
  if (zero == 3 && (strategy == "zero-3 + hpz" || strategy == "zero-3 + qwz" ||
                    strategy == "zero-3 + qgz" || strategy == "zero++ (hpz + qwz + qgz)" ||
                    strategy == "zero-3, no reshard")) {
    return ZeroPass;
  }
  if (strategy == "edp all-reduce (experts)" && zero == 0) {
    return [](const LedgerKey& k) { return k.group == comm::group::kEdp; };
  }
  if (strategy == "tp (layers of a stage)") {
    return [](const LedgerKey& k) {
      return k.group == comm::group::kTp && absl::StartsWith(k.label, "layer") &&
             !absl::EndsWith(k.label, ".experts");
    };
  }
  if (strategy == "pp (tied embedding)") {
    return [](const LedgerKey& k) {
      return k.group == comm::group::kEmbedding && k.label == comm::scope::kTiedEmbedding;
    };
  }
  if (strategy == "tp (embedding, LM head, loss)") {
    return [](const LedgerKey& k) {
      return k.group == comm::group::kTp &&
             (k.label == comm::scope::kEmbedding || k.label == comm::scope::kLmHead ||
              k.label == comm::scope::kCrossEntropy);
    };
  }
  if (strategy == "pp (boundaries)") {
    return [](const LedgerKey& k) { return parallel::IsPipelineBoundary(k); };
  }
  if (strategy == "tp (pipeline gathers)") {
    return [](const LedgerKey& k) {
      return k.group == comm::group::kTp && parallel::ParseBoundaryScope(k.label).has_value();
    };
  }
  if (strategy == "cp (attention)") {
    return [](const LedgerKey& k) { return k.group == comm::group::kCp; };
  }
  if (absl::StartsWith(strategy, "dp powersgd (r=") && zero == 0) {
    return [](const LedgerKey& k) {
      return k.group == comm::group::kDp && k.phase == comm::Phase::kBackward;
    };
  }
  if (strategy == "dp 1-bit adam" && zero == 0) {
    return [](const LedgerKey& k) {
      return k.group == comm::group::kDp && absl::StartsWith(k.label, "onebit_");
    };
  }
  return nullptr;
}

comm::LinkBytes BusiestSent(const std::vector<comm::TrafficLedger>& traffic,
                            const comm::Nodes& nodes, const LedgerRows& rows) {
  comm::LinkBytes most;
  for (const comm::TrafficLedger& ledger : traffic) {
    const comm::LinkBytes b = ledger.SentByLink(nodes, rows);
    if (b.total() > most.total() || (b.total() == most.total() && b.inter > most.inter)) most = b;
  }
  return most;
}

int64_t MostSent(const std::vector<comm::TrafficLedger>& traffic, const LedgerRows& rows) {
  int64_t most = 0;
  for (const comm::TrafficLedger& ledger : traffic) most = std::max(most, ledger.Sum(rows).bytes_sent);
  return most;
}

absl::StatusOr<train::RankLedgers> MeasurePlan(
    const PlanInput& in, bool dry_run, int64_t steps,
    const std::function<void(train::TrainOptions&)>& adjust) {
  train::TrainOptions o = PlanAsTrainOptions(in);
  o.training.steps = steps;
  o.data.eval_every = 0;
  o.sampling.sample_bytes = 0;
  o.training.threads = 1;
  o.dry_run = dry_run;
  if (adjust) adjust(o);
  o = o.Resolved();
  RETURN_IF_ERROR(o.Validate());
  return train::MeasureSteps(o);
}

}  // namespace tally::plan
