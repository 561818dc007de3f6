#include "core/runtime/comm/algorithms/recursive_doubling.h"

#include "core/runtime/comm/algorithms/buffer_math.h"
#include "core/runtime/status_macros.h"

namespace tally::comm::recursive_doubling {

Steps Schedule(int group_size, int rank) {
  int doubling = 1;  // p', the largest power of two <= p
  while (doubling * 2 <= group_size) doubling *= 2;
  const int extra = group_size - doubling;
  Steps steps;
  if (rank < 2 * extra && rank % 2 == 0) {  // folds into rank + 1 and waits for the result
    steps.push_back({rank + 1, Move::kSend});
    steps.push_back({rank + 1, Move::kReceive});
    return steps;
  }
  if (rank < 2 * extra) steps.push_back({rank - 1, Move::kReduce});
  // The new numbers 0..p'-1: odd ranks below 2e are r / 2, the others r - e.
  const int mine = rank < 2 * extra ? rank / 2 : rank - extra;
  for (int bit = 1; bit < doubling; bit *= 2) {
    const int theirs = mine ^ bit;
    steps.push_back({theirs < extra ? 2 * theirs + 1 : theirs + extra, Move::kExchange});
  }
  if (rank < 2 * extra) steps.push_back({rank - 1, Move::kSend});
  return steps;
}

absl::Status AllReduce(Wire& wire, void* data, int64_t count) {
  const size_t bytes = Bytes(count, wire);
  const Steps steps = Schedule(wire.size(), wire.rank());
  // A round's partners read each other's buffer while reducing into their own: each sends
  // a copy (its own, unless the transport copies the message as it posts it).
  void* copy = nullptr;
  if (!steps.empty() && !wire.ExchangeCopiedAtPost(bytes)) {
    ASSIGN_OR_RETURN(copy, wire.Scratch(count));
  }
  bool averaged = false;
  for (const Step& step : steps) {
    // The result is complete before it goes back to a folded rank (or, with no fold, after
    // the last round).
    if (step.move == Move::kSend && step.peer < wire.rank() && !averaged) {
      RETURN_IF_ERROR(FinishAverageOf(wire, data, count));
      averaged = true;
    }
    Requests pending;
    switch (step.move) {
      case Move::kSend: wire.Send(step.peer, data, bytes, pending); break;
      case Move::kReduce: wire.RecvReduce(step.peer, data, bytes, pending); break;
      case Move::kReceive:
        wire.Recv(step.peer, data, bytes, pending);
        averaged = true;  // the folded rank gets the finished result
        break;
      case Move::kExchange:
        if (copy != nullptr) RETURN_IF_ERROR(CopyElements(copy, data, count, wire));
        wire.Send(step.peer, copy != nullptr ? copy : data, bytes, pending, SendMode::kExchange);
        wire.RecvReduce(step.peer, data, bytes, pending);
        break;
    }
    RETURN_IF_ERROR(pending.WaitAll());
  }
  if (!averaged) RETURN_IF_ERROR(FinishAverageOf(wire, data, count));
  return absl::OkStatus();
}

}  // namespace tally::comm::recursive_doubling
