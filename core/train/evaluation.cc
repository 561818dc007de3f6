#include "core/train/evaluation.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <tuple>
#include <utility>
#include <vector>

#include "core/runtime/comm/ledger/names.h"
#include "core/runtime/rng.h"
#include "core/runtime/status_macros.h"

namespace tally::train {
namespace {

// A forward of b sequences: the loss (with targets) on every rank, the logits on the
// rank that holds them.
absl::StatusOr<float> Forward(const EvalModel& m, const int32_t* tokens, const int32_t* targets, int b) {
  if (m.pipeline != nullptr) return m.pipeline->Forward(tokens, targets, b);
  return m.gpt->Forward(tokens, targets, b);
}

}  // namespace

absl::StatusOr<float> ValidationLoss(const EvalModel& m, const data::Split& val, int micro_batch_size,
                                     int eval_batches) {
  comm::PhaseScope phase(*m.traffic, comm::Phase::kEval);
  MemoryLedger::TrainingPausedScope paused(m.host->ledger());
  const int b = micro_batch_size;
  const int batches = int(std::min<int64_t>(eval_batches, std::max<int64_t>(1, val.sequences() / b)));
  const int t = m.gpt->config().seq_len;
  const size_t ids = size_t(b) * t;
  std::vector<int32_t> inputs(ids), targets(ids);
  double sum = 0;
  for (int j = 0; j < batches; ++j) {
    val.Fill(int64_t(j) * b, b, inputs.data(), targets.data());
    const int32_t *tokens = inputs.data(), *wanted = targets.data();
    if (m.sequence != nullptr) {  // this rank's positions
      std::tie(tokens, wanted) = m.sequence->Cut(inputs.data(), targets.data(), b);
    }
    ASSIGN_OR_RETURN(float loss, Forward(m, tokens, wanted, b));
    sum += loss;
  }
  if (m.sequence == nullptr) return float(sum / batches);
  comm::LabelScope label(*m.traffic, comm::scope::kLoss);
  ASSIGN_OR_RETURN(const double mean, m.sequence->group().AllReduceValue(
                                          sum / batches, DType::kF32, comm::ReduceOp::kAvg));
  return float(mean);
}

absl::StatusOr<std::string> Sample(const EvalModel& m, const SamplingOptions& o, int bytes,
                                   uint64_t seed) {
  comm::PhaseScope phase(*m.traffic, comm::Phase::kEval);
  MemoryLedger::TrainingPausedScope paused(m.host->ledger());
  const int t = m.gpt->config().seq_len, v = m.gpt->config().vocab_size;
  std::vector<int32_t> context = {'\n'};
  if (!o.prompt.empty()) context.assign(o.prompt.begin(), o.prompt.end());
  for (int32_t& token : context) token &= 0xff;  // bytes, not signed chars
  std::vector<int32_t> window(t, 0);
  std::string text;
  const uint64_t stream = StreamOf("sample");
  std::vector<std::pair<float, int>> scored(v);
  // The last position's logits over the whole vocabulary (tensor parallelism: gathered
  // from the ranks' slices), on the host wherever the model runs.
  const int vl = m.gpt->vocab_local(), slices = m.tp != nullptr ? m.tp->size() : 1;
  Allocator host(m.host->ledger());
  ASSIGN_OR_RETURN(Tensor mine, Tensor::Empty({vl}, DType::kF32, host, MemoryCategory::kActivations));
  ASSIGN_OR_RETURN(Tensor last, Tensor::Empty({int64_t(vl) * slices}, DType::kF32, host,
                                              MemoryCategory::kActivations));
  const bool last_stage = m.pipeline == nullptr || m.pipeline->last_stage();
  for (int i = 0; i < bytes; ++i) {
    const int len = std::min<int>(int(context.size()), t);
    std::copy(context.end() - len, context.end(), window.begin());
    // The window's last position: its row here (-1: another cp rank holds it).
    int row = len - 1;
    const int32_t* tokens = window.data();
    if (m.sequence != nullptr) {
      row = m.sequence->RowOf(len - 1);
      tokens = m.sequence->Cut(window.data(), nullptr, 1).first;
    }
    RETURN_IF_ERROR(Forward(m, tokens, nullptr, 1).status());
    int chosen = 0;
    if (last_stage && row >= 0) {
      // The last position's logits, this rank's slice on the host, then every slice.
      RETURN_IF_ERROR(m.gpt->LogitsRowToHost(row, mine.data<float>()));
      if (m.tp != nullptr) {
        RETURN_IF_ERROR(m.tp->AllGather(mine, last));
      } else {
        std::memcpy(last.raw_data(), mine.raw_data(), mine.nbytes());
      }
      const float* logits = last.data<float>();
      for (int j = 0; j < v; ++j) scored[j] = {logits[j] / o.temperature, j};
      const int k = o.top_k > 0 ? o.top_k : v;
      std::partial_sort(scored.begin(), scored.begin() + k, scored.end(), std::greater<>());
      double total = 0;
      for (int j = 0; j < k; ++j) total += std::exp(scored[j].first - scored[0].first);
      double pick = Uniform(seed, stream, uint64_t(i)) * total;
      chosen = scored[k - 1].second;
      for (int j = 0; j < k; ++j) {
        pick -= std::exp(scored[j].first - scored[0].first);
        if (pick <= 0) {
          chosen = scored[j].second;
          break;
        }
      }
    }
    if (m.sequence != nullptr) {  // the holder's choice to every cp rank
      ASSIGN_OR_RETURN(const double sum, m.sequence->group().AllReduceValue(
                                             chosen, DType::kF32, comm::ReduceOp::kSum));
      chosen = int(sum);
    }
    if (m.pp != nullptr) {  // the last stage's choice to every stage
      ASSIGN_OR_RETURN(Tensor token, Tensor::Empty({1}, DType::kF32, *m.host, MemoryCategory::kComm));
      token.data<float>()[0] = float(chosen);
      RETURN_IF_ERROR(m.pp->Broadcast(token, m.pp->size() - 1));
      chosen = int(token.data<float>()[0]);
    }
    context.push_back(chosen);
    text += char(chosen);
  }
  return text;
}

}  // namespace tally::train
