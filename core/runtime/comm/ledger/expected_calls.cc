#include "core/runtime/comm/ledger/expected_calls.h"

#include <algorithm>
#include <iterator>

#include "core/runtime/comm/ledger/exact_traffic.h"

namespace tally::comm {

void Append(ExpectedCalls& calls, ExpectedCalls more) {
  calls.insert(calls.end(), std::make_move_iterator(more.begin()),
               std::make_move_iterator(more.end()));
}

int64_t TotalSent(std::span<const ExpectedCall> calls, Algorithm algorithm) {
  int64_t sent = 0;
  for (const ExpectedCall& c : calls) {
    if (c.receive) continue;
    sent += c.calls * ExactTraffic(c.primitive, algorithm, c.ranks, c.rank, -1, c.count,
                                   size_t(c.element), c.nodes)
                          .sent;
  }
  return sent;
}

int64_t ExpectedSent(std::span<const ExpectedCall> calls, const LedgerKey& key) {
  ExpectedCalls matching;
  for (const ExpectedCall& c : calls) {
    if (c.group == key.group && c.primitive == key.primitive && c.phase == key.phase &&
        c.scope == key.label) {
      matching.push_back(c);
    }
  }
  return matching.empty() ? -1 : TotalSent(matching, key.algorithm);
}

int64_t ExpectedRunSent(std::span<const ExpectedCall> calls, const LedgerKey& key, int64_t steps) {
  int64_t sent = -1;
  for (const ExpectedCall& c : calls) {
    if (c.group != key.group || c.primitive != key.primitive || c.phase != key.phase ||
        c.scope != key.label) {
      continue;
    }
    sent = std::max<int64_t>(sent, 0) +
           (c.of_steps >= 0 ? c.of_steps : steps) * TotalSent({&c, 1}, key.algorithm);
  }
  return sent;
}

}  // namespace tally::comm
