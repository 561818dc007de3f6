#include "core/model/parameters.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "core/runtime/rng.h"
#include "core/runtime/status_macros.h"

namespace tally::model {

void ParameterLayout::Add(std::string name, Shape global_shape, float init_std, float init_value,
                          bool decay, int split_dim, int split_blocks) {
  ParamSpec spec;
  spec.name = std::move(name);
  spec.global_shape = global_shape;
  spec.shape = std::move(global_shape);
  if (tp_ > 1 && split_dim >= 0) {
    // Each of the blocks of this dimension is cut into tp parts (rounded up: padding).
    int64_t& dim = spec.shape[split_dim];
    dim = split_blocks * ((dim / split_blocks + tp_ - 1) / tp_);
    spec.split_dim = split_dim;
    spec.split_blocks = split_blocks;
  }
  spec.numel = NumElements(spec.shape);
  spec.offset = total_;
  spec.init_std = init_std;
  spec.init_value = init_value;
  spec.decay = decay;
  total_ += spec.numel;
  specs_.push_back(std::move(spec));
}

ParameterLayout ParameterLayout::ForGPT(const GPTConfig& config, int tp, int tp_rank,
                                        const ModelChunks& chunks, int ep, int ep_rank) {
  const int64_t c = config.n_embd;
  // GPT-2's initialisation: N(0, 0.02) weights, zero biases, unit LayerNorm gains; the
  // projections into the residual stream scaled by 1/sqrt(2·L) (two per layer).
  const float std = 0.02f;
  const float residual_std = std / std::sqrt(2.0f * config.n_layer);
  constexpr int kRows = 0, kColumns = 1, kWhole = -1;
  ParameterLayout layout;
  layout.tp_ = tp;
  layout.tp_rank_ = tp_rank;
  layout.n_layer_ = config.n_layer;
  layout.experts_ = config.n_experts / ep;
  const int first_expert = ep_rank * layout.experts_;
  layout.n_embd_ = config.n_embd;
  layout.model_chunks_ = chunks.empty() ? ModelChunks{{0, config.n_layer}} : chunks;
  layout.layer_units_.assign(size_t(config.n_layer), -1);
  if (layout.first_stage() || layout.last_stage()) {
    layout.Add("wte.weight", {config.vocab_size, c}, std, 0, true, kRows);
  }
  if (layout.first_stage()) layout.Add("wpe.weight", {config.seq_len, c}, std, 0, true, kWhole);
  layout.CloseUnit("embeddings");
  for (int i = 0; i < config.n_layer; ++i) {
    const bool held = std::any_of(layout.model_chunks_.begin(), layout.model_chunks_.end(),
                                  [i](const LayerRange& r) { return r.begin <= i && i < r.end; });
    if (!held) continue;
    layout.layer_units_[size_t(i)] = int(layout.units_.size());
    std::string h = absl::StrCat("h.", i, ".");
    layout.Add(h + "ln_1.weight", {c}, 0, 1, false, kWhole);
    layout.Add(h + "ln_1.bias", {c}, 0, 0, false, kWhole);
    layout.Add(h + "attn.c_attn.weight", {3 * c, c}, std, 0, true, kRows, 3);
    layout.Add(h + "attn.c_attn.bias", {3 * c}, 0, 0, false, kRows, 3);
    layout.Add(h + "attn.c_proj.weight", {c, c}, residual_std, 0, true, kColumns);
    layout.Add(h + "attn.c_proj.bias", {c}, 0, 0, false, kWhole);
    layout.Add(h + "ln_2.weight", {c}, 0, 1, false, kWhole);
    layout.Add(h + "ln_2.bias", {c}, 0, 0, false, kWhole);
    // The MLP: one, or E experts of its shape behind a router (moe.h).
    std::vector<std::string> mlps = {h + "mlp."};
    if (config.moe()) {
      layout.Add(h + "mlp.router.weight", {config.n_experts, c}, std, 0, true, kWhole);
      mlps.clear();
      for (int e = first_expert; e < first_expert + layout.experts_; ++e) {
        mlps.push_back(absl::StrCat(h, "mlp.experts.", e, "."));
      }
    }
    for (const std::string& mlp : mlps) {
      layout.Add(mlp + "c_fc.weight", {4 * c, c}, std, 0, true, kRows);
      layout.Add(mlp + "c_fc.bias", {4 * c}, 0, 0, false, kRows);
      layout.Add(mlp + "c_proj.weight", {c, 4 * c}, residual_std, 0, true, kColumns);
      layout.Add(mlp + "c_proj.bias", {c}, 0, 0, false, kWhole);
    }
    layout.CloseUnit(absl::StrCat("h.", i));
  }
  if (layout.last_stage()) {
    layout.Add("ln_f.weight", {c}, 0, 1, false, kWhole);
    layout.Add("ln_f.bias", {c}, 0, 0, false, kWhole);
  }
  layout.CloseUnit("ln_f");
  // Where each tensor sits in the whole model's buffer.
  const bool whole = tp == 1 && ep == 1 && layout.model_chunks_.size() == 1 && layout.first_stage() &&
                     layout.last_stage();
  const ParameterLayout reference = whole ? ParameterLayout() : ForGPT(config);
  for (ParamSpec& spec : layout.specs_) {
    spec.per_token = spec.name == "wpe.weight" || spec.name.find("ln_") != std::string::npos;
    spec.tied_copy = spec.name == "wte.weight" && !layout.first_stage();
    spec.expert = spec.name.find(".mlp.experts.") != std::string::npos;
    layout.global_offsets_.push_back(whole ? spec.offset : reference.Find(spec.name)->offset);
  }
  return layout;
}

const ParamSpec* ParameterLayout::Find(const std::string& name) const {
  for (const ParamSpec& spec : specs_) {
    if (spec.name == name) return &spec;
  }
  return nullptr;
}

int64_t ParameterLayout::per_token_count() const {
  int64_t count = 0;
  for (const ParamSpec& spec : specs_) count += spec.per_token ? spec.numel : 0;
  return count;
}

void ParameterLayout::CloseUnit(std::string name) {
  int64_t begin = units_.empty() ? 0 : units_.back().end;
  units_.push_back({std::move(name), begin, total_});
}

void InitializeParameters(const ParameterLayout& layout, uint64_t seed, int64_t begin,
                          int64_t end, float* out) {
  const std::vector<ParamSpec>& specs = layout.specs();
  for (size_t k = 0; k < specs.size(); ++k) {
    const ParamSpec& spec = specs[k];
    if (spec.offset >= end || spec.offset + spec.numel <= begin) continue;
    // Element g of the whole tensor gets Normal(seed, stream, g), wherever it lives.
    const uint64_t stream = StreamOf(spec.name);
    layout.ForEachRun(spec, 0, [&](int64_t local, int64_t global, int64_t count) {
      int64_t lo = std::max(begin, local), hi = std::min(end, local + count);
      if (lo >= hi) return;
      float* p = out + (lo - begin);
      if (spec.init_std > 0) {
        FillNormal(p, hi - lo, seed, stream, uint64_t(global + (lo - local)), 0.0f, spec.init_std);
      } else {
        std::fill(p, p + (hi - lo), spec.init_value);
      }
    });
  }
}

void ParameterLayout::ToGlobal(const float* local, float* global) const {
  for (size_t k = 0; k < specs_.size(); ++k) {
    ForEachRun(specs_[k], global_offsets_[k], [&](int64_t l, int64_t g, int64_t count) {
      std::copy(local + l, local + l + count, global + g);
    });
  }
}

void ParameterLayout::FromGlobal(const float* global, float* local) const {
  for (size_t k = 0; k < specs_.size(); ++k) {
    ForEachRun(specs_[k], global_offsets_[k], [&](int64_t l, int64_t g, int64_t count) {
      std::copy(global + g, global + g + count, local + l);
    });
  }
}

std::vector<TensorRange> TensorRanges(const ParameterLayout& layout) {
  std::vector<TensorRange> ranges;
  for (const ParamSpec& spec : layout.specs()) ranges.push_back({spec.offset, spec.offset + spec.numel, &spec});
  return ranges;
}

std::vector<TensorRange> RangesIn(const std::vector<TensorRange>& ranges, int64_t begin, int64_t end) {
  std::vector<TensorRange> out;
  for (const TensorRange& r : ranges) {
    const int64_t lo = std::max(r.begin, begin), hi = std::min(r.end, end);
    if (lo < hi) out.push_back({lo - begin, hi - begin, r.spec});
  }
  return out;
}

std::vector<optim::Segment> OptimizerSegments(const std::vector<TensorRange>& ranges,
                                              int64_t param_shift) {
  std::vector<optim::Segment> segments;
  for (const TensorRange& r : ranges) segments.push_back({r.begin, r.end, r.spec->decay, param_shift});
  return segments;
}

namespace {

// The tensors of a unit in layout order, as pointers into `unit`.
class UnitCursor {
 public:
  UnitCursor(const ParameterLayout& layout, const ParamUnit& unit, float* data)
      : specs_(layout.specs()), unit_(unit), data_(data) {
    while (next_ < specs_.size() && specs_[next_].offset < unit.begin) ++next_;
  }
  float* Next() {
    const ParamSpec& spec = specs_[next_++];
    CHECK(spec.offset + spec.numel <= unit_.end) << "past unit " << unit_.name;
    return data_ + (spec.offset - unit_.begin);
  }

