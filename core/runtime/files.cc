#include "core/runtime/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"

namespace tally {
namespace {

std::string KindOf(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

std::string DirectoryOf(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// What AtomicFile appends to the name of the file it writes beside `path`.
constexpr char kTemporarySuffix[] = ".partial.XXXXXX";
constexpr size_t kTemporarySuffixSize = sizeof(kTemporarySuffix) - 1;

}  // namespace

absl::StatusOr<int64_t> CheckInputFile(const std::string& path, const std::string& who,
                                       int64_t max_bytes) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    return absl::NotFoundError(absl::StrCat(who, " cannot open '", path, "': ", std::strerror(errno)));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, " '", path, "' is ", KindOf(st.st_mode), "; a regular file is needed"));
  }
  if (st.st_size > max_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(who, " '", path, "' is ", st.st_size,
                                                   " bytes, more than the ", max_bytes,
                                                   " this run can read"));
  }
  return int64_t(st.st_size);
}

absl::Status CheckOutputFile(const std::string& path, const std::string& who) {
  if (path.empty()) return absl::InvalidArgumentError(absl::StrCat(who, " needs a path"));
  struct stat st;
  // The rename at the end would replace a link with the file, not write through it.
  if (::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
    std::vector<char> target(4096, '\0');
    const ssize_t n = ::readlink(path.c_str(), target.data(), target.size() - 1);
    return absl::InvalidArgumentError(absl::StrCat(
        who, " '", path, "' is a symbolic link", n > 0 ? absl::StrCat(" to '", target.data(), "'") : "",
        "; tally replaces only a regular file: give the path of the file itself"));
  }
  if (::stat(path.c_str(), &st) == 0) {
    if (!S_ISREG(st.st_mode)) {
      return absl::InvalidArgumentError(absl::StrCat(
          who, " '", path, "' is ", KindOf(st.st_mode), "; tally writes only regular files"));
    }
    if (::access(path.c_str(), W_OK) != 0) {
      return absl::PermissionDeniedError(absl::StrCat(who, " cannot write '", path, "': ",
                                                      std::strerror(errno)));
    }
  }
  // The file is written beside itself and renamed: its directory must take a new file.
  const std::string dir = DirectoryOf(path);
  struct stat dst;
  if (::stat(dir.c_str(), &dst) != 0 || !S_ISDIR(dst.st_mode)) {
    return absl::NotFoundError(absl::StrCat(who, " cannot write '", path, "': no directory '",
                                            dir, "'"));
  }
  if (::access(dir.c_str(), W_OK | X_OK) != 0) {
    return absl::PermissionDeniedError(absl::StrCat(who, " cannot write '", path,
                                                    "': the directory '", dir,
                                                    "' is not writable"));
  }
  // The temporary file's name must fit the directory's file system too, or the work
  // would be lost at the end of the run.
  const size_t slash = path.rfind('/');
  const size_t name = path.size() - (slash == std::string::npos ? 0 : slash + 1);
  const long name_max = ::pathconf(dir.c_str(), _PC_NAME_MAX);
  const size_t most = name_max > 0 ? size_t(name_max) : 255;
  if (name + kTemporarySuffixSize > most) {
    return absl::InvalidArgumentError(absl::StrCat(
        who, " cannot write '", path, "': its name is ", name, " characters, and the file is ",
        "written first as its name + '", kTemporarySuffix, "', which passes the ", most,
        " this directory allows; ask for a name of at most ", most - kTemporarySuffixSize));
  }
  return absl::OkStatus();
}

std::optional<FileIdentity> IdentityOf(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) == 0) return FileIdentity{st.st_dev, st.st_ino, ""};
  const std::string dir = DirectoryOf(path);
  if (::stat(dir.c_str(), &st) != 0) return std::nullopt;
  const size_t slash = path.rfind('/');
  return FileIdentity{st.st_dev, st.st_ino, path.substr(slash == std::string::npos ? 0 : slash + 1)};
}

bool SameFile(const std::string& a, const std::string& b) {
  const std::optional<FileIdentity> x = IdentityOf(a), y = IdentityOf(b);
  return x.has_value() && y.has_value() && *x == *y;
}

absl::StatusOr<AtomicFile> AtomicFile::Create(const std::string& path, const std::string& who) {
  if (absl::Status s = CheckOutputFile(path, who); !s.ok()) return s;
  std::string name = absl::StrCat(path, kTemporarySuffix);
  std::vector<char> buffer(name.begin(), name.end());
  buffer.push_back('\0');
  int fd = ::mkstemp(buffer.data());
  if (fd < 0) {
    return absl::PermissionDeniedError(absl::StrCat(who, " cannot write '", path, "': ",
                                                    std::strerror(errno)));
  }
  return AtomicFile(path, std::string(buffer.data()), std::string(who), fd);
}

AtomicFile::AtomicFile(AtomicFile&& other) noexcept
    : path_(std::move(other.path_)),
      temporary_(std::move(other.temporary_)),
      who_(std::move(other.who_)),
      fd_(other.fd_) {
  other.fd_ = -1;
  other.temporary_.clear();
}

AtomicFile::~AtomicFile() { Discard(); }

void AtomicFile::Discard() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!temporary_.empty()) ::unlink(temporary_.c_str());
  temporary_.clear();
}

absl::Status AtomicFile::Fail(const std::string& what) {
  std::string message = absl::StrCat(who_, " failed writing '", path_, "': ", what);
  Discard();
  return absl::DataLossError(message);
}

absl::Status AtomicFile::Write(const void* data, int64_t bytes) {
  if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat(who_, " '", path_, "' is closed"));
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    ssize_t n = ::write(fd_, p, size_t(bytes));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Fail(n < 0 ? std::strerror(errno) : "nothing written");
    p += n;
    bytes -= n;
  }
  return absl::OkStatus();
}

absl::Status AtomicFile::Commit() {
  if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat(who_, " '", path_, "' is closed"));
  // mkstemp's file is private (0600); give it the mode an ordinary new file gets.
  mode_t mask = ::umask(0);
  ::umask(mask);
  ::fchmod(fd_, 0666 & ~mask);
  if (::fsync(fd_) != 0 && errno != EINVAL) return Fail(std::strerror(errno));
  int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) return Fail(std::strerror(errno));
  // Only a regular file (or nothing) is replaced: a directory or a device at the path
  // since the check is refused here too.
  struct stat st;
  if (::stat(path_.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    return Fail(absl::StrCat("it is ", KindOf(st.st_mode), " now"));
  }
  if (std::rename(temporary_.c_str(), path_.c_str()) != 0) return Fail(std::strerror(errno));
  temporary_.clear();
  return absl::OkStatus();
}

absl::Status WriteFileAtomically(const std::string& path, std::string_view text,
                                 const std::string& who) {
  absl::StatusOr<AtomicFile> file = AtomicFile::Create(path, who);
  if (!file.ok()) return file.status();
  if (absl::Status s = file->Write(text.data(), int64_t(text.size())); !s.ok()) return s;
  return file->Commit();
}

}  // namespace tally
