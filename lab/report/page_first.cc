// The report page's first screen (lab/report/page_sections.h): the answer (bytes a step by
// group, peak memory, the step split and the verdict, one bar a run on shared axes), the
// loss curves, the configuration (the keys that differ; the rest folded) and the grid
// drawn as a picture.
#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "lab/report/page_sections.h"
#include "lab/report/svg.h"

namespace tally::report {
namespace {

using svg::Escape;

// One colour a run, in the curves.
const char* RunColour(size_t run) {
  static const char* kColours[] = {svg::kBlue,   svg::kOrange, svg::kGreen,  svg::kPurple,
                                   svg::kVermillion, svg::kSky, svg::kBlack, svg::kYellow};
  return kColours[run % 8];
}

// A run's name beside its bar: its label, or "run N" where the label is long.
std::string Shown(const Comparison& c, size_t run) {
  return c.labels[run].size() <= 28 ? c.labels[run] : absl::StrCat("run ", run + 1);
}

// A step's phases: a key "group op phase" of one (not set-up, evaluation or checkpoints).
bool OfAStep(const std::string& key) {
  const std::string phase = key.substr(key.rfind(' ') + 1);
  return phase != "setup" && phase != "eval" && phase != "checkpoint";
}

struct Segment {
  std::string name, colour;
  double value = 0;
};

// Horizontal bars, one a run, each stacked from its segments, on one axis for all.
std::string StackedBars(const std::string& title, const std::string& css,
                        const std::vector<std::vector<Segment>>& runs, const Comparison& c,
                        bool bytes, const std::string& unit_ms) {
  double max = 0;
  for (const std::vector<Segment>& run : runs) {
    double sum = 0;
    for (const Segment& s : run) sum += s.value;
    max = std::max(max, sum);
  }
  const svg::Unit unit = bytes ? svg::UnitFor(max) : svg::Unit{"ms", 1};
  const double end = svg::NiceMax(max / unit.bytes);
  const double left = 190, width = 420, bar_h = 18, gap = 6;
  std::string body;
  double y = 8;
  for (size_t i = 0; i < runs.size(); ++i) {
    absl::StrAppendFormat(&body, R"~(<text x="%.1f" y="%.1f" class="label" text-anchor="end">%s</text>)~",
                          left - 6, y + bar_h - 5, Escape(Shown(c, i)));
    double x = left;
    for (const Segment& s : runs[i]) {
      const double w = end > 0 ? width * (s.value / unit.bytes) / end : 0;
      absl::StrAppendFormat(
          &body,
          R"~(<rect class="bar %s" data-run="%s" data-part="%s" data-value="%.6g" x="%.2f" y="%.1f" width="%.2f" height="%.1f" fill="%s"><title>%s · %s: %s</title></rect>)~",
          css, Escape(c.labels[i]), Escape(s.name), s.value, x, y, w, bar_h, s.colour,
          Escape(c.labels[i]), Escape(s.name),
          bytes ? svg::Bytes(s.value) : absl::StrFormat("%.4g %s", s.value, unit_ms));
      x += w;
    }
    y += bar_h + gap;
  }
  body += svg::HorizontalAxis(left, y + 2, width, end, bytes ? unit.name : unit_ms);
  std::string legend = "<p class=\"legend\">";
  std::set<std::string> named;
  for (const std::vector<Segment>& run : runs) {
    for (const Segment& s : run) {
      if (!named.insert(s.name).second) continue;
      absl::StrAppend(&legend, "<span class=\"swatch\" style=\"background:", s.colour,
                      "\"></span>", Escape(s.name), " ");
    }
  }
  return absl::StrCat("<figure class=\"chart ", css, "\"><figcaption>", Escape(title),
                      "</figcaption>", svg::Svg(left + width + 70, y + 26, title, body), legend,
                      "</p></figure>\n");
}

// Per run and group, the busiest rank's bytes a step in the step's phases.
std::vector<std::vector<Segment>> BytesByGroup(const std::vector<RunReport>& runs) {
  std::vector<std::vector<Segment>> out;
  for (const RunReport& run : runs) {
    std::map<std::string, double> most;  // group -> the busiest rank's bytes
    for (const RunReport::Rank& rank : run.ranks) {
      std::map<std::string, double> mine;
      for (const auto& [key, bytes] : rank.sent) {
        if (OfAStep(key)) mine[key.substr(0, key.find(' '))] += double(bytes);
      }
      for (const auto& [group, bytes] : mine) most[group] = std::max(most[group], bytes);
    }
    std::vector<Segment> segments;
    for (const auto& [group, bytes] : most) {
      segments.push_back({group, svg::GroupColour(group), bytes / double(std::max<int64_t>(1, run.steps))});
    }
    out.push_back(std::move(segments));
  }
  return out;
}

// Per run, the fullest rank's peak bytes by category.
std::vector<std::vector<Segment>> FullestMemory(const std::vector<RunReport>& runs) {
  static const std::pair<const char*, const char*> kCategories[] = {
      {"params", svg::kBlue}, {"grads", svg::kOrange}, {"optimizer", svg::kGreen},
      {"activations", svg::kPurple}, {"comm", svg::kSky}};
  std::vector<std::vector<Segment>> out;
  for (const RunReport& run : runs) {
    const RunReport::Rank* fullest = &run.ranks[0];
    for (const RunReport::Rank& rank : run.ranks) {
      auto peak = [](const RunReport::Rank& r) {
        auto it = r.memory.find("peak_total");
        return it == r.memory.end() ? 0 : it->second;
      };
      if (peak(rank) > peak(*fullest)) fullest = &rank;
    }
    std::vector<Segment> segments;
    for (auto [category, colour] : kCategories) {
      auto it = fullest->memory.find(category);
      if (it != fullest->memory.end()) segments.push_back({category, colour, double(it->second)});
    }
    out.push_back(std::move(segments));
  }
  return out;
}

// Per run, the slowest rank's last step on the modelled clock: compute, exposed, idle.
std::vector<std::vector<Segment>> ModelledSplit(const std::vector<RunReport>& runs) {
  std::vector<std::vector<Segment>> out;
  for (const RunReport& run : runs) {
    const RunReport::Rank* slowest = &run.ranks[0];
    auto at = [](const RunReport::Rank& r, const char* part) {
      auto it = r.modelled_time.find(part);
      return it == r.modelled_time.end() ? 0.0 : it->second;
    };
    for (const RunReport::Rank& rank : run.ranks) {
      if (at(rank, "step_ms") > at(*slowest, "step_ms")) slowest = &rank;
    }
    out.push_back({{"compute", svg::kGreen, at(*slowest, "compute_ms")},
                   {"communication exposed", svg::kVermillion, at(*slowest, "comm_exposed_ms")},
                   {"pipeline idle", svg::kGrey, at(*slowest, "idle_ms")}});
  }
  return out;
}

}  // namespace

std::string AnswerSection(const std::vector<RunReport>& runs, const Comparison& c) {
  std::string out =
      "<section id=\"answer\"><h2>The answer</h2><p class=\"note\">One bar a run, on one axis "
      "per chart so that the runs compare: the bytes a rank sends a step, by group (each "
      "group's busiest rank); the fullest rank's peak memory by category; the slowest rank's "
      "last step on the modelled clock.</p><div class=\"side\">";
  out += StackedBars("bytes sent per rank per step, by group", "answer-bytes", BytesByGroup(runs), c,
                     true, "");
  out += StackedBars("peak memory of the fullest rank", "answer-memory", FullestMemory(runs), c, true, "");
  const bool modelled = std::all_of(runs.begin(), runs.end(),
                                    [](const RunReport& r) { return !r.ranks[0].modelled_time.empty(); });
  if (modelled) {
    out += StackedBars("the slowest rank's step, modelled", "answer-time", ModelledSplit(runs), c,
                       false, "ms");
  }
  out += "</div><ul class=\"verdicts\">";
  for (size_t i = 0; i < runs.size(); ++i) {
    absl::StrAppend(&out, "<li><b>", Escape(c.labels[i]), "</b>: ",
                    runs[i].verdict.empty() ? "no verdict in this report" : Escape(runs[i].verdict),
                    "</li>");
  }
  return out + "</ul></section>\n";
}

std::string LossSection(const std::vector<RunReport>& runs, const Comparison& c) {
  double most = 0, last = 1;
  bool any = false;
  for (const RunReport& run : runs) {
    for (size_t k = 0; k < run.losses.size(); ++k) {
      most = std::max(most, run.losses[k]);
      last = std::max(last, double(run.first_step + int64_t(k)));
      any = true;
    }
    for (const auto& [step, loss] : run.val_losses) most = std::max(most, loss), last = std::max(last, step);
  }
  if (!any) return "";
  const double left = 60, top = 16, width = 560, height = 220;
  const double end = svg::NiceMax(most), steps = svg::NiceMax(last);
  auto x = [&](double step) { return left + width * step / steps; };
  auto y = [&](double loss) { return top + height - height * loss / end; };
  std::string body;
  std::string legend = "<p class=\"legend\">";
  for (size_t i = 0; i < runs.size(); ++i) {
    const RunReport& run = runs[i];
    std::string points;
    for (size_t k = 0; k < run.losses.size(); ++k) {
      absl::StrAppendFormat(&points, "%.2f,%.2f ", x(double(run.first_step + int64_t(k))), y(run.losses[k]));
    }
    absl::StrAppendFormat(
        &body,
        R"~(<polyline class="loss" data-run="%s" fill="none" stroke="%s" stroke-width="1.5" points="%s"><title>%s: training loss</title></polyline>)~",
        Escape(c.labels[i]), RunColour(i), points, Escape(c.labels[i]));
    for (const auto& [step, loss] : run.val_losses) {
      absl::StrAppendFormat(
          &body,
          R"~(<circle class="val-loss" data-run="%s" cx="%.2f" cy="%.2f" r="3.5" fill="white" stroke="%s" stroke-width="1.5"><title>%s: validation loss %.4f at step %.0f</title></circle>)~",
          Escape(c.labels[i]), x(step), y(loss), RunColour(i), Escape(c.labels[i]), loss, step);
    }
    absl::StrAppend(&legend, "<span class=\"swatch\" style=\"background:", RunColour(i), "\"></span>",
                    Escape(c.labels[i]), " ");
  }
  body += svg::VerticalAxis(left, top + height, height, end, "loss, nats");
  body += svg::HorizontalAxis(left, top + height, width, steps, "step");
  return absl::StrCat(
      "<section id=\"loss\"><h2>Loss</h2><p class=\"note\">Training loss each step (the line) and "
      "validation loss (the circles): every layout trains the single-rank model, so its curve "
      "lies on the serial run's.</p><figure class=\"chart loss\">",
      svg::Svg(left + width + 60, top + height + 30, "loss per step", body), legend,
      "validation: circles</p></figure></section>\n");
}

std::string ConfigSection(const std::vector<RunReport>& runs, const Comparison& c) {
  std::set<std::string> keys;
  for (const RunReport& run : runs) {
    for (const auto& [key, value] : run.config) keys.insert(key);
  }
  auto value = [](const RunReport& run, const std::string& key) {
    auto it = run.config.find(key);
    return it == run.config.end() ? std::string("-") : it->second;
  };
  // The keys shown unfolded: those that differ, or one run's grid and model.
  static const std::set<std::string> kShape = {"n_layer", "n_embd", "n_head", "params", "world",
                                               "dp", "tp", "pp", "zero", "precision"};
  std::vector<std::string> shown, folded;
  for (const std::string& key : keys) {
    std::set<std::string> values;
    for (const RunReport& run : runs) values.insert(value(run, key));
    const bool show = runs.size() > 1 ? values.size() > 1 : kShape.count(key) > 0;
    (show ? shown : folded).push_back(key);
  }
  auto table = [&](const std::vector<std::string>& list, bool differs) {
    std::string out = "<table class=\"config\"><tr><th>key</th>";
    for (size_t i = 0; i < runs.size(); ++i) {
      absl::StrAppend(&out, "<th>run ", i + 1, ": ", Escape(c.labels[i]), "<br><span class=\"path\">",
                      Escape(c.paths[i]), "</span></th>");
    }
    out += "</tr>";
    for (const std::string& key : list) {
      absl::StrAppend(&out, "<tr", differs ? " class=\"differs\"" : "", "><td>", Escape(key), "</td>");
      for (const RunReport& run : runs) absl::StrAppend(&out, "<td>", Escape(value(run, key)), "</td>");
      out += "</tr>";
    }
    return out + "</table>";
  };
  std::string out = "<section id=\"config\"><h2>Configuration</h2>";
  if (!c.models_differ.empty()) absl::StrAppend(&out, "<p class=\"note\">", Escape(c.models_differ), ".</p>");
  out += table(shown, runs.size() > 1);
  absl::StrAppend(&out, "<details><summary>the other ", folded.size(), " keys",
                  runs.size() > 1 ? " (the same in every run)" : "", "</summary>", table(folded, false),
                  "</details></section>\n");
  return out + GridSection(runs, c);
}

std::string GridSection(const std::vector<RunReport>& runs, const Comparison& c) {
  std::string out =
      "<section id=\"grid\"><h2>The grid</h2><p class=\"note\">A cell a rank, a row a pipeline "
      "stage, in the order of data-parallel replicas then tensor-parallel ranks; the shade is "
      "the node. The tooltip gives each rank's coordinates.</p><div class=\"side\">";
  for (size_t i = 0; i < runs.size(); ++i) {
    const RunReport& run = runs[i];
    int stages = 1;
    for (const RunReport::Rank& k : run.ranks) stages = std::max(stages, k.pp + 1);
    std::vector<std::vector<size_t>> rows(static_cast<size_t>(stages));
    for (size_t r = 0; r < run.ranks.size(); ++r) rows[size_t(run.ranks[r].pp)].push_back(r);
    size_t cols = 1;
    for (auto& row : rows) {
      std::sort(row.begin(), row.end(), [&](size_t a, size_t b) {
        const RunReport::Rank &x = run.ranks[a], &y = run.ranks[b];
        return x.dp != y.dp ? x.dp < y.dp : x.tp < y.tp;
      });
      cols = std::max(cols, row.size());
    }
    const double cell = std::clamp(640.0 / double(cols), 6.0, 26.0);
    std::string body;
    for (size_t s = 0; s < rows.size(); ++s) {
      for (size_t j = 0; j < rows[s].size(); ++j) {
        const size_t r = rows[s][j];
        const RunReport::Rank& k = run.ranks[r];
        absl::StrAppendFormat(
            &body,
            R"~(<rect class="rank" data-rank="%d" x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s" stroke="#555555"><title>rank %d: dp %d, tp %d, pp %d, node %d</title></rect>)~",
            r, 40 + double(j) * cell, 6 + double(s) * cell, cell - 1, cell - 1,
            k.node % 2 == 0 ? "#dde8f5" : "#f5e6cc", r, k.dp, k.tp, k.pp, k.node);
        if (cell >= 18) {
          absl::StrAppendFormat(&body, R"~(<text x="%.1f" y="%.1f" class="inbar" text-anchor="middle">%d</text>)~",
                                40 + double(j) * cell + cell / 2, 6 + double(s) * cell + cell / 2 + 3, r);
        }
      }
      absl::StrAppendFormat(&body, R"~(<text x="34" y="%.1f" class="tick" text-anchor="end">pp %d</text>)~",
                            6 + double(s) * cell + cell / 2 + 3, s);
    }
    std::string ranks = "<table class=\"grid\"><tr><th>rank</th><th>dp</th><th>tp</th><th>pp</th><th>node</th></tr>";
    for (size_t r = 0; r < run.ranks.size(); ++r) {
      const RunReport::Rank& k = run.ranks[r];
      absl::StrAppend(&ranks, "<tr><td>", r, "</td><td>", k.dp, "</td><td>", k.tp, "</td><td>", k.pp,
                      "</td><td>", k.node, "</td></tr>");
    }
    absl::StrAppend(&out, "<div><h3>", Escape(c.labels[i]), "</h3>",
                    svg::Svg(40 + double(cols) * cell + 10, 12 + double(stages) * cell,
                             c.labels[i] + ": the grid", body),
                    "<details><summary>every rank's coordinates</summary>", ranks,
                    "</table></details></div>");
  }
  return out + "</div></section>\n";
}

}  // namespace tally::report
