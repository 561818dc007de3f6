// The step model's overlap (plan.h's OverlappedDpSeconds): what of the data-parallel
// row stays exposed when its calls are posted while the model computes, as the replay of
// a run plays them (lab/report/replay.h: a posted call runs on its own from its post; the
// rank waits where the run waits). The order of posts and waits is the run's:
// core/parallel/data_parallel.cc (DDP's buckets), core/parallel/zero/zero2.cc and zero3.cc (PostReduce, PrefetchAfter).
#include <algorithm>
#include <vector>

#include "core/model/parameters.h"
#include "core/parallel/data_parallel.h"
#include "core/parallel/pipeline_schedule.h"
#include "core/parallel/topology.h"
#include "lab/plan/plan.h"

namespace tally::plan {

// Long, and kept whole: DDP's buckets, ZeRO-2's reduce-scatters and ZeRO-3's gathers are
// priced on one timeline of when backward closes each unit, which the three share.
double OverlappedDpSeconds(const PlanInput& in, double tp_layers_s) {
  // Context parallelism's calls sit in the layers too, and are not priced here: its dp
  // row is taken whole.
  if (!in.overlap || in.pp > 1 || in.ep > 1 || in.dp <= 1 || in.cp > 1 || in.zero == 1 ||
      !in.model.gpt || !in.gpu.given()) {
    return -1;
  }
  const int m = std::max(1, in.micro_batches), e = in.bytes_per_value;
  const model::ParameterLayout layout = model::ParameterLayout::ForGPT(
      PlanAsTrainOptions(in).model, in.tp, 0,
      {parallel::StageLayers(in.model.layers, 1, {}).value()[0]}, 1, 0);
  // dp rank 0's group and its nodes.
  const parallel::Topology grid(in.dp, in.tp, in.pp, in.order, 1);
  std::vector<int> where;
  for (int r : grid.DpGroup(0)) where.push_back(in.gpus_per_node > 0 ? r / in.gpus_per_node : 0);
  auto passes = [&](double elements, double n) {
    return PassesTime(in.allreduce, where, elements * e, n, in.cluster);
  };
  // A layer's compute, and its blocking tp calls (two all-reduces forward, two backward,
  // two more under recompute: tp_layers_s over the step's layers and micro-batches), are
  // what the posted calls run behind.
  MicroBatchSeconds t = MicroBatchTimes(in);
  const double tp_calls = in.recompute ? 6 : 4;
  const double tp_call = tp_layers_s / (double(m) * in.model.layers * tp_calls);
  t.layer_forward += 2 * tp_call;
  t.layer_backward += (tp_calls - 2) * tp_call;
  const std::vector<model::ParamUnit>& units = layout.units();  // embeddings, layers, ln_f
  const int layers = int(units.size()) - 2;
  const double embeddings = double(units.front().count()), ln_f = double(units.back().count());
  const double layer = double(units[1].count());
  // When backward closes each unit, from its start: ln_f after the end's backward, layer l
  // after the layers above it, the embeddings with layer 0.
  auto closed = [&](size_t unit) {
    if (unit + 1 == units.size()) return t.head_backward;
    const int above = unit == 0 ? layers : layers - int(unit) + 1;
    return t.head_backward + above * t.layer_backward;
  };
  const double end = t.head_backward + layers * t.layer_backward;
  if (in.zero == 0) {
    // The last micro-batch's buckets, each on its own from the close of its first element's
    // unit; backward's end waits for them all.
    const int64_t per_bucket = int64_t(in.bucket_mb * (1 << 20)) / e;
    double last = end;
    for (const comm::Chunk& bucket : parallel::GradientBuckets(layout.total(), per_bucket)) {
      size_t unit = 0;
      while (units[unit].end <= bucket.offset) ++unit;
      last = std::max(last, closed(unit) + passes(double(bucket.count), 2));
    }
    return last - end;
  }
  // A unit's reduce-scatter, from its close to the next unit's close; the embeddings' to
  // the next micro-batch's first close (its forward, the end's backward), the last one's
  // to the blocking loss all-reduce after backward.
  const double loss = passes(1, 2);
  const double forward = layers * t.layer_forward + t.head_forward;
  double exposed = 0;
  for (int j = 0; j < m; ++j) {
    exposed += std::max(0.0, passes(ln_f, 1) - t.layer_backward);
    exposed += (layers - 1) * std::max(0.0, passes(layer, 1) - t.layer_backward);
    exposed += passes(layer, 1);  // layer 0's: the embeddings close at once
    const double after = j + 1 < m ? forward + t.head_backward : loss;
    exposed += std::max(0.0, passes(embeddings, 1) - after);
  }
  if (in.zero == 2) return exposed + passes(double(layout.total()), 1);  // the step's gather
  // ZeRO-3's gathers, one unit ahead. Forward: the embeddings (the first micro-batch's
  // whole; the next ones' prefetched during layer 0's backward), layer 0 whole, each next
  // layer and ln_f behind the layer before. Backward: the embeddings (the LM head's),
  // ln_f and the top layer whole, each layer below behind the one above.
  for (int j = 0; j < m; ++j) {
    exposed += j == 0 ? passes(embeddings, 1)
                      : std::max(0.0, passes(embeddings, 1) - t.layer_backward);
    exposed += passes(layer, 1);
    exposed += (layers - 1) * std::max(0.0, passes(layer, 1) - t.layer_forward);
    exposed += std::max(0.0, passes(ln_f, 1) - t.layer_forward);
    exposed += passes(embeddings, 1) + passes(ln_f, 1) + passes(layer, 1);
    exposed += (layers - 1) * std::max(0.0, passes(layer, 1) - t.layer_backward);
  }
  return exposed;
}

}  // namespace tally::plan
