// The names the ledger books under that more than one file writes or reads: each
// group's name (the communicator's, from world.Split), and the scopes of the calls whose
// bytes a formula expects by name. The code that books a call and the code that expects
// it use these, so that the two cannot drift apart.
//
//   ASSIGN_OR_RETURN(groups.dp, world.Split(color, rank, comm::group::kDp));
//   comm::LabelScope label(ledger, comm::scope::kLoss);
//   if (key.group == comm::group::kDp && key.label == comm::scope::kLoss) ...
#pragma once

#include <string>

namespace tally::comm {

namespace group {
inline constexpr char kWorld[] = "world";          // every rank
inline constexpr char kDp[] = "dp";                // data parallel: the same model part
inline constexpr char kTp[] = "tp";                // tensor parallel: each layer split
inline constexpr char kPp[] = "pp";                // the pipeline's stages
inline constexpr char kEmbedding[] = "embedding";  // the first and last stage's tied copies
inline constexpr char kEp[] = "ep";                // the experts' all-to-all
inline constexpr char kEdp[] = "edp";              // the replicas of the same experts
inline constexpr char kCp[] = "cp";                // context parallel: the sequence split
// HSDP (--zero_shard=node): the dp group's ranks on one node, which shard ZeRO's state,
// and the ranks at the same place on every node, whose shards are replicas (torchtitan's
// dp_shard and dp_replicate mesh dimensions).
inline constexpr char kDpShard[] = "dp_shard";
inline constexpr char kDpReplicate[] = "dp_repl";
}  // namespace group

namespace scope {
inline constexpr char kLoss[] = "loss";                     // the step's loss, summed
inline constexpr char kGradNorm[] = "grad_norm";            // the squares of the norm, summed
inline constexpr char kTiedEmbedding[] = "tied_embedding";  // wte's gradient, first and last stage
inline constexpr char kSequenceParallel[] = "sequence_parallel";  // LayerNorms' gradients under sp
inline constexpr char kEmbedding[] = "embedding";                 // the token embedding's calls
inline constexpr char kLmHead[] = "lm_head";                      // the LM head's calls
inline constexpr char kCrossEntropy[] = "cross_entropy";          // vocab-parallel cross-entropy
// PowerSGD's three all-reduces (core/parallel/powersgd.h): the tensors sent whole, P and Q.
inline constexpr char kPowerSgdWhole[] = "powersgd_whole";
inline constexpr char kPowerSgdP[] = "powersgd_p";
inline constexpr char kPowerSgdQ[] = "powersgd_q";
// 1-bit Adam's compressed average of the momentum (core/parallel/onebit_adam.h): the sign bits'
// all-to-all and all-gather, and the scales' all-gathers.
inline constexpr char kOneBitSigns[] = "onebit_signs";
inline constexpr char kOneBitScales[] = "onebit_scales";
// How far compression moved what it sent this step (core/train/trainer.h), summed over the world.
inline constexpr char kCompressionError[] = "compression_error";

// A layer's calls are scoped "layer{l}.{part}" (Layer(3, kAttn) is "layer3.attn"), the
// part one of these.
inline constexpr char kAttn[] = "attn";          // attention's split linears
inline constexpr char kMlp[] = "mlp";            // the MLP's split linears
inline constexpr char kExperts[] = "experts";    // the experts' split linears
inline constexpr char kCounts[] = "counts";      // the routing counts' all-to-all
inline constexpr char kDispatch[] = "dispatch";  // the routed rows out to their experts
inline constexpr char kCombine[] = "combine";    // and the experts' outputs back
inline constexpr char kContext[] = "context";    // attention's K, V (or q, k, v, o) over cp
inline constexpr char kBalance[] = "balance";    // the router's statistics summed over cp
inline std::string Layer(int layer, const char* part) {
  return "layer" + std::to_string(layer) + "." + part;
}
}  // namespace scope

}  // namespace tally::comm
