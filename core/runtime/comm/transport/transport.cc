#include "core/runtime/comm/transport/transport.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace tally::comm {
namespace {

class FailedRequestImpl : public Request {
 public:
  explicit FailedRequestImpl(absl::Status status) : status_(std::move(status)) {}
  absl::Status Wait() override { return status_; }

 private:
  absl::Status status_;
};

}  // namespace

absl::Status Transport::NativeCollective(const OpSignature& signature, const void*, void*) {
  return absl::UnimplementedError(absl::StrCat("[", Title(signature.primitive), " on '", name(),
                                               "'] this transport has no native collectives "
                                               "(the MPI transport has)"));
}

absl::Status Transport::CheckPeer(int peer, const OpSignature& signature) const {
  if (peer >= 0 && peer < size() && peer != rank()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("[", Title(signature.primitive), " on '", name(),
                                                 "'] rank ", rank(), " cannot exchange with rank ",
                                                 peer, " of a group of ", size()));
}

std::unique_ptr<Request> FailedRequest(absl::Status status) {
  return std::make_unique<FailedRequestImpl>(std::move(status));
}

std::string DescribeMismatch(const std::string& group, int my_rank, const OpSignature& mine,
                             int their_rank, const OpSignature& theirs) {
  if (mine == theirs) return "";  // the message path: no strings unless something differs
  std::string head = absl::StrCat("[", Title(mine.primitive), " on '", group, "'] ");
  auto both = [&](auto my_value, auto their_value, const char* what) {
    return absl::StrCat(head, "rank ", their_rank, " ", what, " ", their_value, ", rank ",
                        my_rank, " ", what, " ", my_value);
  };
  if (mine.seq != theirs.seq) {
    return absl::StrCat(head, "rank ", their_rank, " is at collective call #", theirs.seq,
                        " of this group, rank ", my_rank, " at #", mine.seq,
                        " (a rank skipped or added a call)");
  }
  if (mine.primitive != theirs.primitive) {
    return both(Title(mine.primitive), Title(theirs.primitive), "called");
  }
  if (mine.algorithm != theirs.algorithm) {
    return both(Name(mine.algorithm), Name(theirs.algorithm), "uses algorithm");
  }
  if (mine.root != theirs.root) return both(mine.root, theirs.root, "passed root");
  if (mine.dtype != theirs.dtype) return both(Name(mine.dtype), Name(theirs.dtype), "passed dtype");
  if (mine.op != theirs.op) return both(Name(mine.op), Name(theirs.op), "passed reduce op");
  if (mine.count != theirs.count) {
    return absl::StrCat(head, "rank ", their_rank, " passed ", theirs.count, " elements, rank ",
                        my_rank, " passed ", mine.count);
  }
  auto memory = [](const OpSignature& s) {
    return s.meta() ? "meta tensors" : s.device >= 0 ? "GPU memory" : "host memory";
  };
  if (std::string(memory(mine)) != memory(theirs)) {
    return both(memory(mine), memory(theirs), "passed buffers in");
  }
  return "";
}

}  // namespace tally::comm
