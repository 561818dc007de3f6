// The report as one self-contained HTML page: inline SVG and CSS, no script, no font or
// file from anywhere else, so that it opens offline and prints.
//
//   tally_train ... --report_html=run.html         one run (its report's JSON, drawn)
//   tally_compare a.json b.json --html=ab.html     the runs side by side
//
// Sections (ids for tools and tests): "config" (the runs' configurations, the keys that
// differ first) and "grid" (each rank's dp/tp/pp coordinates and node); "traffic" (per
// group × primitive × phase, the busiest rank's bytes as bars: measured, the exact
// formula's, the seed's, each run beside the others); "memory" (each rank's peak bytes
// stacked by category, the formula's model states and activations as a line); "time"
// (each rank's step split into compute, exposed and hidden communication, pipeline idle);
// "peers" (bytes from every rank to every rank, a heat map); "pipeline" (the last step's
// forwards and backwards on each rank, from the run's spans).
//
// One colour per group everywhere (Okabe and Ito's palette, told apart by readers with
// any common colour blindness, and by the fill pattern in print: measured solid, formula
// hatched, seed outlined). Every bar's <title> (its tooltip) names its row, run, kind and
// exact bytes; axes say their unit, B, KiB, MiB or GiB as the largest value asks.
#pragma once

#include <string>
#include <vector>

#include "train/compare.h"

namespace tally::train {

std::string ReportPage(const std::vector<RunReport>& runs, const Comparison& comparison);

}  // namespace tally::train
