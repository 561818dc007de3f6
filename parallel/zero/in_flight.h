// One unit's collectives in flight, the overlap of ZeRO-2 and ZeRO-3 (zero.h): a closed
// unit's gradient reduce-scatters (--overlap), or the next unit's prefetched gathers.
// They are posted together and waited for together, and the tensor they read or write is
// held until then.
//
//   in_flight.Start(unit, grads);
//   ASSIGN_OR_RETURN(auto pending, sent_as.IReduceScatter(group, part, mine, kSum));
//   in_flight.reduces.push_back(std::move(pending));
//   ... later ...
//   ASSIGN_OR_RETURN(Tensor held, in_flight.Finish());
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "parallel/sent_as.h"
#include "parallel/zero/quantize.h"
#include "runtime/comm/communicator.h"
#include "runtime/tensor.h"

namespace tally::parallel {

struct InFlight {
  int unit = -1;  // the model unit whose calls are in flight; -1: none
  Tensor held;    // what they read or write, kept alive until they are done
  std::vector<SentAs::Work> reduces;
  std::vector<std::unique_ptr<comm::CollectiveWork>> gathers;
  std::vector<QuantizedGather> quantized;  // qwZ's gathers, dequantised as they finish

  bool empty() const { return unit < 0; }
  void Start(int u, Tensor t) {
    unit = u;
    held = std::move(t);
  }
  // Waits for every call (each one, whichever fails), empties this, and returns the tensor
  // it held.
  absl::StatusOr<Tensor> Finish() {
    absl::Status status;
    for (SentAs::Work& pending : reduces) status.Update(pending.Wait());
    for (auto& work : gathers) status.Update(work->Wait());
    for (QuantizedGather& gather : quantized) status.Update(gather.Finish());
    Tensor t = std::move(held);
    *this = InFlight();
    if (!status.ok()) return status;
    return t;
  }
};

}  // namespace tally::parallel
