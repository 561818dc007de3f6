#include "model/parameters.h"

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
  }
  layout.Add("ln_f.weight", {c}, 0, 1, false);
  layout.Add("ln_f.bias", {c}, 0, 0, false);
  return layout;
}

const ParamSpec* ParameterLayout::Find(const std::string& name) const {
  for (const ParamSpec& spec : specs_) {
    if (spec.name == name) return &spec;
  }
  return nullptr;
}

std::pair<int64_t, int64_t> ParameterLayout::LayerRange(int layer) const {
  const ParamSpec* first = Find(absl::StrCat("h.", layer, ".ln_1.weight"));
  const ParamSpec* last = Find(absl::StrCat("h.", layer, ".mlp.c_proj.bias"));
  CHECK(first != nullptr && last != nullptr) << "no layer " << layer;
  return {first->offset, last->offset + last->numel};
}

void InitializeParameters(const ParameterLayout& layout, uint64_t seed, float* params) {
  for (const ParamSpec& spec : layout.specs()) {
    float* p = params + spec.offset;
    if (spec.init_std > 0) {
      FillNormal(p, spec.numel, seed, StreamOf(spec.name), 0, 0.0f, spec.init_std);
    } else {
      for (int64_t i = 0; i < spec.numel; ++i) p[i] = spec.init_value;
    }
  }
}

GPTTensors BindTensors(const ParameterLayout& layout, const GPTConfig& config, float* base) {
  const std::vector<ParamSpec>& s = layout.specs();
  size_t k = 0;
  auto next = [&]() { return base + s[k++].offset; };
  GPTTensors t;
  t.wte = next();
  t.wpe = next();
  for (int i = 0; i < config.n_layer; ++i) {
    BlockTensors b;
    b.ln1_w = next();
    b.ln1_b = next();
    b.qkv_w = next();
    b.qkv_b = next();
    b.proj_w = next();
    b.proj_b = next();
    b.ln2_w = next();
    b.ln2_b = next();
    b.fc_w = next();
    b.fc_b = next();
    b.fcproj_w = next();
    b.fcproj_b = next();
    t.blocks.push_back(b);
  }
  t.lnf_w = next();
  t.lnf_b = next();
  return t;
}

}  // namespace tally::model
