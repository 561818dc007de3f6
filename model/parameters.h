// The model's parameters: one flat buffer, and a named view for every tensor in it.
//
// Names and order follow GPT-2 (wte, wpe, then h.0 ... h.{L-1}, then ln_f), and each
// layer's tensors are contiguous, so a layer, a pipeline stage, a data-parallel bucket or
// a ZeRO shard is a slice of the buffer. Linear weights are stored (out, in), as
// torch.nn.Linear stores them (GPT-2's original Conv1D checkpoints hold the transpose).
//
//   wte.weight (V, C)            wpe.weight (T, C)
//   h.{i}.ln_1.weight (C)        h.{i}.ln_1.bias (C)
//   h.{i}.attn.c_attn.weight (3C, C)   h.{i}.attn.c_attn.bias (3C)
//   h.{i}.attn.c_proj.weight (C, C)    h.{i}.attn.c_proj.bias (C)
//   h.{i}.ln_2.weight (C)        h.{i}.ln_2.bias (C)
//   h.{i}.mlp.c_fc.weight (4C, C)      h.{i}.mlp.c_fc.bias (4C)
//   h.{i}.mlp.c_proj.weight (C, 4C)    h.{i}.mlp.c_proj.bias (C)
//   ln_f.weight (C)              ln_f.bias (C)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"
#include "runtime/tensor.h"

namespace tally::model {

struct ParamSpec {
  std::string name;
  Shape shape;
  int64_t offset = 0;  // elements into the flat buffer
  int64_t numel = 0;
  // Initial value: N(0, init_std) when init_std > 0, else the constant init_value.
  float init_std = 0;
  float init_value = 0;
  // AdamW decays 2-D weights only (not biases, not LayerNorm gains), as nanoGPT does.
  bool decay = false;
};

class ParameterLayout {
 public:
  static ParameterLayout ForGPT(const GPTConfig& config);

  const std::vector<ParamSpec>& specs() const { return specs_; }
  int64_t total() const { return total_; }
  const ParamSpec* Find(const std::string& name) const;
  // Elements [begin, end) of the tensors of layer i (h.{i}.*).
  std::pair<int64_t, int64_t> LayerRange(int layer) const;

 private:
  void Add(std::string name, Shape shape, float init_std, float init_value, bool decay);

  std::vector<ParamSpec> specs_;
  int64_t total_ = 0;
};

// Fills `params` (the flat buffer, total() floats) with the initial values: N(0, std) from
// the counter RNG keyed by (seed, tensor name, element index), so that any shard can be
// initialised on its own and agree with the serial model.
void InitializeParameters(const ParameterLayout& layout, uint64_t seed, float* params);

// Pointers to one layer's tensors inside a flat buffer (parameters or gradients).
struct BlockTensors {
  float *ln1_w, *ln1_b, *qkv_w, *qkv_b, *proj_w, *proj_b;
  float *ln2_w, *ln2_b, *fc_w, *fc_b, *fcproj_w, *fcproj_b;
};

struct GPTTensors {
  float *wte, *wpe;
  std::vector<BlockTensors> blocks;
  float *lnf_w, *lnf_b;
};

// The named tensors of `base`, laid out by `layout` for `config`.
GPTTensors BindTensors(const ParameterLayout& layout, const GPTConfig& config, float* base);

}  // namespace tally::model
