// The catalogue's claims of what strategies send (claim_runs.h): the ring, ZeRO-3 against
// ZeRO-2, ZeRO++, PowerSGD, 1-bit Adam, tensor and pipeline parallelism, Ulysses.
#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/model/parameters.h"
#include "core/parallel/onebit_adam.h"
#include "core/parallel/powersgd.h"
#include "lab/plan/claim_runs.h"
#include "core/runtime/comm/ledger/names.h"
#include "core/runtime/status_macros.h"

namespace tally::plan::internal_claims {

// --- Ring all-reduce ---------------------------------------------------------------

Results Ring() {
  PlanInput in = DefaultGpt();
  in.dp = 5;
  ASSIGN_OR_RETURN(const train::RankLedgers run, MeasurePlan(in, /*dry_run=*/false));
  ASSIGN_OR_RETURN(ClaimCheck check,
                   CheckRow(run, in, "dp all-reduce", "the busiest GPU's gradient all-reduce"));
  const double n = in.dp, phi = double(in.model.params);
  ClaimResult r;
  r.name = "ring";
  r.claim = "a ring all-reduce of M bytes sends 2(N−1)/N·M from each of its N GPUs";
  r.source = "Patarasuk & Yuan, bandwidth-optimal all-reduce (2009); the seed's section 2";
  r.setting = absl::StrCat(DefaultGptWords(in), ", dp ", in.dp, ": one real step on thread ranks");
  r.formula = "Σ over the 2(N−1) steps of the chunk the rank sends, the buffer cut in N chunks of "
              "⌊Φ/N⌋ or ⌈Φ/N⌉ values (exact_traffic.h)";
  r.tally = check.measured;
  r.claimed = 2 * (n - 1) / n * phi * 4;
  r.checks = {check};
  const int64_t rest = in.model.params % in.dp;
  r.leaves_out = absl::StrCat(
      "finite chunks: Φ = ", in.model.params, " is ", rest, " value(s) past a multiple of N = ",
      in.dp, ", so the chunks are uneven and the busiest GPU sends ",
      absl::StrFormat("%.1f", r.tally - r.claimed),
      " bytes more than 2(N−1)/N·4Φ; the step's scalar all-reduces (the loss, the norm's squares) "
      "are rows of their own");
  return std::vector<ClaimResult>{r};
}

// --- ZeRO-3 against ZeRO-2 ---------------------------------------------------------

Results Zero3() {
  PlanInput two = DefaultGpt();
  two.dp = 4;
  two.zero = 2;
  PlanInput three = two;
  three.zero = 3;
  PlanInput kept = three;
  kept.zero3_reshard_after_forward = false;
  ASSIGN_OR_RETURN(const train::RankLedgers run2, MeasurePlan(two));
  ASSIGN_OR_RETURN(const train::RankLedgers run3, MeasurePlan(three));
  ASSIGN_OR_RETURN(const train::RankLedgers run_kept, MeasurePlan(kept));
  ClaimResult r;
  r.name = "zero3";
  r.claim = "ZeRO-3 moves 3Ψ a step against 2Ψ for data parallelism and ZeRO-1/2: 1.5×";
  r.source = "Rajbhandari et al., ZeRO (SC 2020), section 7; the seed's section 5";
  r.setting = absl::StrCat(DefaultGptWords(two), ", dp 4: dry runs of ZeRO-2, ZeRO-3, and ZeRO-3 "
                           "without resharding after forward");
  r.formula = "ZeRO-2: a reduce-scatter and an all-gather of Φ, (N−1)/N·4Φ each; ZeRO-3: the "
              "forward's and the backward's gathers and the reduce-scatter, unit by unit, each "
              "unit padded to N equal shards";
  ASSIGN_OR_RETURN(ClaimCheck c2, CheckRow(run2, two, "zero-2", "ZeRO-2, the busiest GPU"));
  ASSIGN_OR_RETURN(ClaimCheck c3, CheckRow(run3, three, "zero-3", "ZeRO-3, the busiest GPU"));
  ASSIGN_OR_RETURN(ClaimCheck ck, CheckRow(run_kept, kept, "zero-3, no reshard",
                                           "ZeRO-3 without resharding, the busiest GPU"));
  r.checks = {c2, c3, ck};
  r.tally = c3.measured;
  r.claimed = 1.5 * c2.measured;
  r.leaves_out = absl::StrCat(
      "the units' padding (", Percent(r.Ratio()), " here); a ZeRO-3 that keeps each unit from "
      "its forward to its backward (FSDP's reshard_after_forward=False) gathers once: ",
      absl::StrFormat("%.3f", ck.measured / c2.measured), "× ZeRO-2, for a unit more held");
  return std::vector<ClaimResult>{r};
}

// --- ZeRO++ ------------------------------------------------------------------------

Results ZeroPlusPlus() {
  PlanInput zero3 = DefaultGpt();
  zero3.precision = DType::kBF16;
  zero3.bytes_per_value = 2;
  zero3.dp = 8;
  zero3.zero = 3;
  zero3.gpus_per_node = 4;
  PlanInput plus = zero3;
  plus.zero_hpz = true;
  plus.zero_quantized_weights = true;
  plus.zero_quantized_gradients = true;
  plus.zero_quant_grad_bits = 4;
  ASSIGN_OR_RETURN(const train::RankLedgers run3, MeasurePlan(zero3));
  ASSIGN_OR_RETURN(const train::RankLedgers runpp, MeasurePlan(plus));
  const std::string zpp = "zero++ (hpz + qwz + qgz)";
  ASSIGN_OR_RETURN(ClaimCheck all3, CheckRow(run3, zero3, "zero-3", "ZeRO-3, the busiest GPU"));
  ASSIGN_OR_RETURN(ClaimCheck inter3, CheckRow(run3, zero3, "zero-3",
                                               "ZeRO-3, the busiest GPU's bytes across nodes", true));
  ASSIGN_OR_RETURN(ClaimCheck allpp, CheckRow(runpp, plus, zpp, "ZeRO++, the busiest GPU"));
  ASSIGN_OR_RETURN(ClaimCheck interpp, CheckRow(runpp, plus, zpp,
                                                "ZeRO++, the busiest GPU's bytes across nodes", true));
  ClaimResult r;
  r.name = "zero++";
  r.claim = "qwZ, hpZ and qgZ together reduce communication volume by 4× against ZeRO-3";
  r.source = "Wang et al., ZeRO++ (2023); DeepSpeed's ZeRO++ tutorial";
  r.setting = absl::StrCat(DefaultGptWords(zero3), ", dp 8 on 2 nodes of 4: dry runs of ZeRO-3 "
                           "and of ZeRO++ (int8 weights, a secondary copy a node, int4 gradients, "
                           "blocks of 256)");
  r.formula = "qwZ: the forward's gathers at 1 + 4/256 bytes a value; hpZ: the backward's gathers "
              "inside the node; qgZ: the reduce-scatter as all-to-alls of 4-bit values, inside "
              "the node then across (PlanRows' zero++ row)";
  r.checks = {all3, inter3, allpp, interpp};
  r.tally = interpp.measured;
  r.claimed = inter3.measured / 4;
  r.leaves_out = absl::StrCat(
      "which bytes: across nodes ZeRO++ sends ", absl::StrFormat("%.1f", inter3.measured / interpp.measured),
      "× less than ZeRO-3, in all bytes ", absl::StrFormat("%.1f", all3.measured / allpp.measured),
      "× (hpZ's backward gathers stay, inside the node); the claim's 4× is 3M → 0.75M across "
      "nodes, and tally's qgZ sums the gradients inside the node before they cross, so a rank "
      "sends (nodes − 1)/N of them across, not (N − 1)/N; qwZ's and qgZ's scales, one fp32 a "
      "block of 256, are in");
  return std::vector<ClaimResult>{r};
}

// --- PowerSGD ----------------------------------------------------------------------

Results PowerSgd() {
  PlanInput plain = DefaultGpt();
  plain.dp = 4;
  PlanInput low = plain;
  low.grad_compression = parallel::GradCompression::kPowerSgd;
  low.powersgd_rank = 4;
  ASSIGN_OR_RETURN(const train::RankLedgers plain_run, MeasurePlan(plain));
  ASSIGN_OR_RETURN(const train::RankLedgers low_run, MeasurePlan(low));
  ASSIGN_OR_RETURN(ClaimCheck c_plain,
                   CheckRow(plain_run, plain, "dp all-reduce", "the plain all-reduce, busiest GPU"));
  ASSIGN_OR_RETURN(ClaimCheck c_low, CheckRow(low_run, low, "dp powersgd (r=4)",
                                              "PowerSGD's step, the busiest GPU"));
  const parallel::PowerSgdSplit split = parallel::SplitForPowerSgd(
      model::ParameterLayout::ForGPT(low.model.config, 1, 0), low.powersgd_rank);
  double low_rank = 0, full = 0;
  for (const parallel::PowerSgdMatrix& m : split.matrices) {
    low_rank += double(m.rows + m.cols) * low.powersgd_rank;
    full += double(m.rows) * double(m.cols);
  }
  const double n = low.dp;
  ClaimResult r;
  r.name = "powersgd";
  r.claim = "a gradient matrix of m × n is sent as (m + n)·r values instead of m·n";
  r.source = "Vogels et al., PowerSGD (NeurIPS 2019); PyTorch DDP's powerSGD_hook";
  r.setting = absl::StrCat(DefaultGptWords(low), ", dp 4, r = 4: dry runs of a compressed step "
                           "and of the plain all-reduce");
  r.formula = "2(N−1)/N·4·(W + Σ_matrices (m + n)·r) by the ring's chunks, W the values sent "
              "whole, in three all-reduces (PowerSgdCalls)";
  r.checks = {c_plain, c_low};
  r.tally = c_low.measured;
  r.claimed = 2 * (n - 1) / n * 4 * low_rank;
  r.leaves_out = absl::StrCat(
      "the tensors sent whole: W = ", split.whole_values, " values (biases, LayerNorms, and the "
      "matrices (m + n)·r would not shrink); the claim's ratio over the matrices is ",
      absl::StrFormat("%.1f", full / low_rank), "×, the step's ",
      absl::StrFormat("%.1f", c_plain.measured / c_low.measured), "× against the plain all-reduce");
  return std::vector<ClaimResult>{r};
}

// --- 1-bit Adam --------------------------------------------------------------------

Results OneBitAdam() {
  PlanInput in = DefaultGpt();
  in.dp = 4;
  in.grad_compression = parallel::GradCompression::kOneBitAdam;
  // Two steps: the warm-up's plain all-reduce, then a compressed one.
  ASSIGN_OR_RETURN(const train::RankLedgers run,
                   MeasurePlan(in, /*dry_run=*/true, /*steps=*/2, [](train::TrainOptions& o) {
                     o.parallel.onebit_warmup_steps = 1;
                   }));
  PlanInput plain = in;
  plain.grad_compression = parallel::GradCompression::kNone;
  ASSIGN_OR_RETURN(const PlanRow plain_row, RowNamed(plain, "dp all-reduce"));
  const ClaimCheck c_plain{"the warm-up step's plain all-reduce, the busiest GPU",
                           double(MostSent(run.traffic, PlanLedgerRows("dp all-reduce", 0))),
                           plain_row.exact_bytes_per_gpu};
  ASSIGN_OR_RETURN(ClaimCheck c_one, CheckRow(run, in, "dp 1-bit adam",
                                              "the compressed step, the busiest GPU"));
  const double step_ratio = c_plain.measured / c_one.measured;
  // A run whose share w of steps is warm-up sends w + (1 − w)/X of the plain bytes: 5× over
  // the run needs w = (1/5 − 1/X)/(1 − 1/X).
  const double warmup = (0.2 - 1 / step_ratio) / (1 - 1 / step_ratio);
  ClaimResult r;
  r.name = "onebit-adam";
  r.claim = "up to 5× less communication volume";
  r.source = "Tang et al., 1-bit Adam (ICML 2021); DeepSpeed's 1-bit Adam tutorial";
  r.setting = absl::StrCat(DefaultGptWords(in), ", dp 4: a dry run of one warm-up step and one "
                           "compressed step");
  r.formula = "per part of a rank's buffer, zero-padded to N values, a multiple of 8p: the "
              "signs' all-to-all and all-gather, 2(p−1)·N/(8p) bytes, and the scales', "
              "2(p−1)·4 (OneBitAdamCalls)";
  r.checks = {c_plain, c_one};
  r.tally = c_one.measured;
  r.claimed = c_plain.measured / 5;
  r.leaves_out = absl::StrCat(
      "the warm-up: a compressed step alone sends ", absl::StrFormat("%.1f", step_ratio),
      "× less than the plain all-reduce; the 5× is of a whole run, whose warm-up steps send "
      "everything, so it holds when ", absl::StrFormat("%.1f%%", 100 * warmup),
      " of the steps are warm-up (tally_train's --onebit_warmup_steps)");
  return std::vector<ClaimResult>{r};
}

// --- Tensor parallelism ------------------------------------------------------------

Results TensorParallel() {
  PlanInput in = DefaultGpt();
  in.tp = 2;
  ASSIGN_OR_RETURN(const train::RankLedgers run, MeasurePlan(in, /*dry_run=*/false));
  ASSIGN_OR_RETURN(ClaimCheck all, CheckRow(run, in, "tp (layers of a stage)",
                                            "the layers' calls, the busiest GPU"));
  ASSIGN_OR_RETURN(const PlanRow row, RowNamed(in, "tp (layers of a stage)"));
  const ClaimCheck layer{"layer 0's calls, the busiest GPU",
                         double(MostSent(run.traffic, [](const comm::LedgerKey& k) {
                           return k.group == comm::group::kTp && absl::StartsWith(k.label, "layer0.");
                         })),
                         row.exact_bytes_per_layer};
  const double b = in.batch, s = in.seq_len, h = in.model.hidden, n = in.tp;
  ClaimResult r;
  r.name = "tp";
  r.claim = "tensor parallelism moves 8·b·s·h values a layer: two all-reduces forward, two backward";
  r.source = "Shoeybi et al., Megatron-LM (2019); the seed's section 3";
  r.setting = absl::StrCat(DefaultGptWords(in), ", tp 2: one real step on thread ranks");
  r.formula = "four ring all-reduces of b·s·h values a layer, 2(N−1)/N of each sent";
  r.checks = {all, layer};
  r.tally = layer.measured;
  r.claimed = 8 * b * s * h * 4;
  r.leaves_out = absl::StrCat("the ring's (N−1)/N = ", absl::StrFormat("%.3f", (n - 1) / n),
                              ": the claim counts each all-reduce as 2·b·s·h; with sequence "
                              "parallelism the same bytes ride all-gathers and reduce-scatters");
  return std::vector<ClaimResult>{r};
}

// --- Pipeline parallelism ----------------------------------------------------------

Results PipelineParallel() {
  PlanInput in = DefaultGpt();
  in.pp = 4;
  in.micro_batches = 2;
  ASSIGN_OR_RETURN(const train::RankLedgers run, MeasurePlan(in, /*dry_run=*/false));
  ASSIGN_OR_RETURN(const PlanRow row, RowNamed(in, "pp (boundaries)"));
  double total = 0;
  const LedgerRows boundaries = PlanLedgerRows("pp (boundaries)", 0);
  for (const comm::TrafficLedger& ledger : run.traffic) total += double(ledger.Sum(boundaries).bytes_sent);
  const double b = in.batch, s = in.seq_len, h = in.model.hidden, n = in.pp;
  ClaimResult r;
  r.name = "pp";
  r.claim = "a pipeline of N stages moves 2(N−1)·b·s·h values a step";
  r.source = "the seed's section 4; GPipe (Huang et al., 2019), 1F1B (Narayanan et al., 2019)";
  r.setting = absl::StrCat(DefaultGptWords(in), ", pp 4, 2 micro-batches, 1F1B: one real step on "
                           "thread ranks");
  r.formula = "each of the N−1 boundaries: the activations forward and their gradient backward, "
              "b·s·h values each, every micro-batch's share";
  r.checks = {{"every GPU's boundary sends, summed", total, row.total_bytes}};
  r.tally = total;
  r.claimed = 2 * (n - 1) * b * s * h * 4;
  r.leaves_out = "nothing, for one replica of tp 1: with tp > 1 and no sequence parallelism each tp "
                 "rank sends the whole boundary (tp× the bytes, --pp_scatter_gather cuts it), and "
                 "the tied embedding's all-reduce between the first and the last stage is a row "
                 "of its own";
  return std::vector<ClaimResult>{r};
}

// --- Ulysses -----------------------------------------------------------------------

Results Ulysses() {
  PlanInput in = DefaultGpt();
  in.cp = 4;
  in.cp_comm = parallel::CpComm::kAllToAll;
  ASSIGN_OR_RETURN(const train::RankLedgers run, MeasurePlan(in));
  ASSIGN_OR_RETURN(ClaimCheck all, CheckRow(run, in, "cp (attention)",
                                            "attention's all-to-alls, the busiest GPU"));
  const double forward = double(MostSent(run.traffic, [](const comm::LedgerKey& k) {
    return k.group == comm::group::kCp && k.phase == comm::Phase::kForward;
  }));
  const double b = in.batch, s = in.seq_len, h = in.model.hidden, p = in.cp;
  const double layers = in.model.layers;
  ClaimResult r;
  r.name = "ulysses";
  r.claim = "each link carries 4Nh/P a layer, against 4Nh for Megatron's sequence parallelism";
  r.source = "Jacobs et al., DeepSpeed-Ulysses (2023)";
  r.setting = absl::StrCat(DefaultGptWords(in), ", cp 4 by all-to-all: a dry run");
  r.formula = "q, k, v and the output, each an all-to-all of b·(s/P)·h values: 4·(P−1)/P·b·(s/P)·h "
              "a layer forward, the same backward";
  r.checks = {all, {"the forward's all-to-alls, the busiest GPU",
                    forward, all.exact / 2}};
  r.tally = forward / layers;
  r.claimed = 4 * b * s * h * 4 / p;
  r.leaves_out = absl::StrCat("the all-to-all's (P−1)/P = ", absl::StrFormat("%.3f", (p - 1) / p),
                              " (a rank keeps its own share), and backward's as much again; the "
                              "claim is a rank's bytes, not a link's of any topology");
  return std::vector<ClaimResult>{r};
}

}  // namespace tally::plan::internal_claims
