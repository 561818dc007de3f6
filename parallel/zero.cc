#include "parallel/zero.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "optim/schedule.h"
#include "parallel/data_parallel.h"
#include "runtime/comm/ledger/exact_traffic.h"
#include "runtime/status_macros.h"

namespace tally::parallel {

Sharding::Sharding(const std::vector<ZeroUnit>& units, Cut dense, Cut experts) {
  for (const ZeroUnit& unit : units) {
    const Cut cut = unit.experts ? experts : dense;
    comm::Chunk own = comm::ChunkOf(unit.chunk.count, cut.ranks, cut.rank);
    own.offset += unit.chunk.offset;
    pieces_.push_back({unit.chunk, own, size_, unit.experts});
    size_ += own.count;
  }
}

namespace {

// `chunk` as one unit, or with `expert_parallel` as its runs of experts' tensors and of
// the others, in buffer order.
std::vector<ZeroUnit> UnitsOf(const model::ParameterLayout& layout, comm::Chunk chunk,
                              bool expert_parallel) {
  if (!expert_parallel) return {{chunk, false}};
  std::vector<ZeroUnit> runs;
  for (const model::ParamSpec& spec : layout.specs()) {
    const int64_t begin = std::max(spec.offset, chunk.offset);
    const int64_t end = std::min(spec.offset + spec.numel, chunk.end());
    if (begin >= end) continue;
    if (!runs.empty() && runs.back().experts == spec.expert) {
      runs.back().chunk.count = end - runs.back().chunk.offset;
    } else {
      runs.push_back({{begin, end - begin}, spec.expert});
    }
  }
  return runs;
}

// ZeRO-2/3's units, listed by the model's unit they belong to: each model unit whole,
// except that a first pipeline stage cuts its embeddings into wte and wpe. wte is then a
// unit on the first and on the last stage alike, so the two copies' shards line up
// element for element and the embedding group can sum them shard by shard. With
// `expert_parallel` a layer's unit is its dense run and its experts' run.
std::vector<std::vector<ZeroUnit>> PartsOfModelUnits(const model::ParameterLayout& layout,
                                                     bool expert_parallel) {
  std::vector<std::vector<ZeroUnit>> parts;
  for (const model::ParamUnit& u : layout.units()) {
    parts.push_back(UnitsOf(layout, {u.begin, u.count()}, expert_parallel));
  }
  if (layout.first_stage() && !layout.last_stage()) {
    const int64_t wte = layout.specs()[0].numel;
    const model::ParamUnit& embeddings = layout.units()[model::ParameterLayout::kEmbeddings];
    parts[model::ParameterLayout::kEmbeddings] = {
        {{embeddings.begin, wte}}, {{embeddings.begin + wte, embeddings.count() - wte}}};
  }
  return parts;
}

}  // namespace

std::vector<ZeroUnit> ZeroUnits(const model::ParameterLayout& layout, int zero_stage,
                                bool expert_parallel) {
  if (zero_stage <= 1) return UnitsOf(layout, {0, layout.total()}, expert_parallel);
  std::vector<ZeroUnit> units;
  for (const std::vector<ZeroUnit>& parts : PartsOfModelUnits(layout, expert_parallel)) {
    units.insert(units.end(), parts.begin(), parts.end());
  }
  return units;
}

std::vector<comm::Chunk> ChunksOf(const std::vector<ZeroUnit>& units, bool experts) {
  std::vector<comm::Chunk> chunks;
  for (const ZeroUnit& unit : units) {
    if (unit.experts == experts) chunks.push_back(unit.chunk);
  }
  return chunks;
}

int ZeroCallsPerStep(int zero_stage, int micro_batches, comm::Primitive primitive, comm::Phase phase,
                     bool recompute) {
  using comm::Phase;
  if (zero_stage < 1) return 0;
  if (primitive == comm::Primitive::kReduceScatter && phase == Phase::kBackward) {
    return zero_stage == 1 ? 1 : micro_batches;  // ZeRO-1 once after backward; else per backward
  }
  if (primitive == comm::Primitive::kAllGather) {
    if (phase == Phase::kOptimizer && zero_stage <= 2) return 1;
    if (phase == Phase::kForward && zero_stage == 3) return micro_batches;
    // Backward gathers each unit once more for the recomputed forward.
    if (phase == Phase::kBackward && zero_stage == 3) return micro_batches * (recompute ? 2 : 1);
  }
  return 0;
}

int64_t ZeroBytesPerStep(std::span<const comm::Chunk> units, int zero_stage, int ranks, int rank,
                         int micro_batches, comm::Algorithm algorithm, comm::Primitive primitive,
                         comm::Phase phase, bool recompute, int64_t element,
                         std::span<const int> nodes) {
  const int calls = ZeroCallsPerStep(zero_stage, micro_batches, primitive, phase, recompute);
  int64_t sent = 0;
  for (const comm::Chunk& unit : units) {
    sent += comm::ExactTraffic(primitive, algorithm, ranks, rank, -1, unit.count, element, nodes)
                .sent;
  }
  return calls * sent;
}

std::vector<std::pair<size_t, size_t>> PiecesOfUnits(const model::ParameterLayout& layout,
                                                     int zero_stage, bool expert_parallel) {
  std::vector<std::pair<size_t, size_t>> pieces;
  const size_t all = ZeroUnits(layout, zero_stage, expert_parallel).size();
  size_t piece = 0;
  for (const std::vector<ZeroUnit>& parts : PartsOfModelUnits(layout, expert_parallel)) {
    const size_t first = zero_stage >= 2 ? piece : 0;
    piece += parts.size();
    pieces.push_back({first, zero_stage >= 2 ? piece : all});
  }
  return pieces;
}

ZeroWeights::ZeroWeights(comm::Communicator* dp, comm::Communicator* experts, int zero_stage,
                         const model::ParameterLayout& layout, MakeOptimizer make_optimizer,
                         comm::Algorithm algorithm, TensorParallel tp, comm::Communicator* stages,
                         Device device, const model::Precision& precision)
    : dp_(dp),
      experts_(experts),
      alloc_(dp->allocator().ledger(), device),
      tp_(tp),
      stages_(stages),
      zero_stage_(zero_stage),
      layout_(layout),
      sharding_(ZeroUnits(layout, zero_stage, experts != nullptr), {dp->size(), dp->rank()},
                experts != nullptr ? Sharding::Cut{experts->size(), experts->rank()}
                                   : Sharding::Cut{dp->size(), dp->rank()}),
      make_optimizer_(std::move(make_optimizer)),
      algorithm_(algorithm),
      precision_(precision),
      grads_sent_as_(precision.grad_comm),
      gathered_(layout.units().size()),
      open_grads_(layout.units().size()),
      pieces_of_unit_(PiecesOfUnits(layout, zero_stage, experts != nullptr)) {}

absl::StatusOr<std::unique_ptr<ZeroWeights>> ZeroWeights::Create(
    comm::Communicator* dp, int zero_stage, const model::ParameterLayout& layout, uint64_t seed,
    MakeOptimizer make_optimizer, comm::Algorithm algorithm, TensorParallel tp,
    comm::Communicator* stages, Device device, const model::Precision& precision,
    comm::Communicator* experts) {
  if (zero_stage < 1 || zero_stage > 3) {
    return absl::InvalidArgumentError(absl::StrCat("[zero] no ZeRO stage ", zero_stage, " (1, 2 or 3)"));
  }
  std::unique_ptr<ZeroWeights> z(
      new ZeroWeights(dp, experts, zero_stage, layout, std::move(make_optimizer), algorithm, tp,
                      stages, device, precision));
  ASSIGN_OR_RETURN(z->kernels_, Kernels::Create(device));
  Allocator& alloc = z->alloc_;
  const size_t units = layout.units().size();
  z->working_params_ = std::make_unique<model::WorkingCopies>(alloc, *z->kernels_, units);
  z->working_grads_ = std::make_unique<model::WorkingCopies>(alloc, *z->kernels_, units);
  const int64_t total = layout.total(), shard = z->sharding_.size();
  auto empty = [&](int64_t n, DType dtype, MemoryCategory category) {
    return Tensor::Empty({n}, dtype, alloc, category);
  };
  ASSIGN_OR_RETURN(z->params_, empty(zero_stage == 3 ? shard : total, precision.params,
                                     MemoryCategory::kParams));
  int64_t largest = 0;
  for (const Sharding::Piece& p : z->sharding_.pieces()) largest = std::max(largest, p.own.count);
  if (zero_stage == 1) {
    // The whole buffer, whose front then holds the reduced shard (Step): the seed's 2Φ of
    // gradients, to the byte. A piece's reduced chunk is staged in comm memory first.
    ASSIGN_OR_RETURN(z->grads_, empty(total, precision.grads, MemoryCategory::kGrads));
    z->grad_shard_ = z->grads_.Flat(0, shard);
    ASSIGN_OR_RETURN(z->reduced_, empty(largest, precision.grads, MemoryCategory::kComm));
  } else {
    ASSIGN_OR_RETURN(z->grad_shard_, empty(shard, precision.grads, MemoryCategory::kGrads));
    ASSIGN_OR_RETURN(z->reduced_, empty(largest, precision.grad_comm, MemoryCategory::kGrads));
  }
  if (precision.master_weights()) {
    ASSIGN_OR_RETURN(z->master_, empty(shard, DType::kF32, MemoryCategory::kOptimizer));
  }
  ASSIGN_OR_RETURN(z->optimizer_, z->make_optimizer_(shard, alloc));

  // Parameters and segments: ZeRO-3 holds and updates the packed shard; ZeRO-1/2 update
  // their chunks where they are, in the whole buffer. Initialised on the host, then
  // copied to the device (a meta device's take no values).
  const bool values = device.type != DeviceType::kMeta;
  std::vector<float> init(values ? size_t(zero_stage == 3 ? shard : total) : 0);
  const std::vector<model::TensorRange> buffer_ranges = model::TensorRanges(z->layout_);
  for (const Sharding::Piece& p : z->sharding_.pieces()) {
    const int64_t param_shift = zero_stage == 3 ? 0 : p.own.offset - p.packed;
    for (model::TensorRange r : model::RangesIn(buffer_ranges, p.own.offset, p.own.end())) {
      r.begin += p.packed;
      r.end += p.packed;
      z->ranges_.push_back(r);
      z->segments_.push_back(model::OptimizerSegments({r}, param_shift).front());
      z->master_segments_.push_back(model::OptimizerSegments({r}, 0).front());
    }
    if (zero_stage == 3 && values) {
      model::InitializeParameters(layout, seed, p.own.offset, p.own.end(), init.data() + p.packed);
    }
  }
  if (!values) return z;
  if (zero_stage < 3) {
    model::InitializeParameters(layout, seed, 0, total, init.data());
    RETURN_IF_ERROR(z->Load(init.data(), nullptr));
  } else if (z->master_.defined()) {  // ZeRO-3's init is the packed shard
    RETURN_IF_ERROR(z->master_.CopyFromHost(init.data()));
    RETURN_IF_ERROR(z->PublishShard());
  } else {
    RETURN_IF_ERROR(z->params_.CopyFromHost(init.data()));
  }
  return z;
}

float* ZeroWeights::UpdatedParams() {
  return (master_.defined() ? master_ : params_).data<float>();
}

absl::Status ZeroWeights::PublishShard() {
  if (!master_.defined()) return absl::OkStatus();
  for (size_t i = 0; i < sharding_.pieces().size(); ++i) {
    const Sharding::Piece& p = sharding_.pieces()[i];
    const int64_t at = zero_stage_ == 3 ? p.packed : p.own.offset;
    RETURN_IF_ERROR(kernels_->Convert(params_.Flat(at, at + p.own.count).raw_data(),
                                      params_.dtype(), Own(master_, i).raw_data(), DType::kF32,
                                      p.own.count));
  }
  return absl::OkStatus();
}

absl::Status ZeroWeights::GatherUnit(int unit, const Tensor& into,
                                     std::vector<std::unique_ptr<comm::CollectiveWork>>* works) {
  const model::ParamUnit& u = layout_.units()[unit];
  for (size_t i = pieces_of_unit_[unit].first; i < pieces_of_unit_[unit].second; ++i) {
    const comm::Chunk& part = sharding_.pieces()[i].unit;
    Tensor piece = into.Flat(part.offset - u.begin, part.end() - u.begin);
    if (works == nullptr) {
      RETURN_IF_ERROR(GroupOf(i).AllGather(Own(params_, i), piece, algorithm_));
    } else {
      ASSIGN_OR_RETURN(auto work, GroupOf(i).IAllGather(Own(params_, i), piece, algorithm_));
      works->push_back(std::move(work));
    }
  }
  return absl::OkStatus();
}

absl::Status ZeroWeights::PrefetchAfter(int unit) {
  const int direction = last_unit_ < 0 || unit >= last_unit_ ? 1 : -1;
  last_unit_ = unit;
  const int next = unit + direction;
  if (next < 0 || next >= int(gathered_.size()) || gathered_[size_t(next)].defined() ||
      prefetched_.unit >= 0) {
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(prefetched_.gathered,
                   Tensor::Empty({layout_.units()[size_t(next)].count()}, params_.dtype(), alloc_,
                                 MemoryCategory::kParams));
  prefetched_.unit = next;
  return GatherUnit(next, prefetched_.gathered, &prefetched_.works);
}

absl::StatusOr<Tensor> ZeroWeights::TakePrefetched() {
  absl::Status status;
  for (auto& work : prefetched_.works) status.Update(work->Wait());
  Tensor gathered = std::move(prefetched_.gathered);
  prefetched_ = Prefetched();
  RETURN_IF_ERROR(status);
  return gathered;
}

absl::StatusOr<float*> ZeroWeights::Params(int unit) {
  const model::ParamUnit& u = layout_.units()[unit];
  Tensor whole;
  if (zero_stage_ < 3) {
    whole = params_.Flat(u.begin, u.end);
  } else {
    Tensor& gathered = gathered_[unit];
    if (!gathered.defined() && prefetched_.unit == unit) {
      ASSIGN_OR_RETURN(gathered, TakePrefetched());
    } else if (!gathered.defined()) {
      ASSIGN_OR_RETURN(gathered, Tensor::Empty({u.count()}, params_.dtype(), alloc_,
                                               MemoryCategory::kParams));
      RETURN_IF_ERROR(GatherUnit(unit, gathered, nullptr));
    }
    whole = gathered;
    if (prefetch_) RETURN_IF_ERROR(PrefetchAfter(unit));
  }
  if (whole.dtype() == DType::kF32) return whole.data<float>();
  return working_params_->Widen(unit, whole);
}

absl::StatusOr<ConstTypedPtr> ZeroWeights::Stored(int unit) {
  const model::ParamUnit& u = layout_.units()[unit];
  const Tensor whole = zero_stage_ < 3 ? params_.Flat(u.begin, u.end) : gathered_[unit];
  if (!whole.defined()) {
    return absl::FailedPreconditionError(
        absl::StrCat("[zero] unit ", unit, "'s parameters are not gathered"));
  }
  return ConstTypedPtr(whole.raw_data(), whole.dtype());
}

absl::Status ZeroWeights::ReleaseParams(int unit) {
  gathered_[unit] = Tensor();
  working_params_->Release(unit);
  return absl::OkStatus();
}

absl::StatusOr<float*> ZeroWeights::OpenGrads(int unit) {
  const model::ParamUnit& u = layout_.units()[unit];
  if (precision_.grads != DType::kF32) return working_grads_->Zeroed(unit, u.count());
  if (zero_stage_ == 1) return grads_.data<float>() + u.begin;
  Tensor& grads = open_grads_[unit];
  if (!grads.defined()) {  // zero-filled
    ASSIGN_OR_RETURN(grads,
                     Tensor::Empty({u.count()}, DType::kF32, alloc_, MemoryCategory::kGrads));
  }
  return grads.data<float>();
}

absl::Status ZeroWeights::FinishReduce() {
  if (reducing_.unit < 0) return absl::OkStatus();
  const int unit = reducing_.unit;
  absl::Status status;
  for (SentAs::Pending& pending : reducing_.pending) status.Update(pending.Wait());
  RETURN_IF_ERROR(status);
  int64_t at = 0;
  for (size_t i = pieces_of_unit_[unit].first; i < pieces_of_unit_[unit].second; ++i) {
    const int64_t count = sharding_.pieces()[i].own.count;
    Tensor into = Own(grad_shard_, i);
    RETURN_IF_ERROR(kernels_->Accumulate(into.raw_data(), into.dtype(),
                                         in_flight_reduced_.Flat(at, at + count).raw_data(),
                                         in_flight_reduced_.dtype(), count));
    at += count;
  }
  reducing_ = Reducing();
  return absl::OkStatus();
}

absl::Status ZeroWeights::CloseGrads(int unit) {
  RETURN_IF_ERROR(FinishReduce());  // the unit closed before this one
  const model::ParamUnit& u = layout_.units()[unit];
  // The backward's fp32 gradients of the unit: the open buffer, or the working copy.
  Tensor grads = std::move(open_grads_[unit]);
  open_grads_[unit] = Tensor();
  if (precision_.grads != DType::kF32) grads = working_grads_->Take(unit);
  if (zero_stage_ == 1) {  // added into the whole buffer, reduced in Step
    if (!grads.defined()) return absl::OkStatus();  // fp32: added in place
    Tensor into = grads_.Flat(u.begin, u.end);
    return kernels_->Accumulate(into.raw_data(), into.dtype(), grads.raw_data(), DType::kF32,
                                u.count());
  }
  if (overlap_reduce_) {
    if (!in_flight_reduced_.defined()) {  // room for the reduced chunks of any one unit
      int64_t most = 0;
      for (const auto& [first, second] : pieces_of_unit_) {
        int64_t own = 0;
        for (size_t i = first; i < second; ++i) own += sharding_.pieces()[i].own.count;
        most = std::max(most, own);
      }
      ASSIGN_OR_RETURN(in_flight_reduced_, Tensor::Empty({most}, reduced_.dtype(), alloc_,
                                                         MemoryCategory::kGrads));
    }
    reducing_.unit = unit;
    reducing_.grads = grads;
    int64_t at = 0;
    for (size_t i = pieces_of_unit_[unit].first; i < pieces_of_unit_[unit].second; ++i) {
      const Sharding::Piece& piece = sharding_.pieces()[i];
      Tensor part = grads.Flat(piece.unit.offset - u.begin, piece.unit.end() - u.begin);
      ASSIGN_OR_RETURN(SentAs::Pending pending,
                       grads_sent_as_.IReduceScatter(
                           GroupOf(i), part, in_flight_reduced_.Flat(at, at + piece.own.count),
                           comm::ReduceOp::kSum, algorithm_));
      reducing_.pending.push_back(std::move(pending));
      at += piece.own.count;
    }
    return absl::OkStatus();
  }
  for (size_t i = pieces_of_unit_[unit].first; i < pieces_of_unit_[unit].second; ++i) {
    const Sharding::Piece& piece = sharding_.pieces()[i];
    Tensor part = grads.Flat(piece.unit.offset - u.begin, piece.unit.end() - u.begin);
    Tensor reduced = reduced_.Flat(0, piece.own.count);
    RETURN_IF_ERROR(
        grads_sent_as_.ReduceScatter(GroupOf(i), part, reduced, comm::ReduceOp::kSum, algorithm_));
    Tensor into = Own(grad_shard_, i);
    RETURN_IF_ERROR(kernels_->Accumulate(into.raw_data(), into.dtype(), reduced.raw_data(),
                                         reduced.dtype(), piece.own.count));
  }
  return absl::OkStatus();
}

absl::StatusOr<Tensor> ZeroWeights::TiedEmbeddingGrads() {
  RETURN_IF_ERROR(FinishReduce());
  if (zero_stage_ == 1) return grads_.Flat(0, layout_.specs()[0].numel);  // wte leads the buffer
  return Own(grad_shard_, pieces_of_unit_[model::ParameterLayout::kEmbeddings].first);
}

absl::Status ZeroWeights::ZeroGrad() { return (zero_stage_ == 1 ? grads_ : grad_shard_).SetZero(); }

absl::StatusOr<double> ZeroWeights::Step(float lr, float clip) {
  comm::TrafficLedger& ledger = dp_->ledger();
  RETURN_IF_ERROR(FinishReduce());
  // A prefetch nobody asked for would hold the shard from before the update.
  if (prefetched_.unit >= 0) RETURN_IF_ERROR(TakePrefetched().status());
  last_unit_ = -1;
  const std::vector<Sharding::Piece>& pieces = sharding_.pieces();
  if (zero_stage_ == 1) {
    // The gradient sum belongs to backward: DDP and ZeRO alike reduce there. Each piece's
    // reduced chunk moves to its packed place at the front of the buffer, which never
    // reaches a later piece's unit (the packed offsets grow no faster than the units').
    comm::PhaseScope phase(ledger, comm::Phase::kBackward);
    for (size_t i = 0; i < pieces.size(); ++i) {
      Tensor unit = grads_.Flat(pieces[i].unit.offset, pieces[i].unit.end());
      Tensor staged = reduced_.Flat(0, pieces[i].own.count);
      RETURN_IF_ERROR(grads_sent_as_.ReduceScatter(GroupOf(i), unit, staged, comm::ReduceOp::kSum,
                                                   algorithm_));
      RETURN_IF_ERROR(Own(grad_shard_, i).CopyFrom(staged));
    }
  }
  // Every piece's squares over the dp group: an experts' piece is cut over the edp group,
  // whose ranks together with their ep groups' are the dp group.
  ASSIGN_OR_RETURN(double norm,
                   ClipAndStep(*kernels_, *optimizer_, UpdatedParams(), grad_shard_, ranges_,
                               master_.defined() ? master_segments_ : segments_, lr, clip,
                               GradientGroups{dp_, &tp_, algorithm_, stages_}));
  RETURN_IF_ERROR(PublishShard());
  if (zero_stage_ == 3) return norm;
  comm::PhaseScope phase(ledger, comm::Phase::kOptimizer);
  // Every rank's updated chunks to every rank: each all-gather's input is the own chunk
  // inside its output, so it moves only the other ranks' chunks.
  for (size_t i = 0; i < pieces.size(); ++i) {
    const Sharding::Piece& p = pieces[i];
    Tensor unit = params_.Flat(p.unit.offset, p.unit.end());
    RETURN_IF_ERROR(GroupOf(i).AllGather(params_.Flat(p.own.offset, p.own.end()), unit, algorithm_));
  }
  return norm;
}

absl::Status ZeroWeights::GatherPiece(const Tensor& shard, size_t i, const Tensor& whole,
                                      int root) {
  const Sharding::Piece& p = sharding_.pieces()[i];
  comm::Communicator& group = GroupOf(i);
  const bool is_root = group.rank() == root;
  Tensor unit = is_root ? whole.Flat(p.unit.offset, p.unit.end()) : Tensor();
  if (!is_root || shard.device() == whole.device()) {
    return group.Gather(Own(shard, i), unit, p.unit.count, root, algorithm_);
  }
  // A GPU's shards gather on the GPU, then go to the host.
  Allocator on_device(nullptr, shard.device());
  ASSIGN_OR_RETURN(Tensor gathered, Tensor::Empty({p.unit.count}, shard.dtype(), on_device));
  RETURN_IF_ERROR(group.Gather(Own(shard, i), gathered, p.unit.count, root, algorithm_));
  return unit.CopyFrom(gathered);
}

absl::StatusOr<Tensor> ZeroWeights::GatherParams(int root) {
  Allocator unaccounted(nullptr);
  const bool is_root = GathersTo(root);
  Tensor whole;
  if (is_root) {
    ASSIGN_OR_RETURN(whole, Tensor::Empty({layout_.total()}, DType::kF32, unaccounted));
  }
  if (zero_stage_ < 3 && !master_.defined()) {
    if (is_root) RETURN_IF_ERROR(whole.CopyFrom(params_));
    return whole;
  }
  // The fp32 packed shards: ZeRO-3's parameters, or the master weights.
  const Tensor& shard = master_.defined() ? master_ : params_;
  for (size_t i = 0; i < sharding_.pieces().size(); ++i) {
    RETURN_IF_ERROR(GatherPiece(shard, i, whole, root));
  }
  return whole;
}

absl::StatusOr<std::unique_ptr<optim::Optimizer>> ZeroWeights::GatherOptimizer(int root) {
  Allocator unaccounted(nullptr);
  const bool is_root = GathersTo(root);
  std::unique_ptr<optim::Optimizer> whole;
  if (is_root) {
    ASSIGN_OR_RETURN(whole, make_optimizer_(layout_.total(), unaccounted));
    whole->set_step(optimizer_->step());
  }
  auto shards = optimizer_->State();
  for (size_t s = 0; s < shards.size(); ++s) {
    const Tensor into = is_root ? *whole->State()[s].second : Tensor();
    for (size_t i = 0; i < sharding_.pieces().size(); ++i) {
      RETURN_IF_ERROR(GatherPiece(*shards[s].second, i, into, root));
    }
  }
  return whole;
}

absl::Status ZeroWeights::Load(const float* params, optim::Optimizer* optimizer) {
  // Copies this rank's chunks of a whole buffer (host memory) into a packed shard.
  auto keep = [&](const float* whole, Tensor& shard) -> absl::Status {
    for (size_t i = 0; i < sharding_.pieces().size(); ++i) {
      RETURN_IF_ERROR(Own(shard, i).CopyFromHost(whole + sharding_.pieces()[i].own.offset));
    }
    return absl::OkStatus();
  };
  if (master_.defined()) {
    RETURN_IF_ERROR(keep(params, master_));
    if (zero_stage_ < 3) {  // every rank's chunks of the whole bf16 buffer, rounded alike
      std::vector<BFloat16> rounded(size_t(layout_.total()));
      for (size_t i = 0; i < rounded.size(); ++i) rounded[i] = BFloat16::FromFloat(params[i]);
      RETURN_IF_ERROR(params_.CopyFromHost(rounded.data()));
    }
    RETURN_IF_ERROR(PublishShard());
  } else if (zero_stage_ == 3) {
    RETURN_IF_ERROR(keep(params, params_));
  } else {
    RETURN_IF_ERROR(params_.CopyFromHost(params));
  }
  if (optimizer == nullptr) return absl::OkStatus();
  if (std::string(optimizer->name()) != optimizer_->name()) {
    return absl::InvalidArgumentError(absl::StrCat("[zero] cannot load ", optimizer->name(),
                                                   " state into ", optimizer_->name()));
  }
  auto whole = optimizer->State();
  auto mine = optimizer_->State();
  for (size_t s = 0; s < mine.size(); ++s) {
    RETURN_IF_ERROR(keep(whole[s].second->data<float>(), *mine[s].second));
  }
  optimizer_->set_step(optimizer->step());
  return absl::OkStatus();
}

}  // namespace tally::parallel