 private:
  const std::vector<ParamSpec>& specs_;
  const ParamUnit& unit_;
  float* data_;
  size_t next_ = 0;
};

}  // namespace

EmbeddingTensors BindEmbeddings(const ParameterLayout& layout, float* unit) {
  UnitCursor next(layout, layout.units()[ParameterLayout::kEmbeddings], unit);
  EmbeddingTensors t;
  t.wte = next.Next();
  t.wpe = layout.first_stage() ? next.Next() : nullptr;
  return t;
}

BlockTensors BindBlock(const ParameterLayout& layout, int layer, float* unit) {
  UnitCursor next(layout, layout.units()[layout.layer_unit(layer)], unit);
  BlockTensors b;
  b.ln1_w = next.Next();
  b.ln1_b = next.Next();
  b.qkv_w = next.Next();
  b.qkv_b = next.Next();
  b.proj_w = next.Next();
  b.proj_b = next.Next();
  b.ln2_w = next.Next();
  b.ln2_b = next.Next();
  if (layout.experts() > 0) {
    b.router_w = next.Next();
    b.experts = layout.experts();
  }
  b.fc_w = next.Next();
  b.fc_b = next.Next();
  b.fcproj_w = next.Next();
  b.fcproj_b = next.Next();
  // An expert's four tensors (this rank's part of them under tensor parallelism).
  if (b.experts > 0) b.expert_stride = (b.fcproj_b - b.fc_w) + layout.n_embd();
  return b;
}

NormTensors BindFinalNorm(const ParameterLayout& layout, float* unit) {
  UnitCursor next(layout, layout.units()[layout.final_norm_unit()], unit);
  NormTensors t;
  t.w = next.Next();
  t.b = next.Next();
  return t;
}

}  // namespace tally::model
