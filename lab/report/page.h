// The report as one self-contained HTML page: inline SVG and CSS, no script, no font or
// file from anywhere else, so that it opens offline and prints.
//
//   tally_train ... --report_html=run.html         one run (its report's JSON, drawn)
//   tally_compare a.json b.json --html=ab.html     the runs side by side
//
// Sections (ids for tools and tests), the answer first: "answer" (per run one bar of the
// bytes a rank sends a step by group, one of the fullest rank's peak memory, one of the
// slowest rank's modelled step, on one axis a chart; the verdicts), "loss" (training and
// validation loss per step, every run on one axis), "config" (the keys that differ; the
// others folded) and "grid" (the ranks drawn a row a stage, shaded by node; the table
// folded) — lab/report/page_first.cc; "traffic" (per group × primitive × phase, the busiest
// rank's bytes as bars: measured, the exact formula's, the seed's, each run beside the
// others, every chart on one axis); "memory" (each rank's peak bytes
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

#include "lab/report/compare.h"

namespace tally::report {

std::string ReportPage(const std::vector<RunReport>& runs, const Comparison& comparison);

}  // namespace tally::report
