#include "core/data/corpus.h"

#include <array>
#include <cmath>
#include <vector>

#include "core/runtime/rng.h"

namespace tally::data {
namespace {

constexpr const char* kNames[] = {"ada", "boris", "clara", "dmitri", "elena", "felix", "greta",
                                  "hugo", "irene", "jonas"};
constexpr const char* kNouns[] = {"cat",    "river",  "engine", "garden", "teacher", "bridge",
                                  "letter", "market", "window", "farmer", "storm",   "lamp",
                                  "ship",   "forest", "clock",  "baker"};
constexpr const char* kAdjectives[] = {"old",   "quiet", "bright", "small", "heavy", "green",
                                       "cold",  "quick", "silver", "tired", "round", "wooden"};
constexpr const char* kVerbs[] = {"sees", "finds", "carries", "paints", "follows", "builds",
                                  "opens", "watches", "mends", "counts", "keeps", "calls"};
constexpr const char* kPlaces[] = {"near the river", "in the market", "under the bridge",
                                   "by the window", "at the station", "behind the garden",
                                   "on the hill", "in the forest"};
constexpr const char* kTimes[] = {"in the morning", "at night", "every day", "after the storm",
                                  "before dinner", "on sunday"};
constexpr const char* kNumbers[] = {"two", "three", "four", "five", "six", "seven", "eight",
                                    "nine", "ten", "twelve"};

// Draws from the counter RNG, one index per draw.
class Draw {
 public:
  explicit Draw(uint64_t seed) : seed_(seed) {}
  template <size_t N>
  const char* From(const char* const (&words)[N]) {
    return words[Next(N)];
  }
  uint32_t Next(uint32_t n) { return Philox(seed_, kStream, index_++)[0] % n; }

 private:
  static constexpr uint64_t kStream = 0x636f72707573ull;  // "corpus"
  uint64_t seed_;
  uint64_t index_ = 0;
};

std::string NounPhrase(Draw& d) {
  std::string s = d.Next(2) == 0 ? "the " : "a ";
  if (d.Next(2) == 0) s += std::string(d.From(kAdjectives)) + " ";
  return s + d.From(kNouns);
}

std::string Sentence(Draw& d) {
  switch (d.Next(5)) {
    case 0:
      return NounPhrase(d) + " " + d.From(kVerbs) + " " + NounPhrase(d) + " " + d.From(kPlaces) + ".";
    case 1:
      return std::string(d.From(kNames)) + " " + d.From(kVerbs) + " " + NounPhrase(d) + " " +
             d.From(kTimes) + ".";
    case 2:
      return std::string("there are ") + d.From(kNumbers) + " " + d.From(kNouns) + "s " +
             d.From(kPlaces) + ".";
    case 3: {
      std::string quote = NounPhrase(d) + " " + d.From(kVerbs) + " " + NounPhrase(d);
      return std::string(d.From(kNames)) + " said: \"" + quote + "!\"";
    }
    default:
      return std::string("when ") + NounPhrase(d) + " " + d.From(kVerbs) + " " + NounPhrase(d) +
             ", " + d.From(kNames) + " " + d.From(kVerbs) + " " + NounPhrase(d) + ".";
  }
}

}  // namespace

std::string GenerateCorpus(int64_t bytes, uint64_t seed) {
  Draw d(seed);
  std::string text;
  text.reserve(size_t(bytes) + 256);
  while (int64_t(text.size()) < bytes) {
    int sentences = 2 + int(d.Next(4));
    for (int i = 0; i < sentences; ++i) {
      std::string s = Sentence(d);
      s[0] = char(s[0] - 'a' + 'A');  // sentences start with a capital
      text += s;
      text += i + 1 < sentences ? " " : "\n";
    }
    if (d.Next(3) == 0) text += "\n";  // a paragraph break
  }
  text.resize(size_t(bytes));
  return text;
}

double UnigramEntropy(const std::string& text) {
  std::array<double, 256> counts{};
  for (unsigned char c : text) counts[c] += 1;
  double h = 0, n = double(text.size());
  for (double k : counts) {
    if (k > 0) h -= k / n * std::log(k / n);
  }
  return h;
}

}  // namespace tally::data
