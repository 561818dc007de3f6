// The report page's sections (lab/report/page.h draws them in order). The first screen,
// lab/report/page_first.cc: "answer" (bytes a step by group, peak memory, the step split and
// the verdict, one bar a run on shared axes), "loss" (the loss curves), "config" (the keys
// that differ, the rest folded) and "grid" (the ranks drawn by stage, replica and node).
#pragma once

#include <string>
#include <vector>

#include "lab/report/compare.h"

namespace tally::report {

std::string AnswerSection(const std::vector<RunReport>& runs, const Comparison& c);
// "" where no run has a loss (dry runs).
std::string LossSection(const std::vector<RunReport>& runs, const Comparison& c);
// With the grid's section after it.
std::string ConfigSection(const std::vector<RunReport>& runs, const Comparison& c);
std::string GridSection(const std::vector<RunReport>& runs, const Comparison& c);

}  // namespace tally::report
