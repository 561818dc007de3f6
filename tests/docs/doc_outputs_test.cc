// The docs cannot go stale: every quoted output in README.md and docs/*.md (a fenced
// block with no language; drawings are ```text) is preceded by a line that says where it comes from, either
//
//   <!-- doctest: COMMAND -->     run here, and each quoted line found in its output, or
//   <!-- not re-run: REASON -->   a figure of a host's clock, or a run too long for a test.
//
// A doctest runs COMMAND with bash in a fresh folder that holds a link to every entry of
// the source tree and `build` to the build tree, as a user types it from the repository
// root. Each non-empty quoted line must match one line of the output, in order: the
// quoted line cut at each "…" into pieces, the output line must start with the first and
// hold the others after it in order; a quoted line that is "..." or "…" alone stands for
// lines left out. So a quote elides what changes from run to run (times) with "…".
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace tally {
namespace {

namespace fs = std::filesystem;

constexpr char kDoctest[] = "<!-- doctest: ";
constexpr char kNotRerun[] = "<!-- not re-run: ";
constexpr char kElision[] = "\u2026";  // …

struct Quote {
  std::string file;  // relative to the source tree
  int line = 0;      // of the opening fence, from 1
  std::string marker;  // the line before it ("" if none)
  std::vector<std::string> lines;
};

// A quote by where it is, in test names and messages.
void PrintTo(const Quote& q, std::ostream* os) { *os << q.file << ":" << q.line; }

bool StartsWith(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

// Every fenced block without a language in `file`.
std::vector<Quote> QuotesIn(const std::string& file) {
  std::ifstream in(fs::path(TALLY_SOURCE_DIR) / file);
  std::vector<Quote> quotes;
  std::string line, previous;
  bool open = false, output = false;
  Quote quote;
  for (int n = 1; std::getline(in, line); ++n) {
    if (StartsWith(line, "```")) {
      if (!open) {
        open = true;
        output = line == "```";  // a drawing (the tree) is ```text
        quote = Quote{file, n, previous, {}};
      } else {
        open = false;
        if (output) quotes.push_back(quote);
      }
      continue;
    }
    if (open && output) quote.lines.push_back(line);
    if (!open && !line.empty()) previous = line;
  }
  return quotes;
}

std::vector<Quote> AllQuotes() {
  std::vector<std::string> files = {"README.md"};
  const fs::path docs = fs::path(TALLY_SOURCE_DIR) / "docs";
  if (fs::exists(docs)) {
    std::vector<std::string> pages;
    for (const auto& entry : fs::directory_iterator(docs)) {
      if (entry.path().extension() == ".md") pages.push_back("docs/" + entry.path().filename().string());
    }
    std::sort(pages.begin(), pages.end());
    files.insert(files.end(), pages.begin(), pages.end());
  }
  std::vector<Quote> all;
  for (const std::string& file : files) {
    for (Quote& q : QuotesIn(file)) all.push_back(std::move(q));
  }
  return all;
}

std::string Command(const Quote& q) {
  if (!StartsWith(q.marker, kDoctest)) return "";
  std::string command = q.marker.substr(sizeof(kDoctest) - 1);
  const size_t end = command.rfind(" -->");
  return end == std::string::npos ? "" : command.substr(0, end);
}

// Whether output line `out` matches quoted line `quoted` (see the top).
bool Matches(const std::string& quoted, const std::string& out) {
  size_t at = 0, from = 0;
  bool first = true;
  while (true) {
    const size_t cut = quoted.find(kElision, from);
    const std::string piece = quoted.substr(from, cut == std::string::npos ? std::string::npos : cut - from);
    if (first) {
      if (!StartsWith(out, piece)) return false;
      at = piece.size();
      first = false;
    } else if (!piece.empty()) {
      const size_t found = out.find(piece, at);
      if (found == std::string::npos) return false;
      at = found + piece.size();
    }
    if (cut == std::string::npos) return true;
    from = cut + sizeof(kElision) - 1;
  }
}

// Runs `command` as the docs say a user does: from a folder that looks like the tree.
std::string RunAsUser(const std::string& command, int* exit_code) {
  static int runs = 0;
  const fs::path dir = fs::path(::testing::TempDir()) / ("doctest_" + std::to_string(getpid()) + "_" +
                                                          std::to_string(runs++));
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const auto& entry : fs::directory_iterator(TALLY_SOURCE_DIR)) {
    const std::string name = entry.path().filename().string();
    if (name == "build" || name[0] == '.') continue;
    fs::create_symlink(entry.path(), dir / name);
  }
  fs::create_symlink(TALLY_BINARY_DIR, dir / "build");
  const std::string full = "cd '" + dir.string() + "' && (" + command + ") 2>&1";
  FILE* pipe = popen(full.c_str(), "r");
  std::string output;
  if (pipe == nullptr) return output;
  std::array<char, 4096> buffer;
  size_t n;
  while ((n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0) output.append(buffer.data(), n);
  const int status = pclose(pipe);
  *exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  fs::remove_all(dir);
  return output;
}

TEST(DocOutputs, EveryQuotedOutputSaysWhereItComesFrom) {
  const std::vector<Quote> quotes = AllQuotes();
  EXPECT_GE(quotes.size(), 20u);
  for (const Quote& q : quotes) {
    const bool doctest = !Command(q).empty();
    const bool not_rerun = StartsWith(q.marker, kNotRerun) && q.marker.size() > sizeof(kNotRerun) + 4;
    EXPECT_TRUE(doctest || not_rerun)
        << q.file << ":" << q.line << ": a quoted output needs '" << kDoctest
        << "COMMAND -->' or '" << kNotRerun << "REASON -->' on the line before it; it has '"
        << q.marker << "'";
  }
}

class DocOutput : public ::testing::TestWithParam<Quote> {};

TEST_P(DocOutput, IsWhatItsCommandPrints) {
  const Quote& q = GetParam();
  int exit_code = -1;
  const std::string output = RunAsUser(Command(q), &exit_code);
  std::vector<std::string> lines;
  std::stringstream stream(output);
  for (std::string line; std::getline(stream, line);) lines.push_back(line);
  size_t next = 0;
  for (const std::string& quoted : q.lines) {
    if (quoted.empty() || quoted == "..." || quoted == kElision) continue;
    size_t at = next;
    while (at < lines.size() && !Matches(quoted, lines[at])) ++at;
    ASSERT_LT(at, lines.size()) << q.file << ":" << q.line << ": `" << Command(q)
                                << "` (exit code " << exit_code << ") printed no line after line "
                                << next << " that matches\n  " << quoted << "\nits output:\n"
                                << output;
    next = at + 1;
  }
}

std::vector<Quote> Doctests() {
  std::vector<Quote> out;
  for (const Quote& q : AllQuotes()) {
    if (!Command(q).empty()) out.push_back(q);
  }
  return out;
}

std::string QuoteName(const ::testing::TestParamInfo<Quote>& info) {
  std::string name = info.param.file + "_" + std::to_string(info.param.line);
  for (char& c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return name;
}

INSTANTIATE_TEST_SUITE_P(Docs, DocOutput, ::testing::ValuesIn(Doctests()), QuoteName);

// Every link from one page to another ("[x](docs/report.md)", "[x](planner.md)") lands on
// a page that exists.
TEST(DocOutputs, EveryLinkBetweenPagesLands) {
  std::vector<std::string> files = {"README.md"};
  for (const auto& entry : fs::directory_iterator(fs::path(TALLY_SOURCE_DIR) / "docs")) {
    if (entry.path().extension() == ".md") files.push_back("docs/" + entry.path().filename().string());
  }
  const std::regex link("\\]\\(([A-Za-z0-9_./-]+\\.md)(#[^)]*)?\\)");
  int links = 0;
  for (const std::string& file : files) {
    std::ifstream in(fs::path(TALLY_SOURCE_DIR) / file);
    std::stringstream text;
    text << in.rdbuf();
    const std::string all = text.str();
    for (std::sregex_iterator it(all.begin(), all.end(), link), end; it != end; ++it) {
      const fs::path target = (fs::path(TALLY_SOURCE_DIR) / file).parent_path() / (*it)[1].str();
      EXPECT_TRUE(fs::exists(target)) << file << " links to " << (*it)[1] << ", which does not exist";
      ++links;
    }
  }
  EXPECT_GE(links, 30);
}

TEST(DocOutputs, ElisionMatchesPiecesInOrder) {
  EXPECT_TRUE(Matches("step 1/2 | loss 5.5 | \u2026 tok/s", "step 1/2 | loss 5.5 | 12.0 ms | 99 tok/s"));
  EXPECT_FALSE(Matches("step 1/2 | loss 5.6 | \u2026", "step 1/2 | loss 5.5 | 12.0 ms"));
  EXPECT_FALSE(Matches("\u2026 b \u2026 a", "a b"));
  EXPECT_TRUE(Matches("exact", "exact and more"));
  EXPECT_FALSE(Matches("exact", " exact"));
}

}  // namespace
}  // namespace tally
