// The smallest GPT the checkpoint tests save and load: one layer of 8 channels.
#pragma once

#include "core/model/config.h"

namespace tally::model {

inline GPTConfig TinyCheckpointModel() {
  GPTConfig c;
  c.n_layer = 1;
  c.n_head = 2;
  c.n_embd = 8;
  c.seq_len = 4;
  c.vocab_size = 16;
  return c;
}

}  // namespace tally::model
