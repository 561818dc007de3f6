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
//
// With E experts (GPTConfig::n_experts > 0) each layer's mlp.* is instead
//   h.{i}.mlp.router.weight (E, C), then for e = 0 ... E-1
//   h.{i}.mlp.experts.{e}.c_fc.weight (4C, C) ... h.{i}.mlp.experts.{e}.c_proj.bias (C)
//
// Under tensor parallelism over tp ranks (Megatron-LM's split) each rank's buffer holds
// its part of every tensor, in the same order: c_attn and c_fc split by output rows
// (column-parallel; c_attn as three blocks Q, K, V, so each rank has whole heads of
// each), the two c_proj split by input columns (row-parallel), wte split by vocabulary
// rows (padded to a multiple of tp with zero rows no token uses), and the LayerNorms,
// wpe and the c_proj biases replicated on every rank.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "core/model/config.h"
#include "core/optim/optimizer.h"
#include "core/runtime/tensor.h"

namespace tally::model {

// Layers [begin, end).
struct LayerRange {
  int begin = 0, end = 0;
};
// The layers of a pipeline rank: one range (gpipe, 1f1b), or the interleaved schedule's
// v chunks, in increasing order and apart. Empty: every layer.
using ModelChunks = std::vector<LayerRange>;

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

  // Tensor parallelism: the whole tensor's shape, and how this rank's part is cut from it:
  // along dimension split_dim (-1: replicated, the whole tensor on every rank) into tp
  // parts, each of split_blocks equal blocks separately (c_attn's Q, K, V).
  Shape global_shape;
  int split_dim = -1;
  int split_blocks = 1;
  bool replicated() const { return split_dim < 0; }
  // Applied token by token on the residual stream (the LayerNorms, the position table):
  // under sequence parallelism each rank's gradient covers its own tokens only.
  bool per_token = false;
  // The last pipeline stage's copy of the tied embedding (wte for the LM head): the first
  // stage's copy is the parameter, this one never counts in the gradient norm.
  bool tied_copy = false;
  // An expert's tensor (mlp.experts.*): summed over the expert-data-parallel group, its
  // squares over the expert-parallel group for the gradient norm.
  bool expert = false;
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
  // Tensor-parallel rank `tp_rank` of `tp` (the whole model: tp = 1). n_embd and n_head
  // must be divisible by tp (TrainOptions::Validate says so). A pipeline stage holds the
  // layers of its `chunks` (empty: all); the one with layer 0 the embeddings, the one
  // with the last layer ln_f and, for the tied LM head, its own copy of wte.
  // With experts split over `ep` ranks (expert parallelism) this one holds experts
  // [ep_rank·E/ep, (ep_rank+1)·E/ep) of every layer, named by their index in the model.
  static ParameterLayout ForGPT(const GPTConfig& config, int tp = 1, int tp_rank = 0,
                                const ModelChunks& chunks = {}, int ep = 1, int ep_rank = 0);

  const std::vector<ParamSpec>& specs() const { return specs_; }
  int64_t total() const { return total_; }
  const ParamSpec* Find(const std::string& name) const;

  // The units in buffer order: embeddings, h.0 ... h.{L-1}, ln_f. A pipeline stage has
  // the same frame with its own layers; its first unit is empty in the middle stages and
  // wte alone on a last stage, and its last unit empty but on the last stage.
  const std::vector<ParamUnit>& units() const { return units_; }
  static constexpr int kEmbeddings = 0;
  // The unit of a layer this layout holds.
  int layer_unit(int layer) const { return layer_units_[size_t(layer)]; }
  int final_norm_unit() const { return int(units_.size()) - 1; }
  // The layers held, in chunks (one but under the interleaved schedule).
  const ModelChunks& model_chunks() const { return model_chunks_; }
  // Whether the layout holds layer 0 (and the embeddings), and the last layer (and ln_f).
  bool first_stage() const { return model_chunks_.front().begin == 0; }
  bool last_stage() const { return model_chunks_.back().end == n_layer_; }

  // Elements of the per-token tensors (ParamSpec::per_token).
  int64_t per_token_count() const;

  int tp() const { return tp_; }
  // Experts of each layer's MLP this layout holds (0: dense), and C.
  int experts() const { return experts_; }
  int64_t n_embd() const { return n_embd_; }
  // Calls run(local, global, count) for each run of `count` elements at `local` in this
  // rank's buffer and `global` in the whole model's (ForGPT(config)) buffer that hold the
  // same values; vocabulary padding belongs to no run.
  template <typename Run>
  void ForEachRun(const ParamSpec& spec, int64_t global_offset, Run run) const;
  // Copies this rank's part between a whole-model buffer and its own buffer.
  void ToGlobal(const float* local, float* global) const;
  void FromGlobal(const float* global, float* local) const;

