#include "core/model/moe.h"

#include <algorithm>
#include <cmath>

#include "core/runtime/comm/ledger/names.h"
#include "core/runtime/status_macros.h"

namespace tally::model {

namespace {

// Each token's softmax over the experts (r.probs) and its k most probable, the lower
// index first among equals, their weights renormalised over the k (r.choice, r.weight,
// r.routed).
void ChooseTopK(const float* logits, MoeRouting& r) {
  const int n = r.n, k = r.k, e_count = r.experts;
  for (int i = 0; i < n; ++i) {
    const float* l = logits + size_t(i) * e_count;
    float* p = r.probs.data() + size_t(i) * e_count;
    const float max = *std::max_element(l, l + e_count);
    double sum = 0;
    for (int e = 0; e < e_count; ++e) sum += std::exp(double(l[e] - max));
    for (int e = 0; e < e_count; ++e) p[e] = float(std::exp(double(l[e] - max)) / sum);
    std::vector<int32_t> order(static_cast<size_t>(e_count));
    for (int e = 0; e < e_count; ++e) order[size_t(e)] = e;
    std::stable_sort(order.begin(), order.end(), [p](int32_t a, int32_t b) { return p[a] > p[b]; });
    double chosen = 0;
    for (int j = 0; j < k; ++j) chosen += p[order[size_t(j)]];
    for (int j = 0; j < k; ++j) {
      const int32_t e = order[size_t(j)];
      r.choice[size_t(i) * k + j] = e;
      r.weight[size_t(i) * k + j] = float(double(p[e]) / chosen);
      ++r.routed[size_t(e)];
    }
  }
}

// Capacity, in priority order: every first choice in token order, then every second...
// (r.kept); then each expert's slots, in the same order (r.offset, r.slot_token,
// r.slot_choice). No expert can take more than every choice: a larger capacity is no
// limit.
void KeepWithinCapacity(double capacity_factor, MoeRouting& r) {
  const int n = r.n, k = r.k, e_count = r.experts;
  const double limit =
      capacity_factor > 0 ? std::ceil(capacity_factor * k * double(n) / e_count) : double(n) * k;
  const int64_t capacity = int64_t(std::min(limit, double(n) * k));
  std::vector<int64_t> taken(static_cast<size_t>(e_count), 0);
  for (int j = 0; j < k; ++j) {
    for (int i = 0; i < n; ++i) {
      const size_t at = size_t(i) * k + j;
      int64_t& t = taken[size_t(r.choice[at])];
      if (t < capacity) {
        r.kept[at] = 1;
        ++t;
      }
    }
  }
  r.offset.assign(size_t(e_count) + 1, 0);
  for (int e = 0; e < e_count; ++e) r.offset[size_t(e) + 1] = r.offset[size_t(e)] + taken[size_t(e)];
  r.slot_token.resize(size_t(r.offset.back()));
  r.slot_choice.resize(size_t(r.offset.back()));
  std::vector<int64_t> filled(r.offset.begin(), r.offset.end() - 1);
  for (int j = 0; j < k; ++j) {
    for (int i = 0; i < n; ++i) {
      const size_t at = size_t(i) * k + j;
      if (!r.kept[at]) continue;
      const int64_t slot = filled[size_t(r.choice[at])]++;
      r.slot_token[size_t(slot)] = i;
      r.slot_choice[size_t(slot)] = j;
    }
  }
}

}  // namespace

MoeRouting Route(const GPTConfig& config, const float* logits, int n) {
  const int e_count = config.n_experts, k = config.moe_top_k;
  MoeRouting r;
  r.n = n;
  r.k = k;
  r.experts = e_count;
  r.probs.resize(size_t(n) * e_count);
  r.choice.resize(size_t(n) * k);
  r.weight.resize(size_t(n) * k);
  r.kept.assign(size_t(n) * k, 0);
  r.routed.assign(size_t(e_count), 0);
  ChooseTopK(logits, r);
  KeepWithinCapacity(config.capacity_factor, r);
  r.balance_tokens = n;
  r.balance_routed.resize(size_t(e_count));
  r.balance_probs.assign(size_t(e_count), 0.0);
  for (int e = 0; e < e_count; ++e) {
    r.balance_routed[size_t(e)] = double(r.routed[size_t(e)]);
    for (int i = 0; i < n; ++i) r.balance_probs[size_t(e)] += r.probs[size_t(i) * e_count + e];
  }
  SetBalanceLoss(config, r);
  return r;
}

void SetBalanceLoss(const GPTConfig& config, MoeRouting& r) {
  // Switch's load balancing: coef · E · Σ f_e · P_e.
  const int e_count = config.n_experts;
  const double n = r.balance_tokens;
  double balance = 0;
  for (int e = 0; e < e_count; ++e) {
    balance += r.balance_routed[size_t(e)] / (n * r.k) * (r.balance_probs[size_t(e)] / n);
  }
  r.aux_loss = config.aux_loss_coef * e_count * balance;
}

namespace {

// The expert's tensors: expert 0's, `e` strides on (its matrices as the matmuls read them).
struct Expert {
  ConstTypedPtr fc_w;
  const float* fc_b;
  ConstTypedPtr proj_w;
  const float* proj_b;
};
Expert ExpertOf(const BlockTensors& w, int e) {
  const int64_t at = int64_t(e) * w.expert_stride;
  return {w.operands(w.fc_w + at), w.fc_b + at, w.operands(w.fcproj_w + at), w.fcproj_b + at};
}
struct ExpertGrads {
  float *fc_w, *fc_b, *proj_w, *proj_b;
};
ExpertGrads ExpertGradsOf(const BlockTensors& g, int e) {
  const int64_t at = int64_t(e) * g.expert_stride;
  return {g.fc_w + at, g.fc_b + at, g.fcproj_w + at, g.fcproj_b + at};
}

// Row `row` of a row-major buffer of `c` columns.
ConstTypedPtr Row(ConstTypedPtr base, int64_t row, int64_t c) { return base + row * c; }
TypedPtr Row(TypedPtr base, int64_t row, int64_t c) { return base + row * c; }

// The rows each of this rank's experts runs: all of the routing's, or under expert
// parallelism what every rank sent it.
std::vector<int64_t> LocalRows(const MoeRouting& r, const ExpertSplit* experts) {
  std::vector<int64_t> rows;
  if (experts == nullptr) {
    for (int e = 0; e < r.experts; ++e) rows.push_back(r.tokens(e));
    return rows;
  }
  const int local = r.experts / experts->size();
  rows.assign(size_t(local), 0);
  for (size_t i = 0; i < r.recv_counts.size(); ++i) rows[i % size_t(local)] += r.recv_counts[i];
  return rows;
}

// Between the rows as they arrive (source by source, each source's expert by expert) and
// as the experts run them (expert by expert, each expert's source by source): blocks of
// r.recv_counts rows, `row_bytes` each.
absl::Status Reorder(Kernels& k, const MoeRouting& r, int local, const void* from, void* to,
                     size_t row_bytes, bool to_experts) {
  // Where block b = (source j, expert l), at j·local + l, starts in either order.
  const size_t blocks = r.recv_counts.size();
  const int sources = int(blocks) / local;
  std::vector<int64_t> by_source(blocks, 0), by_expert(blocks, 0);
  for (size_t b = 1; b < blocks; ++b) by_source[b] = by_source[b - 1] + r.recv_counts[b - 1];
  int64_t at = 0;
  for (int l = 0; l < local; ++l) {
    for (int j = 0; j < sources; ++j) {
      const size_t b = size_t(j * local + l);
      by_expert[b] = at;
      at += r.recv_counts[b];
    }
  }
  for (size_t b = 0; b < r.recv_counts.size(); ++b) {
    if (r.recv_counts[b] == 0) continue;
    const int64_t src = to_experts ? by_source[b] : by_expert[b];
    const int64_t dst = to_experts ? by_expert[b] : by_source[b];
    RETURN_IF_ERROR(k.Copy(static_cast<char*>(to) + size_t(dst) * row_bytes,
                           static_cast<const char*>(from) + size_t(src) * row_bytes,
                           size_t(r.recv_counts[b]) * row_bytes));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status MoeForward(Kernels& k, const GPTConfig& config, const LayerSplit& split, int layer,
                        int n, const BlockTensors& w, ConstTypedPtr x, const ExpertSplit* experts,
                        const SequenceSplit* sequence, const MoeActivations& a,
                        const MoeScratch& s, float* out) {
  const int c = config.n_embd, e_count = config.n_experts, hidden = 4 * c / split.size();
  const std::string scope = comm::scope::Layer(layer, comm::scope::kExperts);
  RETURN_IF_ERROR(k.LinearForward(s.logits, x, w.operands(w.router_w), nullptr, n, c, e_count));
  std::vector<float> logits(static_cast<size_t>(n) * e_count);
  RETURN_IF_ERROR(k.ToHost(logits.data(), s.logits, sizeof(float) * logits.size()));
  if (k.device().type == DeviceType::kMeta) {
    // A dry run has no logits: token i prefers experts i·k, i·k + 1, ... (mod E), in that
    // order, the balanced routing the seed's all-to-all estimate assumes.
    const int top = config.moe_top_k;
    for (int i = 0; i < n; ++i) {
      for (int e = 0; e < e_count; ++e) {
        const int rank = ((e - i * top) % e_count + e_count) % e_count;
        logits[size_t(i) * e_count + e] = -float(rank);
      }
    }
  }
  *a.routing = Route(config, logits.data(), n);
  MoeRouting& r = *a.routing;
  if (sequence != nullptr) {  // the balance over the whole micro-batch: [routed | Σ p]
    std::vector<double> sums = r.balance_routed;
    sums.insert(sums.end(), r.balance_probs.begin(), r.balance_probs.end());
    RETURN_IF_ERROR(sequence->SumOverSequence(sums.data(), int64_t(sums.size()),
                                              comm::scope::Layer(layer, comm::scope::kBalance)));
    r.balance_routed.assign(sums.begin(), sums.begin() + e_count);
    r.balance_probs.assign(sums.begin() + e_count, sums.end());
    r.balance_tokens = double(n) * sequence->size();
    SetBalanceLoss(config, r);
  }
  // The tokens' rows, as each expert takes them.
  const size_t row_bytes = size_t(c) * SizeOf(x.type);
  for (int64_t slot = 0; slot < r.kept_count(); ++slot) {
    RETURN_IF_ERROR(k.Copy(Row(a.x, slot, c).data, Row(x, r.slot_token[size_t(slot)], c).data, row_bytes));
  }
  // Under expert parallelism: the counts, then the rows to their experts' ranks.
  const int ranks = experts != nullptr ? experts->size() : 1, local = e_count / ranks;
  if (experts != nullptr) {
    std::vector<int64_t> per_expert;
    for (int e = 0; e < e_count; ++e) per_expert.push_back(r.tokens(e));
    ASSIGN_OR_RETURN(
        r.recv_counts,
        experts->ExchangeCounts(per_expert, comm::scope::Layer(layer, comm::scope::kCounts)));
    r.send_rows.assign(size_t(ranks), 0);
    r.recv_rows.assign(size_t(ranks), 0);
    for (int j = 0; j < ranks; ++j) {
      r.send_rows[size_t(j)] = r.offset[size_t((j + 1) * local)] - r.offset[size_t(j * local)];
      for (int l = 0; l < local; ++l) r.recv_rows[size_t(j)] += r.recv_counts[size_t(j * local + l)];
    }
    RETURN_IF_ERROR(experts->AllToAllRows(a.x, r.send_rows, a.wire_x, r.recv_rows, c,
                                          comm::scope::Layer(layer, comm::scope::kDispatch)));
    RETURN_IF_ERROR(Reorder(k, r, local, a.wire_x.data, a.expert_x.data, row_bytes, true));
  }
  const std::vector<int64_t> rows = LocalRows(r, experts);
  int64_t at = 0;
  for (int l = 0; l < local; ++l) {
    if (rows[size_t(l)] == 0) continue;
    const Expert m = ExpertOf(w, l);
    const int count = int(rows[size_t(l)]);
    float* h = a.hidden + at * hidden;
    RETURN_IF_ERROR(split.ColumnLinearForward(k, h, Row(a.expert_x, at, c), TypedPtr(), m.fc_w,
                                              m.fc_b, 1, count, c, hidden, nullptr, scope));
    RETURN_IF_ERROR(k.GeluForward(Row(a.hidden_gelu, at, hidden), h, int64_t(count) * hidden));
    RETURN_IF_ERROR(split.RowLinearForward(k, a.expert_y + at * c, nullptr,
                                           Row(a.hidden_gelu, at, hidden), m.proj_w, m.proj_b, 1,
                                           count, hidden, c, nullptr, scope));
    at += count;
  }
  if (experts != nullptr) {  // the outputs back to their tokens' ranks
    const size_t out_row = sizeof(float) * size_t(c);
    RETURN_IF_ERROR(Reorder(k, r, local, a.expert_y, a.wire_y, out_row, false));
    RETURN_IF_ERROR(experts->AllToAllRows(a.wire_y, r.recv_rows, a.y, r.send_rows, c,
                                          comm::scope::Layer(layer, comm::scope::kCombine)));
  }
  // Combine: each kept output, weighted, into its token's row, in expert order.
  RETURN_IF_ERROR(k.Zero(out, sizeof(float) * size_t(n) * c));
  for (int64_t slot = 0; slot < r.kept_count(); ++slot) {
    const int i = r.slot_token[size_t(slot)], j = r.slot_choice[size_t(slot)];
    float* scaled = s.rows + slot * c;
    RETURN_IF_ERROR(k.Copy(scaled, a.y + slot * c, sizeof(float) * size_t(c)));
    RETURN_IF_ERROR(k.Scale(scaled, c, r.weight[size_t(i) * r.k + j]));
    RETURN_IF_ERROR(k.AddInPlace(out + int64_t(i) * c, scaled, c));
  }
  return absl::OkStatus();
}
absl::Status MoeBackward(Kernels& k, const GPTConfig& config, const LayerSplit& split,
                         int layer, int n, const BlockTensors& w, const BlockTensors& g,
                         ConstTypedPtr x, const ExpertSplit* experts, const MoeActivations& a,
                         const MoeScratch& s, float dloss, const float* dout, float* dx) {
  const int c = config.n_embd, e_count = config.n_experts, hidden = 4 * c / split.size();
  const std::string scope = comm::scope::Layer(layer, comm::scope::kExperts);
  const MoeRouting& r = *a.routing;
  const int top = r.k;
  const int64_t kept = r.kept_count();
  // d(weight) of each kept choice: dout[token] · y(slot), on the host in double.
  std::vector<float> host_dout(static_cast<size_t>(n) * c), host_y(static_cast<size_t>(kept) * c);
  RETURN_IF_ERROR(k.ToHost(host_dout.data(), dout, sizeof(float) * host_dout.size()));
  RETURN_IF_ERROR(k.ToHost(host_y.data(), a.y, sizeof(float) * host_y.size()));
  std::vector<double> d_weight(size_t(r.assignments()), 0.0);
  for (int64_t slot = 0; slot < kept; ++slot) {
    const int i = r.slot_token[size_t(slot)], j = r.slot_choice[size_t(slot)];
    double dot = 0;
    for (int q = 0; q < c; ++q) dot += double(host_dout[size_t(i) * c + q]) * host_y[size_t(slot) * c + q];
    d_weight[size_t(i) * top + j] = dot;
  }
  // The experts: d(y) of a slot is its weight times dout[token].
  for (int64_t slot = 0; slot < kept; ++slot) {
    const int i = r.slot_token[size_t(slot)], j = r.slot_choice[size_t(slot)];
    float* dy = s.rows + slot * c;
    RETURN_IF_ERROR(k.Copy(dy, dout + int64_t(i) * c, sizeof(float) * size_t(c)));
    RETURN_IF_ERROR(k.Scale(dy, c, r.weight[size_t(i) * top + j]));
  }
  // Under expert parallelism d(y) goes to the experts' ranks as the rows went, and d(x)
  // comes back as the outputs did; the experts run in expert_rows. Serial: in place.
  const int ranks = experts != nullptr ? experts->size() : 1, local = e_count / ranks;
  const size_t row = sizeof(float) * size_t(c);
  float* expert_rows = experts != nullptr ? s.expert_rows : s.rows;
  if (experts != nullptr) {
    RETURN_IF_ERROR(experts->AllToAllRows(s.rows, r.send_rows, s.wire_rows, r.recv_rows, c,
                                          comm::scope::Layer(layer, comm::scope::kDispatch)));
    RETURN_IF_ERROR(Reorder(k, r, local, s.wire_rows, expert_rows, row, true));
  }
  const std::vector<int64_t> rows = LocalRows(r, experts);
  int64_t at = 0;
  for (int l = 0; l < local; ++l) {
    if (rows[size_t(l)] == 0) continue;
    const Expert m = ExpertOf(w, l);
    const ExpertGrads d = ExpertGradsOf(g, l);
    const int count = int(rows[size_t(l)]);
    float* dh = s.d_hidden + at * hidden;
    RETURN_IF_ERROR(split.RowLinearBackward(k, dh, d.proj_w, d.proj_b, expert_rows + at * c,
                                            nullptr, Row(a.hidden_gelu, at, hidden), m.proj_w, 1,
                                            count, hidden, c, nullptr, scope));
    RETURN_IF_ERROR(k.GeluBackward(dh, a.hidden + at * hidden, dh, int64_t(count) * hidden));
    // The rows' d(x) overwrite their d(y), which is used up.
    RETURN_IF_ERROR(split.ColumnLinearBackward(k, expert_rows + at * c, nullptr, d.fc_w, d.fc_b,
                                               dh, Row(a.expert_x, at, c), m.fc_w, 1, count, c,
                                               hidden, nullptr, scope));
    at += count;
  }
  if (experts != nullptr) {
    RETURN_IF_ERROR(Reorder(k, r, local, expert_rows, s.wire_rows, row, false));
    RETURN_IF_ERROR(experts->AllToAllRows(s.wire_rows, r.recv_rows, s.rows, r.send_rows, c,
                                          comm::scope::Layer(layer, comm::scope::kCombine)));
  }
  // The router: d(p) through the renormalisation and the auxiliary loss, then the softmax.
  std::vector<float> d_logits(static_cast<size_t>(n) * e_count);
  // d(dloss·n · aux)/d p_ie = coef·E·routed_e·dloss / (n·k), n and routed_e the balance's
  // (the whole micro-batch's under a sequence split).
  const double aux_scale =
      config.aux_loss_coef * e_count * double(dloss) / (double(top) * r.balance_tokens);
  for (int i = 0; i < n; ++i) {
    const float* p = r.probs.data() + size_t(i) * e_count;
    std::vector<double> dp(static_cast<size_t>(e_count), 0.0);
    for (int e = 0; e < e_count; ++e) dp[size_t(e)] = aux_scale * r.balance_routed[size_t(e)];
    double chosen = 0, weighted = 0;
    for (int j = 0; j < top; ++j) {
      chosen += p[r.choice[size_t(i) * top + j]];
      weighted += d_weight[size_t(i) * top + j] * r.weight[size_t(i) * top + j];
    }
    for (int j = 0; j < top; ++j) {
      dp[size_t(r.choice[size_t(i) * top + j])] += (d_weight[size_t(i) * top + j] - weighted) / chosen;
    }
    double mean = 0;
    for (int e = 0; e < e_count; ++e) mean += double(p[e]) * dp[size_t(e)];
    for (int e = 0; e < e_count; ++e) d_logits[size_t(i) * e_count + e] = float(p[e] * (dp[size_t(e)] - mean));
  }
  RETURN_IF_ERROR(k.FromHost(s.logits, d_logits.data(), sizeof(float) * d_logits.size()));
  RETURN_IF_ERROR(k.LinearBackward(dx, g.router_w, nullptr, s.logits, x, w.operands(w.router_w), n,
                                   c, e_count));
  // And each slot's d(x) into its token's row.
  for (int64_t slot = 0; slot < kept; ++slot) {
    RETURN_IF_ERROR(k.AddInPlace(dx + int64_t(r.slot_token[size_t(slot)]) * c, s.rows + slot * c, c));
  }
  return absl::OkStatus();
}

}  // namespace tally::model
