// The report page's drawing pieces (lab/report/page.cc): the palette, escaping, byte units,
// the axes of its SVG charts, and the stylesheet their classes (axis, tick, unit, bar,
// formula, swatch) are drawn with.
#pragma once

#include <set>
#include <string>

namespace tally::report::svg {

// Okabe and Ito's colour-blind-safe palette.
inline constexpr char kBlue[] = "#0072B2", kOrange[] = "#E69F00", kGreen[] = "#009E73",
                      kPurple[] = "#CC79A7", kSky[] = "#56B4E9", kVermillion[] = "#D55E00",
                      kYellow[] = "#F0E442", kBlack[] = "#000000", kGrey[] = "#999999";

// One colour per group, the same in every chart.
std::string GroupColour(const std::string& group);
// `text` with &, <, > and " as entities: safe inside elements and attribute values.
std::string Escape(const std::string& text);

// The unit an axis up to `max` bytes is labelled in.
struct Unit {
  const char* name;
  double bytes;
};
Unit UnitFor(double max);
// "1.5 MiB (1572864 B)", or "512 B".
std::string Bytes(double v);
// The axis's end: the smallest 1, 2 or 5 × 10^k at least `max` (in the axis's unit).
double NiceMax(double max);
std::string TickLabel(double v);

// A horizontal axis at y from x0 to x0 + width for values 0..end, `unit` after its label.
std::string HorizontalAxis(double x0, double y, double width, double end, const std::string& unit);
// A vertical axis at x from y0 (value 0) up to y0 - height (value `end`).
std::string VerticalAxis(double x, double y0, double height, double end, const std::string& unit);
// An <svg> element of the size, `label` its accessible name.
std::string Svg(double width, double height, const std::string& label, const std::string& body);
// Hatch patterns in a group's colour (the formula's bars), defined once per page.
std::string Patterns(const std::set<std::string>& colours);

// The page's stylesheet.
inline constexpr char kStyle[] = R"~(
body { font-family: sans-serif; color: #222222; margin: 24px; max-width: 1400px; }
h1 { font-size: 22px; } h2 { font-size: 18px; border-bottom: 1px solid #cccccc; }
h3 { font-size: 14px; margin: 4px 0; }
table { border-collapse: collapse; font-size: 12px; margin: 6px 0; }
td, th { border: 1px solid #cccccc; padding: 2px 8px; text-align: left; }
tr.differs td { background: #fff4d6; font-weight: bold; }
.path { font-weight: normal; color: #666666; }
.side { display: flex; flex-wrap: wrap; gap: 24px; align-items: flex-start; }
.charts { display: flex; flex-wrap: wrap; gap: 12px; }
figure { margin: 6px 0; } figcaption { font-size: 13px; font-weight: bold; }
.note, .legend { font-size: 12px; color: #444444; }
.swatch { display: inline-block; width: 12px; height: 12px; border: 1px solid #555555;
          vertical-align: middle; margin-right: 4px; }
.swatch.line { height: 0; border: 0; border-top: 2px dashed #000000; }
.swatch.hatched { background: repeating-linear-gradient(45deg, #56B4E9 0 3px, #ffffff 3px 6px); }
svg text { font-family: sans-serif; }
.tick { font-size: 10px; fill: #333333; } .unit { font-size: 10px; fill: #333333; }
.label { font-size: 11px; fill: #222222; } .inbar { font-size: 9px; fill: #000000; }
.axis { stroke: #333333; stroke-width: 1; }
.bar.seed { stroke-dasharray: 3 2; stroke-width: 1.5; }
.formula { stroke: #000000; stroke-width: 2; stroke-dasharray: 4 2; }
.defs { position: absolute; }
@media print { body { margin: 0; } section { break-inside: avoid-page; } }
)~";

}  // namespace tally::report::svg
