// Files as tally reads and writes them: inputs must be regular files of a bounded size,
// and an output replaces nothing but a regular file, all at once or not at all.
//
//   RETURN_IF_ERROR(CheckInputFile(path, "[data]", /*max_bytes=*/1 << 30).status());
//   RETURN_IF_ERROR(CheckOutputFile(path, "[train] --save"));   // before the first step
//
//   ASSIGN_OR_RETURN(AtomicFile out, AtomicFile::Create(path, "[checkpoint]"));
//   RETURN_IF_ERROR(out.Write(header.data(), header.size()));
//   RETURN_IF_ERROR(out.Commit());    // renamed over `path`; destroyed uncommitted: removed
//
// An AtomicFile writes to a temporary file of a unique name next to `path` (so two runs
// saving to one path never write into each other's file) and renames it over `path` on
// Commit; on any failure, and when destroyed before Commit, the temporary file is removed.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tally {

// The size of `path` in bytes, if it is a regular file of at most `max_bytes`; otherwise
// an error that starts with `who` and says what it is instead (missing, a directory, a
// FIFO, a device, too large). It opens nothing, so a FIFO never blocks.
absl::StatusOr<int64_t> CheckInputFile(const std::string& path, const std::string& who,
                                       int64_t max_bytes);

// Whether `path` can be written: absent in a directory where a file can be created, or a
// regular file that can be replaced (not a symbolic link: the rename would replace the
// link), with room in the name for the temporary file's suffix. Leaves nothing behind.
absl::Status CheckOutputFile(const std::string& path, const std::string& who);

// A file as the system knows it, by device and inode: the file itself when it exists
// (links followed), else its directory's and the name it would take there. Null when
// neither exists.
struct FileIdentity {
  dev_t device = 0;
  ino_t inode = 0;
  std::string name;  // empty when the file exists
  bool operator==(const FileIdentity& o) const {
    return device == o.device && inode == o.inode && name == o.name;
  }
};
std::optional<FileIdentity> IdentityOf(const std::string& path);

// Whether `a` and `b` name one file (`./f` and `f`, a hard link, a symbolic link and
// its target), existing or to be created: writing one would replace the other.
bool SameFile(const std::string& a, const std::string& b);

class AtomicFile {
 public:
  static absl::StatusOr<AtomicFile> Create(const std::string& path, const std::string& who);
  AtomicFile(AtomicFile&& other) noexcept;
  AtomicFile& operator=(AtomicFile&&) = delete;
  ~AtomicFile();

  absl::Status Write(const void* data, int64_t bytes);
  // Flushes, closes and renames the temporary file over the path.
  absl::Status Commit();

 private:
  AtomicFile(std::string path, std::string temporary, std::string who, int fd)
      : path_(std::move(path)), temporary_(std::move(temporary)), who_(std::move(who)), fd_(fd) {}
  absl::Status Fail(const std::string& what);
  void Discard();

  std::string path_, temporary_, who_;
  int fd_ = -1;
};

// `text` into `path` through an AtomicFile.
absl::Status WriteFileAtomically(const std::string& path, std::string_view text,
                                 const std::string& who);

}  // namespace tally
