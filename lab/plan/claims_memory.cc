// The catalogue's claims of what a GPU holds and of the bubble (claim_runs.h): the ZeRO
// paper's memory table, the seed's optimizer share on 1024 GPUs, the pipeline bubble; and
// the seed's 13 worked examples (the planner's figures).
#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/parallel/pipeline_schedule.h"
#include "lab/plan/claim_runs.h"
#include "lab/report/report.h"
#include "core/runtime/status_macros.h"

namespace tally::plan::internal_claims {

// --- The ZeRO paper's memory table -------------------------------------------------

Results ZeroMemory() {
  // A GPT of about the paper's 7.5B: 36 layers of 4096 channels, GPT-2's vocabulary.
  const PlanInput base = GptAtScale(36, 32, 4096, 50304, 1024);
  const model::GPTConfig& config = base.model.config;
  const double phi = double(base.model.params), K = 12;
  const char* stage_words[] = {"baseline (no ZeRO)", "Pos (ZeRO-1)", "Pos+g (ZeRO-2)",
                               "Pos+g+p (ZeRO-3)"};
  // The paper's per-GPU model states, (2 + 2 + K)Ψ unsharded.
  auto paper = [&](double psi, int stage, double nd) {
    switch (stage) {
      case 0: return (2 + 2 + K) * psi;
      case 1: return (2 + 2) * psi + K * psi / nd;
      case 2: return 2 * psi + (2 + K) * psi / nd;
      default: return (2 + 2 + K) * psi / nd;
    }
  };
  std::vector<ClaimResult> out;
  struct Point {
    int nd, stage;
  };
  std::vector<Point> points = {{4, 0}};
  for (int nd : {4, 16, 64}) {
    for (int stage = 1; stage <= 3; ++stage) points.push_back({nd, stage});
  }
  for (const Point& p : points) {
    PlanInput in = base;
    in.dp = p.nd;
    in.zero = p.stage;
    ASSIGN_OR_RETURN(const train::RankLedgers run, MeasurePlan(in));
    int64_t states = 0;
    for (const MemoryLedger& m : run.memory) states = std::max(states, ModelStates(m));
    ClaimResult r;
    r.name = absl::StrCat("zero-memory/", p.nd, "/", p.stage);
    r.claim = absl::StrFormat("%s over Nd = %d: %s; at the paper's Ψ = 7.5B, %.3g GB",
                              stage_words[p.stage], p.nd,
                              p.stage == 0   ? "(2 + 2 + K)Ψ"
                              : p.stage == 1 ? "(2 + 2)Ψ + KΨ/Nd"
                              : p.stage == 2 ? "2Ψ + (2 + K)Ψ/Nd"
                                             : "(2 + 2 + K)Ψ/Nd",
                              paper(7.5e9, p.stage, p.nd) / 1e9);
    r.source = "Rajbhandari et al., ZeRO (SC 2020), table 1, K = 12 for mixed-precision Adam";
    r.setting = absl::StrCat("tally's GPT of 36 layers of 4096 channels (Φ = ", base.model.params,
                             "), bf16 (2 + 2 + 12 bytes a value), dp ", p.nd,
                             ": a dry run's memory ledger, the fullest GPU");
    r.formula = "PlanMemoryPerGpu's bf16 line: each tensor's parameters, gradients and optimizer "
                "state on the rank, ZeRO's shards padded to Nd equal parts, ZeRO-3's gathered "
                "unit (memory.cc)";
    r.checks = {{"model states of the fullest GPU", double(states), PlanMemoryLine(in, 1)}};
    r.tally = double(states);
    r.claimed = paper(phi, p.stage, p.nd);
    // ZeRO-3 computes on gathered parameters: the embeddings, open on a first stage from
    // the lookup through the layers' forwards, and one layer at a time (lab/report/memory.cc).
    const double h = config.n_embd;
    const double gathered =
        2 * ((double(config.vocab_size) + config.seq_len) * h + 12 * h * h + 13 * h);
    r.leaves_out =
        p.stage == 3
            ? absl::StrFormat("the parameters ZeRO-3 gathers to compute: the embeddings, open "
                              "from the lookup through the layers' forwards, and one layer, "
                              "(V + T)·h + 12h² + 13h values at 2 bytes = %.0f B; with the "
                              "shards' padding, %s over 16Ψ/Nd here; activations are apart",
                              gathered, Percent(r.Ratio()))
            : absl::StrCat("the shards' padding to Nd equal parts (", Percent(r.Ratio()),
                           " here); activations and buffers are apart");
    out.push_back(std::move(r));
  }
  return out;
}

// --- The seed's optimizer share on 1024 GPUs ---------------------------------------

Results OptimizerShare() {
  // A GPT of about LLaMA-70B's size, as the seed's 3D layouts cut it.
  PlanInput in = GptAtScale(80, 64, 8192, 32000, 256);
  in.dp = 32;
  in.tp = 8;
  in.pp = 4;
  in.zero = 1;
  ASSIGN_OR_RETURN(const train::RankLedgers run, MeasurePlan(in));
  const train::TrainOptions o = PlanAsTrainOptions(in);
  int64_t optimizer = 0, exact = 0, states = 0;
  int fullest = 0;
  for (int rank = 0; rank < int(run.memory.size()); ++rank) {
    const MemoryLedger& m = run.memory[size_t(rank)];
    const int64_t held = ModelStates(m);
    if (held > states) {
      states = held;
      fullest = rank;
    }
    optimizer = std::max(optimizer, m.peak(MemoryCategory::kOptimizer));
    exact = std::max(exact, report::PredictedMemory(o, rank).optimizer);
  }
  const double phi = double(in.model.params), gpus = double(in.world());
  const int64_t fullest_optimizer = run.memory[size_t(fullest)].peak(MemoryCategory::kOptimizer);
  ClaimResult r;
  r.name = "optimizer-share";
  r.claim = "on 1024 GPUs in 3D the optimizer states are negligible: 12Φ/1024 ≈ 0.012Φ a GPU, "
            "against 2Φ/(tp·pp) each for the parameters and the gradients";
  r.source = "the seed's Q6";
  r.setting = absl::StrCat("tally's GPT of 80 layers of 8192 channels (Φ = ", in.model.params,
                           "), bf16, dp 32 × tp 8 × pp 4 = 1024 GPUs, ZeRO-1: a dry run's "
                           "memory ledger");
  r.formula = "each rank's tensors (its tp part of its stage's layers, the embedding on the "
              "first and the last stage), the optimizer's 12 bytes a value cut in dp equal "
              "shards, the first ranks taking the larger (report::PredictedMemory)";
  r.checks = {{"the most optimizer state a GPU holds", double(optimizer), double(exact)},
              {"the fullest GPU's model states", double(states), PlanMemoryLine(in, 1)}};
  r.tally = double(optimizer);
  r.claimed = 12 * phi / gpus;
  r.leaves_out = absl::StrFormat(
      "the stages' unequal shares: the first and the last stage also hold the embedding "
      "(V·h), so the busiest GPU holds %.2f%% more than 12Φ/1024; and \"negligible\" is %.1f%% "
      "of the fullest GPU's model states (%.2f GB of %.2f GB)",
      100 * (r.Ratio() - 1), 100.0 * double(fullest_optimizer) / double(states),
      double(fullest_optimizer) / 1e9, double(states) / 1e9);
  return std::vector<ClaimResult>{r};
}

// --- The pipeline bubble -----------------------------------------------------------

Results Bubble() {
  std::vector<ClaimResult> out;
  struct Case {
    const char* name;
    parallel::PipelineSchedule schedule;
    int stages, micro_batches, chunks;
  };
  for (const Case& c : {Case{"bubble/1f1b", parallel::PipelineSchedule::k1F1B, 4, 8, 1},
                        Case{"bubble/interleaved", parallel::PipelineSchedule::kInterleaved, 4, 8, 2}}) {
    // Backwards twice as long as forwards, as a layer's are.
    const parallel::SimulatedSchedule played =
        parallel::Simulate(c.schedule, c.stages, c.micro_batches, /*backward_slots=*/2, c.chunks);
    const double theory = parallel::TheoreticalBubble(c.stages, c.micro_batches, c.chunks);
    double idle = 0;
    for (int stage = 0; stage < c.stages; ++stage) idle = std::max(idle, played.IdleFraction(stage));
    ClaimResult r;
    r.name = c.name;
    r.claim = "the bubble is (p−1)/(v·m) of the ideal time: (p−1)/(v·m + p−1) of the step";
    r.source = "Narayanan et al., Megatron-LM at scale (SC 2021), section 2.2";
    r.setting = absl::StrCat("the ", parallel::Name(c.schedule), " schedule tally runs, p = ",
                             c.stages, " stages, m = ", c.micro_batches, " micro-batches, v = ",
                             c.chunks, ": played slot by slot, a backward two slots");
    r.formula = "TheoreticalBubble: (p−1)/(v·m + p−1), the idlest stage's share";
    r.unit = "fraction";
    r.checks = {{"the idlest stage's idle share", idle, theory}};
    r.tally = idle;
    r.claimed = double(c.stages - 1) / (c.chunks * c.micro_batches + c.stages - 1);
    r.leaves_out = "equal stages (tally's last also runs ln_f, the LM head and the loss) and free "
                   "boundaries; the interleaved order needs m a multiple of p";
    out.push_back(std::move(r));
  }
  return out;
}

// --- The seed's examples -----------------------------------------------------------

Results Seed() {
  std::vector<ClaimResult> out;
  int n = 0;
  for (const SeedExample& e : SeedExamples()) {
    ClaimResult r;
    r.name = absl::StrCat("seed/", ++n);
    r.claim = absl::StrCat(e.what, ": ", e.seed_figure);
    r.source = "the seed article's worked examples";
    r.setting = "the planner for the example's model (LLaMA's shape is not tally's GPT: no run; "
                "the same formulas are held to runs by the claims above and the planner's tests)";
    r.formula = "tally_plan's exact or seed column for the example's grid";
    r.tally = e.computed_bytes;
    r.claimed = e.seed_bytes;
    r.leaves_out = e.note.empty() ? "nothing: the planner's figure is the seed's"
                                  : absl::StrCat("the planner's note: ", e.note);
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace tally::plan::internal_claims
