#include "lab/report/page.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "lab/report/page_sections.h"
#include "lab/report/svg.h"

namespace tally::report {
namespace {

using svg::Bytes;
using svg::Escape;
using svg::GroupColour;
using svg::HorizontalAxis;
using svg::NiceMax;
using svg::Patterns;
using svg::Svg;
using svg::Unit;
using svg::UnitFor;
using svg::VerticalAxis;
using svg::kBlue;
using svg::kGreen;
using svg::kGrey;
using svg::kOrange;
using svg::kPurple;
using svg::kSky;
using svg::kVermillion;

const RunReport::Rank* Busiest(const RunReport& run, const std::map<std::string, int64_t> RunReport::Rank::*field,
                               const std::string& key, int64_t* value) {
  const RunReport::Rank* best = nullptr;
  for (const RunReport::Rank& rank : run.ranks) {
    auto it = (rank.*field).find(key);
    if (it == (rank.*field).end()) continue;
    if (best == nullptr || it->second > *value) {
      best = &rank;
      *value = it->second;
    }
  }
  return best;
}

// The largest bar of any traffic row and run: measured, exact or the seed's.
double LargestTrafficBar(const std::vector<RunReport>& runs, const Comparison& c) {
  double largest = 0;
  for (const Comparison::Row& row : c.rows) {
    if (row.section != "traffic") continue;
    for (size_t i = 0; i < runs.size(); ++i) {
      if (row.cells[i].present) largest = std::max(largest, row.cells[i].max);
      for (auto field : {&RunReport::Rank::exact, &RunReport::Rank::seed}) {
        int64_t v = 0;
        if (Busiest(runs[i], field, row.key, &v) != nullptr) largest = std::max(largest, double(v));
      }
    }
  }
  return largest;
}

// One bar of a traffic row's chart: a run's busiest rank's bytes, by one of three counts.
struct TrafficBar {
  size_t run;
  std::string kind, css;  // "measured", "exact formula" or "seed's formula"; its class
  double value;
};

// The row's bars: each run's measured bytes, its exact formula's and its seed formula's,
// those it has.
std::vector<TrafficBar> TrafficBars(const std::vector<RunReport>& runs,
                                    const Comparison::Row& row) {
  std::vector<TrafficBar> bars;
  for (size_t i = 0; i < runs.size(); ++i) {
    if (row.cells[i].present) bars.push_back({i, "measured", "measured", row.cells[i].max});
    int64_t v = 0;
    if (Busiest(runs[i], &RunReport::Rank::exact, row.key, &v) != nullptr) {
      bars.push_back({i, "exact formula", "exact", double(v)});
    }
    v = 0;
    if (Busiest(runs[i], &RunReport::Rank::seed, row.key, &v) != nullptr) {
      bars.push_back({i, "seed's formula", "seed", double(v)});
    }
  }
  return bars;
}

// Per traffic row, a chart: for each run its busiest rank's bytes, measured, by the exact
// formula and by the seed's.
std::string TrafficSection(const std::vector<RunReport>& runs, const Comparison& c) {
  std::string out =
      R"~(<section id="traffic"><h2>Bytes sent per rank, by group, primitive and phase</h2>)~"
      R"~(<p class="note">Each bar is the busiest rank's bytes over the run: measured by the ledger (solid), by the exact formula (hatched), by the seed article's formula (outlined). The colour is the group's; every chart has the same axis, so that the rows compare (a bar too short to see is a row of few bytes: its tooltip gives them).</p>)~";
  std::set<std::string> colours = {kSky};  // the time charts' hidden communication too
  std::string charts;
  // One axis for every chart, so that sizes compare.
  const double largest = LargestTrafficBar(runs, c);
  const Unit unit = UnitFor(largest);
  const double end = NiceMax(largest / unit.bytes);
  for (const Comparison::Row& row : c.rows) {
    if (row.section != "traffic") continue;
    const std::string group = row.key.substr(0, row.key.find(' '));
    const std::string colour = row.key == "total" ? std::string(kGrey) : GroupColour(group);
    colours.insert(colour);
    const std::vector<TrafficBar> bars = TrafficBars(runs, row);
    const double left = 230, width = 380, bar_h = 14, gap = 4;
    const double height = 28 + bars.size() * (bar_h + gap) + 24;
    std::string body;
    double y = 24;
    for (const TrafficBar& b : bars) {
      const double w = end > 0 ? width * (b.value / unit.bytes) / end : 0;
      const std::string fill = b.css == "measured" ? colour
                               : b.css == "exact"  ? absl::StrCat("url(#hatch-", colour.substr(1), ")")
                                                   : "#ffffff";
      // A long label (many runs, many differences) is "run N" beside the bar; the
      // configuration table's header and the tooltip name it in full.
      const std::string& label = c.labels[b.run];
      const std::string shown = label.size() <= 24 ? label : absl::StrCat("run ", b.run + 1);
      absl::StrAppendFormat(
          &body,
          R"~(<text x="%.1f" y="%.1f" class="label" text-anchor="end">%s · %s</text>)~"
          R"~(<rect class="bar %s" data-row="%s" data-run="%s" data-bytes="%d" x="%.1f" y="%.1f" width="%.2f" height="%.1f" fill="%s" stroke="%s"><title>%s · %s · %s: %s</title></rect>)~",
          left - 6, y + bar_h - 3, Escape(shown), b.kind, b.css, Escape(row.key), Escape(label),
          int64_t(b.value), left, y, std::max(w, 0.5), bar_h, fill, colour, Escape(row.key),
          Escape(label), b.kind, Bytes(b.value));
      y += bar_h + gap;
    }
    body += HorizontalAxis(left, y + 2, width, end, unit.name);
    absl::StrAppend(&charts, "<figure class=\"chart traffic\" data-row=\"", Escape(row.key),
                    "\"><figcaption><span class=\"swatch\" style=\"background:", colour, "\"></span>",
                    Escape(row.key), "</figcaption>",
                    Svg(left + width + 50, height, row.key + ": bytes sent per rank", body),
                    "</figure>\n");
  }
  return out + Patterns(colours) + "<div class=\"charts\">" + charts + "</div></section>\n";
}

// The memory chart's categories, bottom to top, and their colours.
constexpr std::pair<const char*, const char*> kMemoryCategories[] = {{"params", kBlue},
                                                                     {"grads", kOrange},
                                                                     {"optimizer", kGreen},
                                                                     {"activations", kPurple},
                                                                     {"comm", kSky}};

// A rank's formula total: its model states, and its activations where the formula has
// them (-1: no formula).
double FormulaTotal(const RunReport::Rank& rank) {
  const auto& f = rank.memory_formula;
  if (!f.count("params") || !f.count("grads") || !f.count("optimizer")) return -1;
  return double(f.at("params") + f.at("grads") + f.at("optimizer") +
                (f.count("activations") ? f.at("activations") : 0));
}

// Each rank's peak bytes by category, stacked, and the formula's total as a line.
std::string MemoryChart(const RunReport& run, const std::string& label) {
  const auto& kCategories = kMemoryCategories;
  const size_t n = run.ranks.size();
  double max = 0;
  std::vector<double> formula(n, -1);
  for (size_t r = 0; r < n; ++r) {
    double stacked = 0;
    for (auto [category, colour] : kCategories) {
      auto it = run.ranks[r].memory.find(category);
      if (it != run.ranks[r].memory.end()) stacked += double(it->second);
    }
    formula[r] = FormulaTotal(run.ranks[r]);
    max = std::max({max, stacked, formula[r]});
  }
  const Unit unit = UnitFor(max);
  const double end = NiceMax(max / unit.bytes);
  const double bar_w = std::clamp(480.0 / double(std::max<size_t>(n, 1)), 6.0, 28.0);
  const double left = 60, top = 24, height = 200, width = double(n) * bar_w * 1.25;
  std::string body;
  for (size_t r = 0; r < n; ++r) {
    const double x = left + 4 + double(r) * bar_w * 1.25;
    double base = top + height;
    for (auto [category, colour] : kCategories) {
      auto it = run.ranks[r].memory.find(category);
      if (it == run.ranks[r].memory.end()) continue;
      const double h = height * (double(it->second) / unit.bytes) / end;
      base -= h;
      absl::StrAppendFormat(
          &body,
          R"~(<rect class="bar memory" data-rank="%d" data-category="%s" data-bytes="%d" x="%.1f" y="%.2f" width="%.1f" height="%.2f" fill="%s"><title>%s, rank %d: %s peak %s</title></rect>)~",
          r, category, it->second, x, base, bar_w, h, colour, Escape(label), r, category,
          Bytes(double(it->second)));
    }
    if (formula[r] >= 0) {
      const double y = top + height - height * (formula[r] / unit.bytes) / end;
      absl::StrAppendFormat(
          &body,
          R"~(<line class="formula" x1="%.1f" y1="%.2f" x2="%.1f" y2="%.2f"><title>%s, rank %d: formula (params + grads + optimizer%s) %s</title></line>)~",
          x - 2, y, x + bar_w + 2, y, Escape(label), r,
          run.ranks[r].memory_formula.count("activations") ? " + activations" : "",
          Bytes(formula[r]));
    }
    if (n <= 32 || r % 8 == 0) {
      absl::StrAppendFormat(&body, R"~(<text x="%.1f" y="%.1f" class="tick" text-anchor="middle">%d</text>)~",
                            x + bar_w / 2, top + height + 14, r);
    }
  }
  body += VerticalAxis(left, top + height, height, end, unit.name);
  absl::StrAppendFormat(&body, R"~(<text x="%.1f" y="%.1f" class="tick" text-anchor="middle">rank</text>)~",
                        left + width / 2, top + height + 30);
  std::string legend = "<p class=\"legend\">";
  for (auto [category, colour] : kCategories) {
    absl::StrAppend(&legend, "<span class=\"swatch\" style=\"background:", colour, "\"></span>",
                    category, " ");
  }
  legend += "<span class=\"swatch line\"></span>formula</p>";
  return absl::StrCat("<figure class=\"chart memory\"><figcaption>", Escape(label),
                      "</figcaption>", Svg(left + width + 20, top + height + 40,
                                           label + ": memory per rank", body),
                      legend, "</figure>");
}

// Each rank's step on one clock (`clock`: its figures, RunReport::Rank::time or
// modelled_time): compute, exposed communication, pipeline idle (stacked), and the
// communication hidden under compute (hatched inside the compute; measured only).
std::string TimeChart(const RunReport& run, const std::string& label,
                      std::map<std::string, double> RunReport::Rank::*clock, const char* axis) {
  const size_t n = run.ranks.size();
  auto at = [&](size_t r, const char* part) {
    const std::map<std::string, double>& figures = run.ranks[r].*clock;
    auto it = figures.find(part);
    return it == figures.end() ? 0.0 : it->second;
  };
  double max = 0;
  for (size_t r = 0; r < n; ++r) {
    max = std::max(max, at(r, "compute_ms") + at(r, "comm_exposed_ms") + at(r, "idle_ms"));
  }
  const double end = NiceMax(max);
  const double bar_w = std::clamp(480.0 / double(std::max<size_t>(n, 1)), 6.0, 28.0);
  const double left = 60, top = 24, height = 200, width = double(n) * bar_w * 1.25;
  std::string body;
  static const std::pair<const char*, const char*> kParts[] = {
      {"compute_ms", kGreen}, {"comm_exposed_ms", kVermillion}, {"idle_ms", kGrey}};
  for (size_t r = 0; r < n; ++r) {
    const double x = left + 4 + double(r) * bar_w * 1.25;
    double base = top + height;
    for (auto [part, colour] : kParts) {
      const double h = height * at(r, part) / end;
      base -= h;
      absl::StrAppendFormat(
          &body,
          R"~(<rect class="bar time" data-rank="%d" data-part="%s" x="%.1f" y="%.2f" width="%.1f" height="%.2f" fill="%s"><title>%s, rank %d: %s %.3f ms</title></rect>)~",
          r, part, x, base, bar_w, h, colour, Escape(label), r, part, at(r, part));
    }
    const double hidden = height * std::min(at(r, "comm_hidden_ms"), at(r, "compute_ms")) / end;
    if (hidden > 0) {
      absl::StrAppendFormat(
          &body,
          R"~(<rect class="bar time" data-rank="%d" data-part="comm_hidden_ms" x="%.1f" y="%.2f" width="%.1f" height="%.2f" fill="url(#hatch-%s)"><title>%s, rank %d: comm_hidden_ms %.3f ms (within compute)</title></rect>)~",
          r, x + bar_w / 4, top + height - hidden, bar_w / 2, hidden, std::string(kSky).substr(1),
          Escape(label), r, at(r, "comm_hidden_ms"));
    }
    if (n <= 32 || r % 8 == 0) {
      absl::StrAppendFormat(&body, R"~(<text x="%.1f" y="%.1f" class="tick" text-anchor="middle">%d</text>)~",
                            x + bar_w / 2, top + height + 14, r);
    }
  }
  body += VerticalAxis(left, top + height, height, end, axis);
  std::string legend = absl::StrCat(
      "<p class=\"legend\"><span class=\"swatch\" style=\"background:", kGreen,
      "\"></span>compute <span class=\"swatch\" style=\"background:", kVermillion,
      "\"></span>communication exposed <span class=\"swatch\" style=\"background:", kGrey,
      "\"></span>pipeline idle <span class=\"swatch hatched\"></span>communication hidden</p>");
  return absl::StrCat("<figure class=\"chart time\"><figcaption>", Escape(label), "</figcaption>",
                      Svg(left + width + 20, top + height + 30, label + ": " + axis, body),
                      legend, "</figure>");
}
std::string MeasuredTimeChart(const RunReport& run, const std::string& label) {
  return TimeChart(run, label, &RunReport::Rank::time, "ms per step, measured");
}
std::string ModelledTimeChart(const RunReport& run, const std::string& label) {
  return TimeChart(run, label, &RunReport::Rank::modelled_time, "ms of the last step, modelled");
}

// Bytes from every rank (row) to every rank (column), white to blue by the square root of
// the share of the largest cell. Past kPeerCells ranks a side, a cell is a block of ranks
// (the bytes from those ranks to those), so that the page stays small at 4,096 ranks.
constexpr size_t kPeerCells = 64;
std::string PeerChart(const RunReport& run, const std::string& label) {
  const size_t n = run.ranks.size();
  const size_t block = (n + kPeerCells - 1) / kPeerCells, cells = n == 0 ? 0 : (n + block - 1) / block;
  std::vector<double> bytes(cells * cells, 0.0);
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = 0; j < n && j < run.ranks[i].peers.size(); ++j) {
      bytes[(i / block) * cells + j / block] += double(run.ranks[i].peers[j]);
    }
  }
  const double max = bytes.empty() ? 0 : *std::max_element(bytes.begin(), bytes.end());
  // "rank 3", or a block's "ranks 64-127".
  auto ranks = [&](size_t c) {
    const size_t first = c * block, last = std::min(n, first + block) - 1;
    return block == 1 ? absl::StrCat("rank ", first) : absl::StrCat("ranks ", first, "-", last);
  };
  const double cell = std::clamp(480.0 / double(std::max<size_t>(cells, 1)), 3.0, 28.0);
  const double left = 40, top = 30;
  std::string body;
  for (size_t i = 0; i < cells; ++i) {
    for (size_t j = 0; j < cells; ++j) {
      if (block == 1 && j >= run.ranks[i].peers.size()) break;
      const double v = bytes[i * cells + j];
      const double t = max > 0 ? std::sqrt(v / max) : 0;
      // From white (255, 255, 255) toward the palette's blue (0, 114, 178).
      const int red = int(std::lround(255 * (1 - t))), green = int(std::lround(255 - 141 * t)),
                blue = int(std::lround(255 - 77 * t));
      absl::StrAppendFormat(
          &body,
          R"~(<rect class="peer" data-from="%d" data-to="%d" data-bytes="%d" x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="rgb(%d,%d,%d)" stroke="#dddddd" stroke-width="0.5"><title>%s: %s to %s, %s</title></rect>)~",
          i * block, j * block, int64_t(v), left + double(j) * cell, top + double(i) * cell, cell,
          cell, red, green, blue, Escape(label), ranks(i), ranks(j), Bytes(v));
    }
    if (cells <= 32 || i % 8 == 0) {
      absl::StrAppendFormat(&body,
                            R"~(<text x="%.1f" y="%.1f" class="tick" text-anchor="end">%d</text>)~"
                            R"~(<text x="%.1f" y="%.1f" class="tick" text-anchor="middle">%d</text>)~",
                            left - 4, top + (double(i) + 0.7) * cell, i * block,
                            left + (double(i) + 0.5) * cell, top - 6, i * block);
    }
  }
  const double side = double(cells) * cell;
  const std::string unit = block == 1 ? "rank" : absl::StrCat("rank (blocks of ", block, ")");
  absl::StrAppendFormat(&body,
                        R"~(<text x="%.1f" y="%.1f" class="unit" text-anchor="middle">to %s</text>)~"
                        R"~(<text x="%.1f" y="%.1f" class="unit" text-anchor="middle" transform="rotate(-90 %.1f %.1f)">from %s</text>)~",
                        left + side / 2, top + side + 18, unit, 12.0, top + side / 2, 12.0,
                        top + side / 2, unit);
  return absl::StrCat("<figure class=\"chart peers\"><figcaption>", Escape(label), " (largest cell ",
                      Bytes(max), ")</figcaption>",
                      Svg(left + side + 20, top + side + 30, label + ": bytes between ranks", body),
                      "</figure>");
}

// The last step's forwards and backwards on each rank, on one time axis.
std::string PipelineChart(const RunReport& run, const std::string& label) {
  double end_ms = 0;
  for (const RunReport::Rank& rank : run.ranks) {
    for (const auto& s : rank.spans) end_ms = std::max(end_ms, s.end_ms);
  }
  const double end = NiceMax(end_ms);
  const double left = 60, top = 10, row_h = 18, width = 560;
  const size_t n = run.ranks.size();
  std::string body;
  for (size_t r = 0; r < n; ++r) {
    const double y = top + double(r) * (row_h + 4);
    absl::StrAppendFormat(&body, R"~(<text x="%.1f" y="%.1f" class="tick" text-anchor="end">rank %d</text>)~",
                          left - 6, y + row_h - 5, r);
    for (const auto& s : run.ranks[r].spans) {
      const bool forward = s.name.rfind("forward", 0) == 0;
      const double x = left + width * s.start_ms / end, w = width * (s.end_ms - s.start_ms) / end;
      absl::StrAppendFormat(
          &body,
          R"~(<rect class="span" data-rank="%d" x="%.2f" y="%.1f" width="%.2f" height="%.1f" fill="%s" stroke="#ffffff" stroke-width="0.5"><title>%s, rank %d: %s, %.3f to %.3f ms</title></rect>)~",
          r, x, y, std::max(w, 0.5), row_h, forward ? kSky : kVermillion, Escape(label), r,
          Escape(s.name), s.start_ms, s.end_ms);
      if (w > 14) {
        absl::StrAppendFormat(&body, R"~(<text x="%.2f" y="%.1f" class="inbar" text-anchor="middle">%s</text>)~",
                              x + w / 2, y + row_h - 5, Escape(s.name.substr(s.name.find(' ') + 1)));
      }
    }
  }
  const double axis_y = top + double(n) * (row_h + 4) + 2;
  body += HorizontalAxis(left, axis_y, width, end, "ms");
  std::string legend = absl::StrCat("<p class=\"legend\"><span class=\"swatch\" style=\"background:",
                                    kSky, "\"></span>forward <span class=\"swatch\" style=\"background:",
                                    kVermillion, "\"></span>backward (the micro-batch in the bar)</p>");
  return absl::StrCat("<figure class=\"chart pipeline\"><figcaption>", Escape(label),
                      "</figcaption>",
                      Svg(left + width + 40, axis_y + 24, label + ": the last step's schedule", body),
                      legend, "</figure>");
}

template <typename Chart>
std::string SideBySide(const std::vector<RunReport>& runs, const Comparison& c, Chart chart,
                       bool (*has)(const RunReport&)) {
  std::string out = "<div class=\"side\">";
  for (size_t i = 0; i < runs.size(); ++i) {
    out += has(runs[i]) ? chart(runs[i], c.labels[i])
                        : absl::StrCat("<p class=\"note\">", Escape(c.labels[i]), ": not recorded</p>");
  }
  return out + "</div>";
}

}  // namespace

