// Status plumbing for tally.
//
// Every boundary that can meet bad input returns absl::Status or absl::StatusOr<T>.
// The installed Abseil (20220623) has no RETURN_IF_ERROR, ASSIGN_OR_RETURN or CHECK,
// so they live here:
//
//   RETURN_IF_ERROR(comm.AllReduce(grads, ReduceOp::kSum));
//   ASSIGN_OR_RETURN(Tensor t, Tensor::Empty({4, 8}, DType::kF32, alloc));
//   CHECK(offset <= size) << "offset " << offset;   // internal invariant: abort with file:line
#pragma once

#include <cstdlib>
#include <iostream>
#include <sstream>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define TALLY_CONCAT_INNER(a, b) a##b
#define TALLY_CONCAT(a, b) TALLY_CONCAT_INNER(a, b)

// Returns from the enclosing function if `expr` (a Status) is not OK.
#define RETURN_IF_ERROR(expr) \
  TALLY_RETURN_IF_ERROR_IMPL(TALLY_CONCAT(tally_status_, __LINE__), expr)
#define TALLY_RETURN_IF_ERROR_IMPL(status, expr) \
  do {                                           \
    ::absl::Status status = (expr);              \
    if (!status.ok()) return status;             \
  } while (false)

// `lhs = value of expr` if `expr` (a StatusOr) is OK, else returns its status. It expands
// to several statements: after an `if`, put it in braces.
#define ASSIGN_OR_RETURN(lhs, expr) \
  TALLY_ASSIGN_OR_RETURN_IMPL(TALLY_CONCAT(tally_statusor_, __LINE__), lhs, expr)
#define TALLY_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                \
  if (!tmp.ok()) return std::move(tmp).status();    \
  lhs = std::move(tmp).value()

namespace tally::internal {

// Collects the streamed message of a failed CHECK and aborts when destroyed.
class CheckFailure {
 public:
  CheckFailure(const char* file, int line, const char* condition) {
    stream_ << file << ":" << line << ": CHECK failed: " << condition << " ";
  }
  [[noreturn]] ~CheckFailure() {
    std::cerr << stream_.str() << std::endl;
    std::abort();
  }
  std::ostream& stream() { return stream_; }

 private:
  std::ostringstream stream_;
};

// Makes `CHECK(x) << ...` a void expression in both branches of the ternary.
struct Voidify {
  void operator&(std::ostream&) {}
};

}  // namespace tally::internal

// Aborts with file:line when an internal invariant does not hold. Not for bad input:
// bad input is a Status.
#define CHECK(condition)                  \
  (condition) ? (void)0                   \
              : ::tally::internal::Voidify() & \
                    ::tally::internal::CheckFailure(__FILE__, __LINE__, #condition).stream()

// CHECK_OK(status): aborts with the status message when it is not OK.
#define CHECK_OK(expr)                                          \
  do {                                                          \
    ::absl::Status tally_check_status_ = (expr);                \
    CHECK(tally_check_status_.ok()) << tally_check_status_.ToString(); \
  } while (false)
