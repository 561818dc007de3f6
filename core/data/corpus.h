// The embedded default corpus: English-like text that tally writes itself.
//
// A small grammar (subjects, verbs, objects, places, numbers, quoted speech, paragraph
// breaks) is expanded with words drawn by the counter RNG, so the same seed always gives
// the same bytes. The text is varied enough that a model must learn spelling, word order
// and punctuation, and regular enough that a small one gets well below the unigram
// entropy of its bytes in a few hundred steps.
#pragma once

#include <cstdint>
#include <string>

namespace tally::data {

// `bytes` bytes of text (the last sentence is cut where the size is reached).
std::string GenerateCorpus(int64_t bytes, uint64_t seed = 20241);

// The entropy of the byte distribution of `text`, in nats: the loss of the best model
// that ignores context.
double UnigramEntropy(const std::string& text);

}  // namespace tally::data