std::string ReportPage(const std::vector<RunReport>& runs, const Comparison& c) {
  const std::string joined = absl::StrJoin(c.labels, " vs ");
  const std::string title =
      runs.size() == 1      ? absl::StrCat("tally report: ", c.labels[0])
      : joined.size() <= 100 ? absl::StrCat("tally comparison: ", joined)
                             : absl::StrCat("tally comparison of ", runs.size(), " runs");
  std::string out = absl::StrCat("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>",
                                 Escape(title), "</title><style>", svg::kStyle, "</style></head><body>\n<h1>",
                                 Escape(title), "</h1>\n");
  std::string steps;
  for (size_t i = 0; i < runs.size(); ++i) {
    absl::StrAppend(&steps, i > 0 ? "; " : "", Escape(c.labels[i]), ": ", runs[i].steps, " steps, ",
                    runs[i].ranks.size(), " ranks");
  }
  absl::StrAppend(&out, "<p class=\"note\">", steps, ". Bytes are over the whole run.</p>\n");
  out += AnswerSection(runs, c);
  out += LossSection(runs, c);
  out += ConfigSection(runs, c);
  out += TrafficSection(runs, c);
  out += "<section id=\"memory\"><h2>Memory per rank</h2><p class=\"note\">Each category's peak "
         "(the categories need not peak at the same moment), and the formula's model states and "
         "activations as a dashed line.</p>";
  out += SideBySide(runs, c, MemoryChart, [](const RunReport&) { return true; });
  out += "</section>\n<section id=\"time\"><h2>Time per step, per rank, measured</h2><p "
         "class=\"note\">This host's wall clock: it follows the host's load (and, with more ranks "
         "than cores, the ranks' turns on them). A dry run has none.</p>";
  out += SideBySide(runs, c, MeasuredTimeChart,
                    [](const RunReport& r) { return !r.ranks[0].time.empty(); });
  out += "</section>\n<section id=\"modelled\"><h2>Time of the last step, per rank, "
         "modelled</h2><p class=\"note\">Each rank's timeline (its FLOPs, calls and bytes) "
         "replayed on the run's modelled cluster: the same on every host. The seed's 30% verdict "
         "is read here.</p>";
  out += SideBySide(runs, c, ModelledTimeChart,
                    [](const RunReport& r) { return !r.ranks[0].modelled_time.empty(); });
  out += "</section>\n<section id=\"peers\"><h2>Bytes between ranks</h2>";
  out += SideBySide(runs, c, PeerChart, [](const RunReport& r) { return !r.ranks[0].peers.empty(); });
  out += "</section>\n<section id=\"pipeline\"><h2>The last step's schedule</h2>";
  out += SideBySide(runs, c, PipelineChart, [](const RunReport& r) {
    return std::any_of(r.ranks.begin(), r.ranks.end(), [](const auto& k) { return !k.spans.empty(); });
  });
  out += "</section>\n</body></html>\n";
  return out;
}

}  // namespace tally::report
