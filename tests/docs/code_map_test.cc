// The README's code map is true: every file its "Where each strategy lives" table names
// exists (`a/b.{h,cc}` names two), each row's lines are its files' lines, and the layers
// it calls one-way include nothing of the layers above them.
#include <cctype>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace tally {
namespace {

// The paths in `text`'s `code spans` that name a file of the tree (a folder and a name
// with an extension), each {a,b} alternative on its own.
std::vector<std::string> PathsIn(const std::string& text) {
  std::vector<std::string> paths;
  const std::regex span("`([A-Za-z0-9_./{},-]+)`");
  for (std::sregex_iterator it(text.begin(), text.end(), span), end; it != end; ++it) {
    const std::string path = (*it)[1];
    if (path.find('/') == std::string::npos || path.find("--") == 0) continue;
    const std::regex braces("^(.*)\\{([^}]*)\\}(.*)$");
    std::smatch m;
    if (!std::regex_match(path, m, braces)) {
      if (path.find('.') != std::string::npos) paths.push_back(path);
      continue;
    }
    std::stringstream alternatives(m[2]);
    for (std::string a; std::getline(alternatives, a, ',');) paths.push_back(m[1].str() + a + m[3].str());
  }
  return paths;
}

// The README's "Where each strategy lives" section, up to the next heading ("" without one).
std::string StrategyMap() {
  std::ifstream in(TALLY_SOURCE_DIR "/README.md");
  std::stringstream all;
  all << in.rdbuf();
  const std::string readme = all.str();
  const size_t begin = readme.find("### Where each strategy lives");
  if (begin == std::string::npos) return "";
  return readme.substr(begin, readme.find("\n#", begin + 4) - begin);
}

TEST(CodeMap, EveryPathInWhereEachStrategyLivesExists) {
  const std::string map = StrategyMap();
  ASSERT_FALSE(map.empty()) << "no README.md, or no code map in it";
  const std::vector<std::string> paths = PathsIn(map);
  EXPECT_GE(paths.size(), 40u);
  for (const std::string& path : paths) {
    EXPECT_TRUE(std::filesystem::exists(std::filesystem::path(TALLY_SOURCE_DIR) / path))
        << path << " is named in the README's code map but does not exist";
  }
}

// The code map's rows, each cut into its cells: #, strategy, read first, lines, also.
std::vector<std::vector<std::string>> StrategyRows() {
  std::vector<std::vector<std::string>> rows;
  std::stringstream table(StrategyMap());
  for (std::string line; std::getline(table, line);) {
    if (line.rfind("| ", 0) != 0 || line.rfind("| # |", 0) == 0) continue;
    std::vector<std::string> cells;
    std::stringstream split(line.substr(1));
    for (std::string cell; std::getline(split, cell, '|');) cells.push_back(cell);
    rows.push_back(cells);
  }
  return rows;
}

// Lines in `path`, from the top of the tree.
int64_t LinesOf(const std::string& path) {
  std::ifstream in(std::filesystem::path(TALLY_SOURCE_DIR) / path);
  int64_t lines = 0;
  for (std::string line; std::getline(in, line);) ++lines;
  return lines;
}

// A strategy's "read first" cell names at most three files: each code span that names a
// path counts once (`a.{h,cc}` is one module, `zero{1,2,3}.cc` one stage's file).
TEST(CodeMap, AStrategyIsAtMostThreeFilesToReadFirst) {
  const std::vector<std::vector<std::string>> rows = StrategyRows();
  ASSERT_FALSE(rows.empty()) << "no README.md, or no code map in it";
  for (const std::vector<std::string>& cells : rows) {
    ASSERT_EQ(cells.size(), 5u) << "a row without its five columns: " << cells[0];
    const std::string& read_first = cells[2];
    int files = 0;
    const std::regex span("`([A-Za-z0-9_./{},-]+)`");
    for (std::sregex_iterator it(read_first.begin(), read_first.end(), span), end; it != end;
         ++it) {
      if (!PathsIn((*it)[0]).empty()) ++files;
    }
    EXPECT_GE(files, 1) << cells[1];
    EXPECT_LE(files, 3) << cells[1] << " names " << files << " files to read first";
  }
  EXPECT_GE(rows.size(), 20u);
}

// The reading order's rows are numbered 1, 2, ..., and each row's "lines" are the lines of
// the files it names to read first, counted now (a thousands comma allowed).
TEST(CodeMap, TheReadingOrderCountsItsLines) {
  const std::vector<std::vector<std::string>> rows = StrategyRows();
  ASSERT_FALSE(rows.empty()) << "no README.md, or no code map in it";
  int number = 0;
  for (const std::vector<std::string>& cells : rows) {
    ASSERT_EQ(cells.size(), 5u) << "a row without its five columns: " << cells[0];
    EXPECT_EQ(std::stoi(cells[0]), ++number) << cells[1];
    int64_t lines = 0;
    for (const std::string& path : PathsIn(cells[2])) lines += LinesOf(path);
    std::string stated;
    for (char c : cells[3]) {
      if (std::isdigit(static_cast<unsigned char>(c))) stated += c;
    }
    EXPECT_EQ(std::to_string(lines), stated)
        << cells[1] << ": its files to read first have " << lines << " lines, the README says "
        << cells[3];
  }
}

// The folders that each folder's sources may not include from, lowest first: the runtime
// knows nothing above it, the optimizers and the data nothing of the model, the model
// nothing of parallelism or training, parallelism nothing of training, the training loop
// nothing of the variants plugged into it (extensions/, which register from above) or of
// the analysis, the report nothing of the planner, and no library anything of the programs
// in examples/ (the job, which runs the loop and then the report, is one).
TEST(CodeMap, TheLayersAreOneWay) {
  const std::vector<std::string> order = {
      "core/runtime", "core/optim", "core/data",  "core/model", "core/parallel",
      "core/train",   "extensions", "lab/report", "lab/plan",   "examples"};
  // optim and data are side by side: neither includes the other.
  const std::vector<std::pair<std::string, std::string>> siblings = {{"core/data", "core/optim"}};
  const std::regex include("^#include \"([^\"]+)\"");
  int files = 0;
  for (size_t level = 0; level + 1 < order.size(); ++level) {
    const std::string& folder = order[level];
    std::vector<std::string> above;
    for (size_t k = level + 1; k < order.size(); ++k) above.push_back(order[k] + "/");
    for (const auto& [low, high] : siblings) {
      if (folder == low) above.push_back(high + "/");
    }
    const std::filesystem::path root = std::filesystem::path(TALLY_SOURCE_DIR) / folder;
    for (const auto& entry : std::filesystem::recursive_directory_iterator(root)) {
      const std::string name = entry.path().lexically_relative(root).string();
      const std::string ext = entry.path().extension().string();
      if (ext != ".h" && ext != ".cc" && ext != ".cu") continue;
      ++files;
      std::ifstream in(entry.path());
      std::smatch m;
      for (std::string line; std::getline(in, line);) {
        if (!std::regex_search(line, m, include)) continue;
        for (const std::string& prefix : above) {
          EXPECT_NE(m[1].str().rfind(prefix, 0), 0u)
              << folder << "/" << name << " includes " << m[1] << ", a layer above it";
        }
      }
    }
  }
  EXPECT_GE(files, 200);
}

// The stores a reader studies (data parallelism's replica and every file of ZeRO) and the
// trainer that makes them name no variant in a line of code: the variants plug in at the
// seams (core/parallel/seams.h) from extensions/. Comments may point to them.
TEST(CodeMap, TheStoresNameNoVariant) {
  std::vector<std::string> core = {
      "core/parallel/data_parallel.h", "core/parallel/data_parallel.cc", "core/parallel/seams.h",
      "core/train/trainer.cc",         "core/train/parallelize.cc",      "core/train/extensions.h",
      "core/train/extensions.cc"};
  const std::filesystem::path root(TALLY_SOURCE_DIR);
  for (const auto& entry : std::filesystem::directory_iterator(root / "core/parallel/zero")) {
    core.push_back(entry.path().lexically_relative(root).string());
  }
  EXPECT_GE(core.size(), 15u);
  const std::regex variant("qwz|qgz|hpz|hsdp|powersgd|power_sgd|onebit|one_bit|quantiz|replicas",
                           std::regex::icase);
  for (const std::string& path : core) {
    std::ifstream in(root / path);
    ASSERT_TRUE(in.good()) << path;
    int number = 0;
    for (std::string line; std::getline(in, line);) {
      ++number;
      const std::string code = line.substr(0, line.find("//"));
      EXPECT_FALSE(std::regex_search(code, variant)) << path << ":" << number << ": " << line;
    }
  }
}

TEST(CodeMap, PathsExpandBraces) {
  EXPECT_EQ(PathsIn("`core/parallel/zero/zero.{h,cc}` and `--dp` and `x.h`"),
            (std::vector<std::string>{"core/parallel/zero/zero.h", "core/parallel/zero/zero.cc"}));
}

}  // namespace
}  // namespace tally
