#include "model/parameters.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "runtime/rng.h"
#include "runtime/status_macros.h"

namespace tally::model {

void ParameterLayout::Add(std::string name, Shape shape, float init_std, float init_value,
                          bool decay) {
  ParamSpec spec;
  spec.name = std::move(name);
  spec.numel = NumElements(shape);
  spec.shape = std::move(shape);
  spec.offset = total_;
  spec.init_std = init_std;
  spec.init_value = init_value;
  spec.decay = decay;
  total_ += spec.numel;
  specs_.push_back(std::move(spec));
}

ParameterLayout ParameterLayout::ForGPT(const GPTConfig& config) {
  const int64_t c = config.n_embd;
  // GPT-2's initialisation: N(0, 0.02) weights, zero biases, unit LayerNorm gains; the
  // projections into the residual stream scaled by 1/sqrt(2·L) (two per layer).
  const float std = 0.02f;
  const float residual_std = std / std::sqrt(2.0f * config.n_layer);
  ParameterLayout layout;
  layout.Add("wte.weight", {config.vocab_size, c}, std, 0, true);
  layout.Add("wpe.weight", {config.seq_len, c}, std, 0, true);
  layout.CloseUnit("embeddings");
  for (int i = 0; i < config.n_layer; ++i) {
    std::string h = absl::StrCat("h.", i, ".");
    layout.Add(h + "ln_1.weight", {c}, 0, 1, false);
    layout.Add(h + "ln_1.bias", {c}, 0, 0, false);
    layout.Add(h + "attn.c_attn.weight", {3 * c, c}, std, 0, true);
    layout.Add(h + "attn.c_attn.bias", {3 * c}, 0, 0, false);
    layout.Add(h + "attn.c_proj.weight", {c, c}, residual_std, 0, true);
    layout.Add(h + "attn.c_proj.bias", {c}, 0, 0, false);
    layout.Add(h + "ln_2.weight", {c}, 0, 1, false);
    layout.Add(h + "ln_2.bias", {c}, 0, 0, false);
    layout.Add(h + "mlp.c_fc.weight", {4 * c, c}, std, 0, true);
    layout.Add(h + "mlp.c_fc.bias", {4 * c}, 0, 0, false);
    layout.Add(h + "mlp.c_proj.weight", {c, 4 * c}, residual_std, 0, true);
    layout.Add(h + "mlp.c_proj.bias", {c}, 0, 0, false);
    layout.CloseUnit(absl::StrCat("h.", i));
  }
  layout.Add("ln_f.weight", {c}, 0, 1, false);
  layout.Add("ln_f.bias", {c}, 0, 0, false);
  layout.CloseUnit("ln_f");
  return layout;
}

const ParamSpec* ParameterLayout::Find(const std::string& name) const {
  for (const ParamSpec& spec : specs_) {
    if (spec.name == name) return &spec;
  }
  return nullptr;
}

void ParameterLayout::CloseUnit(std::string name) {
  int64_t begin = units_.empty() ? 0 : units_.back().end;
  units_.push_back({std::move(name), begin, total_});
}

void InitializeParameters(const ParameterLayout& layout, uint64_t seed, int64_t begin,
                          int64_t end, float* out) {
  for (const ParamSpec& spec : layout.specs()) {
    int64_t lo = std::max(begin, spec.offset), hi = std::min(end, spec.offset + spec.numel);
    if (lo >= hi) continue;
    float* p = out + (lo - begin);
    if (spec.init_std > 0) {
      FillNormal(p, hi - lo, seed, StreamOf(spec.name), uint64_t(lo - spec.offset), 0.0f,
                 spec.init_std);
    } else {
      std::fill(p, p + (hi - lo), spec.init_value);
    }
  }
}

std::vector<optim::Segment> OptimizerSegments(const ParameterLayout& layout) {
  std::vector<optim::Segment> segments;
  for (const ParamSpec& spec : layout.specs()) {
    segments.push_back({spec.offset, spec.offset + spec.numel, spec.decay});
  }
  return segments;
}

namespace {

// The tensors of a unit in layout order, as pointers into `unit`.
class UnitCursor {
 public:
  UnitCursor(const ParameterLayout& layout, const ParamUnit& unit, float* data)
      : specs_(layout.specs()), unit_(unit), data_(data) {
    while (specs_[next_].offset < unit.begin) ++next_;
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
  t.wpe = next.Next();
  return t;
}

BlockTensors BindBlock(const ParameterLayout& layout, int layer, float* unit) {
  UnitCursor next(layout, layout.units()[ParameterLayout::LayerUnit(layer)], unit);
  BlockTensors b;
  b.ln1_w = next.Next();
  b.ln1_b = next.Next();
  b.qkv_w = next.Next();
  b.qkv_b = next.Next();
  b.proj_w = next.Next();
  b.proj_b = next.Next();
  b.ln2_w = next.Next();
  b.ln2_b = next.Next();
  b.fc_w = next.Next();
  b.fc_b = next.Next();
  b.fcproj_w = next.Next();
  b.fcproj_b = next.Next();
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
