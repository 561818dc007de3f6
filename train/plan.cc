#include "train/plan.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "model/parameters.h"
#include "parallel/pipeline_schedule.h"
#include "parallel/zero.h"
#include "runtime/comm/ledger/exact_traffic.h"

namespace tally::train {
namespace {

using comm::Algorithm;
using comm::Primitive;

// Bytes rank `rank` of `n` sends in one call of `p` over `count` values of `e` bytes.
double Sent(Primitive p, Algorithm a, int n, int rank, int64_t count, int e) {
  return double(comm::ExactTraffic(p, a, n, rank, -1, count, size_t(e)).sent);
}

// The largest and the summed bytes over the ranks of a group of n.
struct Spread {
  double most = 0, sum = 0;
};
template <typename PerRank>
Spread OverRanks(int n, PerRank per_rank) {
  Spread s;
  for (int r = 0; r < n; ++r) {
    double b = per_rank(r);
    s.most = std::max(s.most, b);
    s.sum += b;
  }
  return s;
}

// The values one GPU holds: its tensor-parallel part of its stage (the largest).
int64_t PartParams(const PlanInput& in) {
  if (!in.model.gpt) return in.model.params / (int64_t(in.tp) * in.pp);
  const TrainOptions o = PlanAsTrainOptions(in);
  const std::vector<parallel::LayerRange> stages =
      parallel::StageLayers(o.model.n_layer, o.pp, {}).value();
  int64_t most = 0;
  for (const parallel::LayerRange& s : stages) {
    for (int t = 0; t < in.tp; ++t) {
      most = std::max(most, model::ParameterLayout::ForGPT(o.model, in.tp, t, s.begin, s.end).total());
    }
  }
  return most;
}

// α-β time of a ring collective moving `steps` messages of `bytes` each, one after the
// other; the seed's Q11: T = 2(N-1)·(α + Φ/(N·β)) for the all-reduce.
double Time(const Link& link, double steps, double bytes) {
  return steps * (link.latency_s + bytes / link.bytes_per_s);
}

}  // namespace

absl::StatusOr<PlanModel> ModelPreset(const std::string& name) {
  PlanModel m;
  m.name = name;
  if (name == "toy" || name == "gpt2-124m") {
    m.gpt = true;
    if (name == "gpt2-124m") {
      m.config.n_layer = 12;
      m.config.n_head = 12;
      m.config.n_embd = 768;
      m.config.seq_len = 1024;
      m.config.vocab_size = 256;  // tally's byte vocabulary (GPT-2's 50257 in its own)
    }
    m.params = m.config.NumParams();
    m.layers = m.config.n_layer;
    m.hidden = m.config.n_embd;
    return m;
  }
  struct Shape {
    const char* name;
    int64_t params;
    int layers, hidden;
  };
  for (const Shape& s : {Shape{"llama-7b", 7'000'000'000, 32, 4096},
                         Shape{"llama-13b", 13'000'000'000, 40, 5120},
                         Shape{"llama-70b", 70'000'000'000, 80, 8192}}) {
    if (name == s.name) {
      m.params = s.params;
      m.layers = s.layers;
      m.hidden = s.hidden;
      return m;
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "[flags] --model must be toy, gpt2-124m, llama-7b, llama-13b or llama-70b, got '", name, "'"));
}

TrainOptions PlanAsTrainOptions(const PlanInput& in) {
  TrainOptions o;
  o.model = in.model.config;
  o.model.seq_len = in.seq_len;
  o.dp = in.dp;
  o.tp = in.tp;
  o.pp = in.pp;
  o.zero = in.zero;
  o.sequence_parallel = in.sequence_parallel;
  o.global_batch_size = in.batch * in.dp;
  o.micro_batch_size = in.batch / std::max(1, in.micro_batches);
  o.allreduce = in.allreduce;
  o.precision = in.precision;
  o.fp32_grad_accum = in.fp32_grad_accum;
  return o;
}

// Long, and kept whole: one row per strategy, its seed form, exact form and time side by
// side, so that the table reads as the article's list.
std::vector<PlanRow> Plan(const PlanInput& in) {
  std::vector<PlanRow> rows;
  const int e = in.bytes_per_value, m = std::max(1, in.micro_batches);
  const int64_t part = PartParams(in);  // Φ/(tp·pp), or the largest exact part
  const Link& link = in.link;
  if (in.dp > 1) {
    const int n = in.dp;
    const Algorithm a = in.allreduce;
    // Per pass over the part: a ring step moves part/n; the naive root all of it.
    const double ring_steps = 2.0 * (n - 1), piece = double(part) * e / n;
    auto time = [&](double passes) {
      return a == Algorithm::kRing ? passes / 2 * Time(link, ring_steps, piece)
                                   : passes / 2 * Time(link, ring_steps, double(part) * e);
    };
    Spread ar = OverRanks(n, [&](int r) { return Sent(Primitive::kAllReduce, a, n, r, part, e); });
    rows.push_back({"dp all-reduce", 2.0 * part * e, ar.most, ar.sum * in.tp * in.pp, time(2),
                    a == Algorithm::kRing ? "2Φ per GPU (2NΦ in all for naive)" : "2NΦ in all"});
    // ZeRO's reduce-scatters and all-gathers over the part, one pass each, for rank r (a
    // tally GPT part is cut unit by unit under ZeRO-2/3: zero.h's exact count per pass).
    const model::ParameterLayout layout =
        in.model.gpt ? model::ParameterLayout::ForGPT(
                           PlanAsTrainOptions(in).model, in.tp, 0, 0,
                           parallel::StageLayers(in.model.layers, in.pp, {}).value()[0].end)
                     : model::ParameterLayout();
    auto zero_pass = [&](int stage, Primitive p, comm::Phase phase, int r) {
      if (!in.model.gpt) return Sent(p, a, n, r, part, e);
      return double(parallel::ZeroBytesPerStep(layout, stage, n, r, 1, a, p, phase)) / 4 * e;
    };
    using comm::Phase;
    Spread zero1 = OverRanks(n, [&](int r) {
      return zero_pass(1, Primitive::kReduceScatter, Phase::kBackward, r) +
             zero_pass(1, Primitive::kAllGather, Phase::kOptimizer, r);
    });
    // Per unit: the reduce-scatter (each micro-batch) and one all-gather pass.
    auto units = [&](double scatters, double gathers) {
      return OverRanks(n, [&](int r) {
        return scatters * zero_pass(2, Primitive::kReduceScatter, Phase::kBackward, r) +
               gathers * zero_pass(3, Primitive::kAllGather, Phase::kForward, r);
      });
    };
    Spread zero2 = units(m, 1), zero3 = units(m, 2 * m);
    const double copies = double(in.tp) * in.pp;
    rows.push_back({"zero-1", 2.0 * part * e, zero1.most, zero1.sum * copies, time(2),
                    "2Φ per GPU: reduce-scatter + all-gather"});
    rows.push_back({"zero-2", 2.0 * part * e, zero2.most, zero2.sum * copies, time(m + 1),
                    "2Φ per GPU (the reduce-scatter per micro-batch)"});
    rows.push_back({"zero-3", 3.0 * part * e, zero3.most, zero3.sum * copies, time(3 * m),
                    "3Φ per GPU: two all-gathers and a reduce-scatter"});
  }
  const double bsh = double(in.batch) * in.seq_len * in.model.hidden;  // per dp rank, a step
  const int layers_per_stage = (in.model.layers + in.pp - 1) / in.pp;
  if (in.tp > 1) {
    const int n = in.tp;
    const int64_t micro = int64_t(bsh / m);  // one micro-batch's activations
    // Four all-reduces per layer and micro-batch (or their all-gathers and reduce-scatters:
    // the same bytes), on the busiest stage's layers.
    Spread per_call = OverRanks(n, [&](int r) { return Sent(Primitive::kAllReduce, Algorithm::kRing, n, r, micro, e); });
    const double calls = 4.0 * m * layers_per_stage;
    rows.push_back({"tp (layers of a stage)", 8.0 * bsh * e * layers_per_stage,
                    calls * per_call.most, calls * per_call.sum * in.dp * in.pp,
                    calls * Time(link, 2.0 * (n - 1), double(micro) * e / n),
                    "8bsh per layer; the embedding, LM head and cross-entropy add to it"});
  }
  if (in.pp > 1) {
    // Each boundary: b·s·h forward and back, per tensor-parallel rank (its part of the
    // sequence under sequence parallelism); a middle stage sends both ways once.
    const double boundary = bsh * e / (in.sequence_parallel ? in.tp : 1);
    const double most = (in.pp > 2 ? 2 : 1) * boundary;
    rows.push_back({"pp (boundaries)", 2.0 * (in.pp - 1) * bsh * e, most,
                    2.0 * (in.pp - 1) * boundary * in.tp * in.dp,
                    Time(link, (in.pp > 2 ? 2.0 : 1.0) * m, boundary / m),
                    "2(N-1)bsh for the pipeline (the seed-formula column is that total)"});
  }
  return rows;
}

std::vector<PlanMemory> PlanMemoryPerGpu(const PlanInput& in) {
  const double part = double(in.model.params) / (double(in.tp) * in.pp), dp = in.dp;
  std::vector<PlanMemory> lines = {{"fp32: 4 + 4 + 8", 4, 4, 8},
                                   {"bf16: 2 + 2 + 12", 2, 2, 12},
                                   {"bf16, fp32 grad accumulation: 2 + 4 + 12", 2, 4, 12}};
  for (PlanMemory& m : lines) {
    m.bytes_per_gpu = m.params * part / (in.zero >= 3 ? dp : 1) +
                      m.grads * part / (in.zero >= 2 ? dp : 1) +
                      m.optimizer * part / (in.zero >= 1 ? dp : 1);
  }
  return lines;
}

std::vector<SeedExample> SeedExamples() {
  const double GB = 1e9, MiB = double(1 << 20), GiB = double(1 << 30);
  const double phi = 7e9, e = 2, b = 4, s = 2048, h = 4096;  // LLaMA-7B, fp16, b = 4, s = 2048
  const double bsh = b * s * h * e;
  std::vector<SeedExample> out;
  double naive_total = 0;
  for (int r = 0; r < 4; ++r) naive_total += Sent(Primitive::kAllReduce, Algorithm::kNaive, 4, r, int64_t(phi), 2);
  out.push_back({"LLaMA-7B naive all-reduce, 4 GPUs, all GPUs' bytes (2·N·Φ)", "112 GB", 112 * GB,
                 2 * 4 * phi * e,
                 absl::StrCat("exact: ", Bytes(naive_total),
                              ": the root's broadcast and the others' sends, 2(N-1)·Φ")});
  out.push_back({"LLaMA-7B ring all-reduce, 4 GPUs, per GPU (2(N-1)/N·Φ)", "21 GB", 21 * GB,
                 Sent(Primitive::kAllReduce, Algorithm::kRing, 4, 0, int64_t(phi), 2), ""});
  out.push_back({"TP, the FFN's all-reduces per layer (4bsh)", "256 MB", 256 * MiB, 4 * bsh,
                 "the seed's MB is MiB here"});
  out.push_back({"TP per layer (8bsh)", "512 MB", 512 * MiB, 8 * bsh, ""});
  out.push_back({"TP, 32 layers", "16 GB", 16 * GiB, 32 * 8 * bsh, "GiB"});
  out.push_back({"PP, 4 stages (2(N-1)bsh)", "384 MB", 384 * MiB, 2 * 3 * bsh, ""});
  out.push_back({"ZeRO-1/2 per GPU (2Φ)", "28 GB", 28 * GB, 2 * phi * e, ""});
  out.push_back({"ZeRO-3 per GPU (3Φ)", "42 GB", 42 * GB, 3 * phi * e, "50% more than ZeRO-1/2"});
  out.push_back({"model states per GPU, no sharding (16Φ)", "112 GB", 112 * GB, 16 * phi, ""});
  out.push_back({"model states per GPU, ZeRO-3 over 8 GPUs", "14 GB", 14 * GB, 16 * phi / 8, ""});
  const double phi70 = 70e9, s70 = 4096, h70 = 8192;
  out.push_back({"70B on 128 GPUs (TP 8, PP 2, DP 8): DP per GPU 2Φe/(tp·pp)", "17.5 GB", 17.5 * GB,
                 2 * phi70 * e / 16, ""});
  out.push_back({"70B: TP per layer 8·b·s·h·e", "≈ 4 GB", 4 * GB, 8 * 8 * s70 * h70 * e,
                 "matches with b = 8 (b = 4 gives 2.1 GB)"});
  out.push_back({"70B: PP 2(N-1)·b·s·h·e, N = 2", "≈ 0.5 GB", 0.5 * GB, 2 * 1 * 4 * s70 * h70 * e,
                 "matches with b = 4 (b = 8 gives 1.07 GB): the seed's TP and PP figures assume "
                 "different batch sizes"});
  return out;
}

std::string Bytes(double bytes) {
  return absl::StrFormat("%.2f GB (%.2f GiB)", bytes / 1e9, bytes / double(1 << 30));
}

}  // namespace tally::train