 private:
  void Add(std::string name, Shape global_shape, float init_std, float init_value, bool decay,
           int split_dim, int split_blocks = 1);
  void CloseUnit(std::string name);  // the tensors added since the last unit form one

  std::vector<ParamSpec> specs_;
  std::vector<ParamUnit> units_;
  std::vector<int64_t> global_offsets_;  // of each spec in the whole model's buffer
  int64_t total_ = 0;
  int tp_ = 1, tp_rank_ = 0;
  int n_layer_ = 0;
  int experts_ = 0;
  int64_t n_embd_ = 0;
  ModelChunks model_chunks_;
  std::vector<int> layer_units_;  // per layer of the model; -1 where not held
};

template <typename Run>
void ParameterLayout::ForEachRun(const ParamSpec& spec, int64_t global_offset, Run run) const {
  if (spec.replicated()) {
    run(spec.offset, global_offset, spec.numel);
    return;
  }
  const int64_t rows = spec.shape[0], cols = spec.numel / rows;
  const int64_t global_rows = spec.global_shape[0];
  if (spec.split_dim == 1) {  // columns [tp_rank·cols, ...) of every row
    const int64_t global_cols = spec.global_shape[1];
    for (int64_t i = 0; i < rows; ++i) {
      run(spec.offset + i * cols, global_offset + i * global_cols + tp_rank_ * cols, cols);
    }
    return;
  }
  // Rows: block k of the local rows is part tp_rank of block k of the global rows.
  const int64_t local_block = rows / spec.split_blocks;
  const int64_t global_block = (global_rows + spec.split_blocks - 1) / spec.split_blocks;
  for (int64_t k = 0; k < spec.split_blocks; ++k) {
    int64_t first = k * global_block + tp_rank_ * local_block;
    int64_t count = std::min(local_block, (k + 1) * global_block - first);  // padding cut
    count = std::min(count, global_rows - first);
    if (count > 0) run(spec.offset + k * local_block * cols, global_offset + first * cols, count * cols);
  }
}

// Writes the initial values of buffer elements [begin, end) to out[0, end - begin):
// N(0, std) from the counter RNG keyed by (seed, tensor name, element index), so that a
// shard initialised on its own agrees with the serial model.
void InitializeParameters(const ParameterLayout& layout, uint64_t seed, int64_t begin,
                          int64_t end, float* out);

// A range [begin, end) of a flat buffer inside one tensor, with that tensor's spec: what
// the optimizer and the gradient norm work on. `spec` points into the layout the range
// came from, which must outlive it.
struct TensorRange {
  int64_t begin = 0, end = 0;
  const ParamSpec* spec = nullptr;
};

// One range per tensor of `layout`, over its whole buffer.
std::vector<TensorRange> TensorRanges(const ParameterLayout& layout);

// The parts of `ranges` inside [begin, end), shifted to start at 0 (a shard of a buffer).
std::vector<TensorRange> RangesIn(const std::vector<TensorRange>& ranges, int64_t begin, int64_t end);

// The optimizer's segments of `ranges`: decaying as each tensor's spec says, parameter i
// at i + param_shift.
std::vector<optim::Segment> OptimizerSegments(const std::vector<TensorRange>& ranges,
                                              int64_t param_shift = 0);

// Where a unit's weights enter the matmuls: the fp32 values the model computes with
// (`values`, as Params handed them out), or the same elements of the store's own copy of
// the unit (`stored`, bf16 under mixed precision: WeightStore::Stored) when that is set.
struct UnitOperands {
  const float* values = nullptr;
  ConstTypedPtr stored;
  // The tensor at `p` (inside values) as a matmul operand.
  ConstTypedPtr operator()(const float* p) const {
    return stored.data == nullptr ? ConstTypedPtr(p) : stored + (p - values);
  }
};

// Pointers to the tensors of one unit, given where the unit's data starts (parameters or
// gradients, in the flat buffer or in a gathered copy of the unit), and, for parameters,
// where their matrices enter the matmuls (unset: the pointers themselves).
struct EmbeddingTensors {
  float *wte, *wpe;  // wpe: null on a last pipeline stage, which holds wte for the head
  UnitOperands operands;
};
// With experts, fc_w ... fcproj_b are expert 0's; expert e's are expert_stride floats on.
struct BlockTensors {
  float *ln1_w, *ln1_b, *qkv_w, *qkv_b, *proj_w, *proj_b;
  float *ln2_w, *ln2_b, *fc_w, *fc_b, *fcproj_w, *fcproj_b;
  float* router_w = nullptr;  // (E, C)
  int experts = 0;
  int64_t expert_stride = 0;
  UnitOperands operands;
};
struct NormTensors {
  float *w, *b;
};

EmbeddingTensors BindEmbeddings(const ParameterLayout& layout, float* unit);
BlockTensors BindBlock(const ParameterLayout& layout, int layer, float* unit);
NormTensors BindFinalNorm(const ParameterLayout& layout, float* unit);

}  // namespace tally::model
