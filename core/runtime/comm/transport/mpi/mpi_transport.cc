// The MPI transport (mpi_launch.h): one rank per process, messages over MPI point-to-point.
// Each message is a header and its bytes; groups are MPI communicators (group.h); MPI's
// own collectives are in collectives.cc.
#include "core/runtime/comm/transport/mpi/mpi_transport.h"

#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstddef>
#include <cstring>
#include <memory>
#include <numeric>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "core/runtime/comm/algorithms/partition.h"
#include "core/runtime/comm/algorithms/reduce.h"
#include "core/runtime/comm/ledger/names.h"
#include "core/runtime/comm/transport/mpi/group.h"
#include "core/runtime/comm/transport/poller.h"
#include "core/runtime/comm/transport/transport.h"
#include "core/runtime/status_macros.h"

namespace tally::comm::mpi {
namespace {

// Every message is its header with up to kInline of its bytes in one MPI message, and,
// past those, an MPI message with the rest. A small message is thus one MPI message,
// which Open MPI's shared memory sends eagerly (its eager limit, 4 KiB, includes its own
// header). A message of kBareHeaderFrom bytes or more inlines none: its bytes go in one MPI
// message straight from the sender's buffer to the receiver's (Open MPI's shared memory
// moves them with one copy, CMA), and copying its first kInline bytes through the header
// would only add a copy on each side. A header always matches the receive posted for it,
// whatever the sizes, so that a size mismatch is told, not waited for. MPI keeps the order
// of the messages between two processes with the same tag on one communicator, so the
// k-th header and the k-th data message of a channel belong together.
constexpr int kHeaderTag = 1;
constexpr int kDataTag = 2;

struct Header {
  OpSignature signature;
  uint64_t bytes = 0;
};
static_assert(sizeof(Header) % 8 == 0, "the inline bytes start aligned for any dtype");
// Header and inline bytes within the eager limit with room for the library's own header.
constexpr size_t kInline = 4096 - 64 - sizeof(Header);
static_assert(kInline % 8 == 0, "whole elements of any dtype");
// Open MPI's shared memory sends the first 32 KiB of a large message through its own
// buffers and the rest by one copy; from here on the message is a rendezvous in any case.
constexpr size_t kBareHeaderFrom = 32768;

// The first failure of any wait in this process. MPI has no way to wake a peer's wait,
// so each process remembers: once one wait has failed, every later wait fails at once
// with the same status, and the failure reaches the rank's function without a second
// deadline per pending message.
absl::Status& FirstFailure() {
  static absl::Status* failure = new absl::Status();
  return *failure;
}

// Staging buffers of headers and reducing receives, kept for reuse: a fresh buffer per
// message of a megabyte would be a fresh mmap and its page faults every time. Used by the
// rank's one thread.
struct Staging {
  size_t capacity = 0;
  std::unique_ptr<char[]> data;
};

std::vector<Staging>& FreeStaging() {
  static auto* free = new std::vector<Staging>();
  return *free;
}

Staging TakeStaging(size_t bytes) {
  std::vector<Staging>& free = FreeStaging();
  size_t best = free.size();  // the smallest that fits: headers do not take the megabytes
  for (size_t i = 0; i < free.size(); ++i) {
    if (free[i].capacity >= bytes && (best == free.size() || free[i].capacity < free[best].capacity)) {
      best = i;
    }
  }
  if (best < free.size()) {
    Staging s = std::move(free[best]);
    free.erase(free.begin() + std::ptrdiff_t(best));
    return s;
  }
  const size_t capacity = std::max<size_t>(bytes, 1);
  return Staging{capacity, std::unique_ptr<char[]>(new char[capacity])};
}

void GiveStaging(Staging s) {
  if (s.data != nullptr) FreeStaging().push_back(std::move(s));
}

class MpiRequest : public Request {
 public:
  // A send posts its header (with the inline bytes) and the rest at once.
  static std::unique_ptr<Request> Send(std::shared_ptr<const Group> group, int peer,
                                       const void* data, size_t bytes, const OpSignature& signature) {
    std::unique_ptr<MpiRequest> r(new MpiRequest(std::move(group), peer, bytes, signature));
    r->is_send_ = true;
    Header* header = r->header();
    header->signature = signature;
    header->bytes = bytes;
    if (r->inline_bytes() > 0) std::memcpy(r->inline_data(), data, r->inline_bytes());
    // MPI_Isend only reads the rest.
    const size_t skip = r->inline_bytes();
    return Post(std::move(r), const_cast<char*>(static_cast<const char*>(data)) + skip);
  }

  // A receive posts both; with a reduction the rest lands in a staging buffer, and both
  // parts are combined into `data` once they are all there.
  static std::unique_ptr<Request> Recv(std::shared_ptr<const Group> group, int peer, void* data,
                                       size_t bytes, const OpSignature& signature,
                                       std::optional<Reduction> reduction) {
    std::unique_ptr<MpiRequest> r(new MpiRequest(std::move(group), peer, bytes, signature));
    r->data_ = data;
    r->reduction_ = reduction;
    void* rest = static_cast<char*>(data) + r->inline_bytes();
    if (reduction.has_value() && r->rest_bytes() > 0) {
      r->staging_ = TakeStaging(r->rest_bytes());
      rest = r->staging_.data.get();
    }
    return Post(std::move(r), rest);
  }

