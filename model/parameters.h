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
#include "optim/optimizer.h"
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

// Tensors that forward and backward take as a whole, contiguous in the buffer: the
// embeddings (wte, wpe), each layer h.i, and the final LayerNorm. ZeRO-3 gathers one unit
// at a time; ZeRO-2 reduces the gradients of one unit at a time.
struct ParamUnit {
  std::string name;          // "embeddings", "h.3", "ln_f"
  int64_t begin = 0, end = 0;  // elements of the flat buffer
  int64_t count() const { return end - begin; }
};

class ParameterLayout {
 public:
  static ParameterLayout ForGPT(const GPTConfig& config);

  const std::vector<ParamSpec>& specs() const { return specs_; }
  int64_t total() const { return total_; }
  const ParamSpec* Find(const std::string& name) const;

  // The units in buffer order: embeddings, h.0 ... h.{L-1}, ln_f.
  const std::vector<ParamUnit>& units() const { return units_; }
  static constexpr int kEmbeddings = 0;
  static int LayerUnit(int layer) { return 1 + layer; }
  int final_norm_unit() const { return int(units_.size()) - 1; }

 private:
  void Add(std::string name, Shape shape, float init_std, float init_value, bool decay);
  void CloseUnit(std::string name);  // the tensors added since the last unit form one

  std::vector<ParamSpec> specs_;
  std::vector<ParamUnit> units_;
  int64_t total_ = 0;
};

// Writes the initial values of buffer elements [begin, end) to out[0, end - begin):
// N(0, std) from the counter RNG keyed by (seed, tensor name, element index), so that a
// shard initialised on its own agrees with the serial model.
void InitializeParameters(const ParameterLayout& layout, uint64_t seed, int64_t begin,
                          int64_t end, float* out);

// The optimizer's segments over the whole buffer: one per tensor, decaying as its spec says.
std::vector<optim::Segment> OptimizerSegments(const ParameterLayout& layout);

// Pointers to the tensors of one unit, given where the unit's data starts (parameters or
// gradients, in the flat buffer or in a gathered copy of the unit).
struct EmbeddingTensors {
  float *wte, *wpe;
};
struct BlockTensors {
  float *ln1_w, *ln1_b, *qkv_w, *qkv_b, *proj_w, *proj_b;
  float *ln2_w, *ln2_b, *fc_w, *fc_b, *fcproj_w, *fcproj_b;
};
struct NormTensors {
  float *w, *b;
};

EmbeddingTensors BindEmbeddings(const ParameterLayout& layout, float* unit);
BlockTensors BindBlock(const ParameterLayout& layout, int layer, float* unit);
NormTensors BindFinalNorm(const ParameterLayout& layout, float* unit);

}  // namespace tally::model
