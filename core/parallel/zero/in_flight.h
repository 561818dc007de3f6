// One unit's collectives in flight, the overlap of ZeRO-2 and ZeRO-3 (zero.h): a closed
// unit's gradient reduce-scatters (--overlap), or the next unit's prefetched gathers.
// They are posted together (by the store's seams, core/parallel/seams.h) and finished
// together, and the tensor they read or write is held until then.
//
//   in_flight.Start(unit, grads);
//   ASSIGN_OR_RETURN(Posted call, reducer.IReduceScatter(group, part, mine));
//   in_flight.calls.push_back(std::move(call));
//   ... later ...
//   ASSIGN_OR_RETURN(Tensor held, in_flight.Finish());
#pragma once

#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "core/parallel/seams.h"
#include "core/runtime/tensor.h"

namespace tally::parallel {

struct InFlight {
  int unit = -1;  // the model unit whose calls are in flight; -1: none
  Tensor held;    // what they read or write, kept alive until they are done
  std::vector<Posted> calls;  // finished in the order they were posted

  bool empty() const { return unit < 0; }
  void Start(int u, Tensor t) {
    unit = u;
    held = std::move(t);
  }
  // Finishes every call (each one, whichever fails), empties this, and returns the tensor
  // it held.
  absl::StatusOr<Tensor> Finish() {
    absl::Status status;
    for (Posted& call : calls) status.Update(call());
    Tensor t = std::move(held);
    *this = InFlight();
    if (!status.ok()) return status;
    return t;
  }
};

}  // namespace tally::parallel