  ~MpiRequest() override {
    if (done_) {
      GiveStaging(std::move(staging_));
      GiveStaging(std::move(head_));
      return;
    }
    // Dropped unfinished (a failed run on its way out): withdraw what can be withdrawn,
    // and leave the buffers to MPI, which may still read or write them.
    for (MPI_Request& request : requests_) {
      if (request == MPI_REQUEST_NULL) continue;
      if (!is_send_) MPI_Cancel(&request);
      MPI_Request_free(&request);
    }
    head_.data.release();
    staging_.data.release();
  }

  absl::Status Wait() override {
    if (done_) return status_;
    if (!FirstFailure().ok()) return Finish(FirstFailure());
    Poller poller(group_->timeout);
    bool header_checked = is_send_;
    for (;;) {
      int flag = 0;
      if (!header_checked) {
        absl::Status s = Check("MPI_Test", MPI_Test(&requests_[0], &flag, MPI_STATUS_IGNORE));
        if (!s.ok()) return Finish(s);
        if (flag) {
          header_checked = true;
          std::string mismatch =
              DescribeMismatch(group_->name, group_->rank, mine_, peer_, header()->signature);
          if (!mismatch.empty()) return Finish(absl::InvalidArgumentError(mismatch));
          if (header()->bytes != bytes_) {
            return Finish(absl::InvalidArgumentError(
                absl::StrCat(group_->Where(mine_), " expected ", bytes_, " bytes from rank ",
                             peer_, ", which sent ", header()->bytes)));
          }
        }
      }
      if (header_checked) {
        // A completed request is MPI_REQUEST_NULL: a message of only a header is done
        // without another turn of MPI's progress engine.
        if (requests_[0] == MPI_REQUEST_NULL && requests_[1] == MPI_REQUEST_NULL) break;
        absl::Status s =
            Check("MPI_Testall", MPI_Testall(2, requests_, &flag, MPI_STATUSES_IGNORE));
        if (!s.ok()) return Finish(s);
        if (flag) break;
      }
      if (!poller.Next()) {
        return Finish(absl::DeadlineExceededError(absl::StrCat(
            group_->Where(mine_), " waited ", absl::FormatDuration(group_->timeout), " for rank ",
            peer_, " (", is_send_ ? "send" : "recv", " of ", bytes_, " bytes); deadline exceeded")));
      }
    }
    if (!is_send_) {
      char* data = static_cast<char*>(data_);
      if (!reduction_.has_value()) {
        if (inline_bytes() > 0) std::memcpy(data, inline_data(), inline_bytes());
      } else {
        const size_t element = SizeOf(reduction_->dtype);
        ReduceInto(data, inline_data(), int64_t(inline_bytes() / element), reduction_->dtype,
                   reduction_->op);
        if (rest_bytes() > 0) {
          ReduceInto(data + inline_bytes(), staging_.data.get(), int64_t(rest_bytes() / element),
                     reduction_->dtype, reduction_->op);
        }
      }
    }
    return Finish(absl::OkStatus());
  }

 private:
  MpiRequest(std::shared_ptr<const Group> group, int peer, size_t bytes, const OpSignature& mine)
      : group_(std::move(group)),
        peer_(peer),
        bytes_(bytes),
        mine_(mine),
        head_(TakeStaging(sizeof(Header) + kInline)) {}

  Header* header() { return reinterpret_cast<Header*>(head_.data.get()); }
  char* inline_data() { return head_.data.get() + sizeof(Header); }
  size_t inline_bytes() const {
    return bytes_ >= kBareHeaderFrom ? 0 : std::min(bytes_, kInline);
  }
  size_t rest_bytes() const { return bytes_ - inline_bytes(); }

  // Posts the header with the inline bytes (tag kHeaderTag; a receive has room for the
  // most a header carries) and then the rest, if any, at `rest` (kDataTag), sending or
  // receiving as the request does.
  static std::unique_ptr<Request> Post(std::unique_ptr<MpiRequest> r, void* rest) {
    const MPI_Comm comm = r->group_->comm;
    auto post = [&](void* buffer, size_t bytes, int tag, MPI_Request* request) {
      return r->is_send_ ? Check("MPI_Isend", MPI_Isend(buffer, int(bytes), MPI_BYTE, r->peer_,
                                                        tag, comm, request))
                         : Check("MPI_Irecv", MPI_Irecv(buffer, int(bytes), MPI_BYTE, r->peer_,
                                                        tag, comm, request));
    };
    const size_t head_bytes = sizeof(Header) + (r->is_send_ ? r->inline_bytes() : kInline);
    absl::Status s = post(r->head_.data.get(), head_bytes, kHeaderTag, &r->requests_[0]);
    if (s.ok() && r->rest_bytes() > 0) {
      s = post(rest, r->rest_bytes(), kDataTag, &r->requests_[1]);
    }
    if (!s.ok()) return FailedRequest(s);
    return r;
  }

