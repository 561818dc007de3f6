// Files: inputs are regular files, outputs replace nothing but a regular file, whole or
// not at all, under temporary names of their own; safetensors files are read strictly.
#include "core/runtime/files.h"

#include <dirent.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_replace.h"
#include "gtest/gtest.h"
#include "core/runtime/json_reader.h"
#include "core/runtime/safetensors.h"

namespace tally {
namespace {

std::string FreshDirectory(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/" + name;
  std::system(("rm -rf '" + dir + "' && mkdir -p '" + dir + "'").c_str());
  return dir;
}

std::vector<std::string> Entries(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = opendir(dir.c_str());
  for (dirent* e = d != nullptr ? readdir(d) : nullptr; e != nullptr; e = readdir(d)) {
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) names.push_back(e->d_name);
  }
  if (d != nullptr) closedir(d);
  return names;
}

std::string Contents(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

TEST(Files, InputsMustBeRegularFilesOfABoundedSize) {
  const std::string dir = FreshDirectory("inputs");
  const std::string file = dir + "/data.txt";
  std::ofstream(file) << "12345";
  EXPECT_EQ(CheckInputFile(file, "[data]", 5).value(), 5);
  EXPECT_TRUE(absl::StrContains(CheckInputFile(file, "[data]", 4).status().message(),
                                "is 5 bytes, more than the 4 this run can read"));
  EXPECT_TRUE(absl::StrContains(CheckInputFile(dir, "[data]", 100).status().message(), "is a directory"));
  EXPECT_TRUE(absl::StrContains(CheckInputFile("/dev/null", "[data]", 100).status().message(),
                                "is a character device"));
  EXPECT_TRUE(absl::StrContains(CheckInputFile(dir + "/none", "[data]", 100).status().message(),
                                "[data] cannot open"));
}

TEST(Files, TwoWritersOfOnePathNeverShareATemporaryFile) {
  const std::string dir = FreshDirectory("writers");
  const std::string path = dir + "/out.json";
  AtomicFile a = AtomicFile::Create(path, "[a]").value();
  AtomicFile b = AtomicFile::Create(path, "[b]").value();
  EXPECT_EQ(Entries(dir).size(), 2u);  // two temporary files, the path not yet there
  ASSERT_TRUE(a.Write("first", 5).ok());
  ASSERT_TRUE(b.Write("second", 6).ok());
  ASSERT_TRUE(a.Commit().ok());
  EXPECT_EQ(Contents(path), "first");
  ASSERT_TRUE(b.Commit().ok());
  EXPECT_EQ(Contents(path), "second");  // whole, never interleaved
  EXPECT_EQ(Entries(dir), std::vector<std::string>{"out.json"});
}

TEST(Files, AnUncommittedOrFailedWriteLeavesNothingBehind) {
  const std::string dir = FreshDirectory("failures");
  const std::string path = dir + "/out.bin";
  std::ofstream(path) << "old";
  {
    AtomicFile dropped = AtomicFile::Create(path, "[w]").value();
    ASSERT_TRUE(dropped.Write("new", 3).ok());
  }  // destroyed before Commit
  EXPECT_EQ(Contents(path), "old");
  EXPECT_EQ(Entries(dir).size(), 1u);

  // The path became a directory after the check: the rename is refused, the file removed.
  const std::string later = dir + "/later";
  AtomicFile moved = AtomicFile::Create(later, "[w]").value();
  ASSERT_EQ(::mkdir(later.c_str(), 0700), 0);
  absl::Status s = moved.Commit();
  EXPECT_TRUE(absl::StrContains(s.message(), "it is a directory now")) << s;
  EXPECT_EQ(Entries(dir).size(), 2u);  // out.bin and the directory

  // A full disk: the file size limit makes write() fail (EFBIG) as ENOSPC would.
  struct rlimit old;
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = old;
  small.rlim_cur = 1000;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  AtomicFile full = AtomicFile::Create(path, "[w]").value();
  const std::string big(4000, 'x');
  absl::Status failed = full.Write(big.data(), int64_t(big.size()));
  ::setrlimit(RLIMIT_FSIZE, &old);
  std::signal(SIGXFSZ, old_handler);
  EXPECT_TRUE(absl::StrContains(failed.message(), "[w] failed writing")) << failed;
  EXPECT_EQ(Contents(path), "old");
  EXPECT_EQ(Entries(dir).size(), 2u);
}

TEST(Files, OutputsReplaceOnlyRegularFiles) {
  EXPECT_TRUE(absl::StrContains(CheckOutputFile("/dev/null", "[save]").message(),
                                "is a character device; tally writes only regular files"));
  EXPECT_TRUE(absl::StrContains(WriteFileAtomically("/dev/null", "x", "[save]").message(),
                                "is a character device"));
  EXPECT_TRUE(absl::StrContains(CheckOutputFile("/no/dir/x", "[save]").message(), "no directory '/no/dir'"));
  const std::string dir = FreshDirectory("outputs");
  EXPECT_TRUE(CheckOutputFile(dir + "/new.json", "[save]").ok());
  EXPECT_TRUE(Entries(dir).empty());  // the check leaves nothing behind
}

// A name the file system takes, but whose temporary name (+ ".partial.XXXXXX") it does
// not, is refused by the check before any work, not by the write after it.
TEST(Files, TheTemporaryNameMustFitTooBeforeTheWork) {
  const std::string dir = FreshDirectory("long_names");
  const long most = ::pathconf(dir.c_str(), _PC_NAME_MAX);
  ASSERT_GT(most, 20);
  const std::string fits = dir + "/" + std::string(size_t(most) - 15, 'a');
  const std::string too_long = dir + "/" + std::string(size_t(most) - 14, 'a');
  EXPECT_TRUE(CheckOutputFile(fits, "[save]").ok());
  EXPECT_TRUE(WriteFileAtomically(fits, "x", "[save]").ok());
  const absl::Status refused = CheckOutputFile(too_long, "[save]");
  EXPECT_TRUE(absl::StrContains(refused.message(), "ask for a name of at most")) << refused;
  EXPECT_TRUE(absl::StrContains(refused.message(), "[save] cannot write")) << refused;
}

TEST(Json, DuplicateKeysAreRefused) {
  absl::StatusOr<JsonValue> v = ParseJson(R"({"a": 1, "b": 2, "a": 3})");
  EXPECT_TRUE(absl::StrContains(v.status().message(), "duplicate key 'a'")) << v.status();
}

// A safetensors file of two tensors, as tally writes it, then its header edited.
class StrictSafetensors : public ::testing::Test {
 protected:
  void SetUp() override {
    // A file of each test's own: ctest runs the tests of this fixture side by side.
    path_ = ::testing::TempDir() + "/strict_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".safetensors";
    std::vector<float> a = {1, 2, 3, 4}, b = {5, 6};
    ASSERT_TRUE(WriteSafetensors(path_, {{"a", {2, 2}, a.data()}, {"b", {2}, b.data()}}, {{"format", "tally"}}).ok());
    bytes_ = Contents(path_);
    header_ = bytes_.substr(8, size_t(uint8_t(bytes_[0])));
  }
  // The file with its header replaced (the data kept), and what reading it says.
  std::string ReadWithHeader(std::string header, const std::string& extra_data = "") {
    header.append((8 - header.size() % 8) % 8, ' ');
    std::string out(8, '\0');
    for (int i = 0; i < 8; ++i) out[i] = char(uint64_t(header.size()) >> (8 * i));
    out += header + bytes_.substr(8 + header_.size()) + extra_data;
    std::ofstream(path_, std::ios::binary | std::ios::trunc) << out;
    return std::string(ReadSafetensors(path_, 1 << 20).status().message());
  }
  std::string path_, bytes_, header_;
};

TEST_F(StrictSafetensors, TheWrittenFileReadsBack) {
  absl::StatusOr<SafetensorsFile> file = ReadSafetensors(path_, 1 << 20);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->tensors.at("b").data, (std::vector<float>{5, 6}));
  EXPECT_EQ(file->metadata.at("format"), "tally");
}

TEST_F(StrictSafetensors, EveryMalformedHeaderHasItsMessage) {
  auto edit = [&](const std::string& from, const std::string& to) {
    return absl::StrReplaceAll(header_, {{from, to}});
  };
  EXPECT_TRUE(absl::StrContains(ReadWithHeader(edit("[16,24]", "[8,16]")), "overlaps")) << header_;
  EXPECT_TRUE(absl::StrContains(ReadWithHeader(edit("[0,16]", "[0,8]"), ""), "holds 8 bytes, its shape needs 16"));
  EXPECT_TRUE(absl::StrContains(ReadWithHeader(header_, "xxxx"), "4 trailing bytes"));
  EXPECT_TRUE(absl::StrContains(ReadWithHeader(edit("\"b\":", "\"a\":")), "duplicate key 'a'"));
  EXPECT_TRUE(absl::StrContains(ReadWithHeader(edit("\"__metadata__\":{\"format\":\"tally\"},", "")),
                                "has no __metadata__"));
  EXPECT_TRUE(absl::StrContains(ReadWithHeader(edit("\"format\":\"tally\"", "\"format\":7")),
                                "'format' is not a string"));
  EXPECT_TRUE(absl::StrContains(ReadWithHeader(edit("[2,2]", "[2,3]")), "its shape needs 24"));
  EXPECT_TRUE(absl::StrContains(ReadWithHeader(edit("[2,2]", "[4294967296,4294967296]")),
                                "a shape larger than the file"));
  // b's range moved past a gap: [0,16) then [20,28) in 24 bytes of data.
  EXPECT_TRUE(absl::StrContains(ReadWithHeader(edit("[16,24]", "[20,28]"), "zzzz"), "a gap in the tensor data at byte 16"));
  EXPECT_TRUE(absl::StrContains(std::string(ReadSafetensors(path_, 10).status().message()),
                                "more than the 10 this run can read"));
}

}  // namespace
}  // namespace tally
