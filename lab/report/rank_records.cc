#include "lab/report/rank_records.h"

#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/runtime/byte_stream.h"
#include "core/runtime/status_macros.h"

namespace tally::report {
namespace {

std::string Encode(const RankRecord& record) {
  ByteWriter w;
  record.traffic.Encode(w);
  record.memory.Encode(w);
  w.Int(record.busy_nanos).Int(record.step_nanos).Int(record.train_nanos).Int(record.cpu_nanos);
  w.Int(int64_t(record.spans.size()));
  for (const train::Trainer::Span& s : record.spans) {
    w.String(s.name).Int(s.start_nanos).Int(s.end_nanos);
  }
  return w.bytes();
}

absl::StatusOr<RankRecord> Decode(std::string_view bytes, int rank) {
  ByteReader r(bytes);
  RankRecord record;
  bool ok = record.traffic.Decode(r) && record.memory.Decode(r);
  record.busy_nanos = r.Int();
  record.step_nanos = r.Int();
  record.train_nanos = r.Int();
  record.cpu_nanos = r.Int();
  for (int64_t i = 0, n = r.Int(); r.ok() && i < n; ++i) {
    train::Trainer::Span s;
    s.name = r.String();
    s.start_nanos = r.Int();
    s.end_nanos = r.Int();
    record.spans.push_back(std::move(s));
  }
  if (!ok || !r.ok() || !r.done()) {
    return absl::DataLossError(absl::StrCat("[report] rank ", rank, "'s record arrived damaged"));
  }
  return record;
}

// Bytes travel as whole int64 words (the communicator's smallest common dtype).
int64_t Words(int64_t bytes) { return (bytes + 7) / 8; }

}  // namespace

absl::StatusOr<std::vector<RankRecord>> GatherRecords(comm::Communicator& world,
                                                      const RankRecord& mine) {
  comm::PhaseScope phase(world.ledger(), comm::Phase::kOther);
  comm::LabelScope label(world.ledger(), "report");
  Allocator unaccounted(nullptr);
  const std::string bytes = Encode(mine);
  const int n = world.size();
  const bool root = world.rank() == 0;
  ASSIGN_OR_RETURN(Tensor size, Tensor::Empty({1}, DType::kI64, unaccounted));
  size.data<int64_t>()[0] = int64_t(bytes.size());
  ASSIGN_OR_RETURN(Tensor sizes, Tensor::Empty({root ? n : 0}, DType::kI64, unaccounted));
  RETURN_IF_ERROR(world.Gather(size, sizes, n, /*root=*/0));
  if (!root) {
    ASSIGN_OR_RETURN(Tensor message, Tensor::Empty({Words(int64_t(bytes.size()))}, DType::kI64,
                                                   unaccounted));
    std::memcpy(message.raw_data(), bytes.data(), bytes.size());
    RETURN_IF_ERROR(world.Send(message, 0));
    return std::vector<RankRecord>();
  }
  std::vector<RankRecord> all(static_cast<size_t>(n));
  ASSIGN_OR_RETURN(all[0], Decode(bytes, 0));
  for (int r = 1; r < n; ++r) {
    const int64_t length = sizes.data<int64_t>()[r];
    ASSIGN_OR_RETURN(Tensor message, Tensor::Empty({Words(length)}, DType::kI64, unaccounted));
    RETURN_IF_ERROR(world.Recv(message, r));
    ASSIGN_OR_RETURN(all[size_t(r)],
                     Decode(std::string_view(static_cast<const char*>(message.raw_data()),
                                             size_t(length)),
                            r));
  }
  return all;
}

}  // namespace tally::report