  absl::Status Finish(absl::Status status) {
    done_ = true;
    status_ = std::move(status);
    if (!status_.ok() && FirstFailure().ok()) FirstFailure() = status_;
    return status_;
  }

  std::shared_ptr<const Group> group_;
  int peer_;
  size_t bytes_;
  OpSignature mine_;
  bool is_send_ = false;
  Staging head_;  // the header and the inline bytes, sent or received
  MPI_Request requests_[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};  // header, the rest
  void* data_ = nullptr;
  std::optional<Reduction> reduction_;
  Staging staging_;
  bool done_ = false;
  absl::Status status_;
};

class MpiTransport : public Transport {
 public:
  explicit MpiTransport(std::shared_ptr<const Group> group) : group_(std::move(group)) {}

  int rank() const override { return group_->rank; }
  int size() const override { return group_->size(); }
  int world_rank(int group_rank) const override { return group_->world_ranks[group_rank]; }
  const std::string& name() const override { return group_->name; }

  // MPI cannot see what its peers call without a message: each message's header is
  // compared instead.
  absl::Status Announce(const OpSignature&) override { return absl::OkStatus(); }
  // A message's header carries its first kInline bytes, copied as it is posted.
  size_t ExchangeCopiedAtPost(const OpSignature&) const override { return kInline; }

  std::unique_ptr<Request> Isend(int peer, const void* data, size_t bytes,
                                 const OpSignature& signature, SendMode) override {
    if (absl::Status s = CheckMessage(peer, bytes, signature); !s.ok()) return FailedRequest(s);
    return MpiRequest::Send(group_, peer, data, bytes, signature);
  }

  std::unique_ptr<Request> Irecv(int peer, void* data, size_t bytes, const OpSignature& signature,
                                 std::optional<Reduction> reduction) override {
    if (absl::Status s = CheckMessage(peer, bytes, signature); !s.ok()) return FailedRequest(s);
    return MpiRequest::Recv(group_, peer, data, bytes, signature, reduction);
  }

  absl::Status NativeCollective(const OpSignature& signature, const void* input,
                                void* output) override {
    return mpi::NativeCollective(*group_, signature, input, output);
  }

  absl::StatusOr<std::unique_ptr<Transport>> Split(std::span<const int> members, uint64_t split_id,
                                                   const std::string& name) override {
    auto group = std::make_shared<Group>();
    group->name = name;
    group->rank = -1;
    group->timeout = group_->timeout;
    for (size_t i = 0; i < members.size(); ++i) {
      if (members[i] < 0 || members[i] >= size()) {
        return absl::InvalidArgumentError(absl::StrCat("[Split of '", this->name(), "'] member ",
                                                       members[i], " is not a rank of the group"));
      }
      if (members[i] == rank()) group->rank = int(i);
      group->world_ranks.push_back(world_rank(members[i]));
    }
    if (group->rank < 0) {
      return absl::InvalidArgumentError(absl::StrCat("[Split of '", this->name(), "'] rank ", rank(),
                                                     " is not among the members of '", name, "'"));
    }
    // Only the members take part (MPI_Comm_create_group), as only they call Split; the
    // tag tells apart splits of overlapping member sets made at the same time.
    MPI_Group parent, sub;
    RETURN_IF_ERROR(Check("MPI_Comm_group", MPI_Comm_group(group_->comm, &parent)));
    RETURN_IF_ERROR(Check("MPI_Group_incl",
                          MPI_Group_incl(parent, int(members.size()), members.data(), &sub)));
    const int tag = int(split_id % 32768);
    absl::Status made =
        Check("MPI_Comm_create_group", MPI_Comm_create_group(group_->comm, sub, tag, &group->comm));
    MPI_Group_free(&sub);
    MPI_Group_free(&parent);
    RETURN_IF_ERROR(made);
    return std::unique_ptr<Transport>(std::make_unique<MpiTransport>(std::move(group)));
  }

 private:
  absl::Status CheckMessage(int peer, size_t bytes, const OpSignature& signature) const {
    RETURN_IF_ERROR(CheckPeer(peer, signature));
    if (bytes > size_t(INT_MAX)) {
      return absl::InvalidArgumentError(absl::StrCat(group_->Where(signature), ": a message of ",
                                                     bytes, " bytes is over MPI's int count; "
                                                     "lower max_chunk_bytes"));
    }
    return absl::OkStatus();
  }

  std::shared_ptr<const Group> group_;
};

}  // namespace

std::unique_ptr<Transport> WorldTransport(absl::Duration timeout) {
  auto world = std::make_shared<Group>();
  world->comm = MPI_COMM_WORLD;
  world->name = group::kWorld;
  int size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world->rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  world->world_ranks.resize(size_t(size));
  std::iota(world->world_ranks.begin(), world->world_ranks.end(), 0);
  world->timeout = timeout;
  return std::make_unique<MpiTransport>(std::move(world));
}

}  // namespace tally::comm::mpi
