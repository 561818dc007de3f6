#include "lab/report/svg.h"

#include <cmath>
#include <cstdint>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/runtime/comm/ledger/names.h"

namespace tally::report::svg {

std::string GroupColour(const std::string& group) {
  static const std::map<std::string, std::string> kColours = {
      {comm::group::kDp, kBlue},         {comm::group::kTp, kOrange}, {comm::group::kPp, kGreen},
      {comm::group::kEp, kPurple},       {comm::group::kEdp, kSky},   {comm::group::kWorld, kBlack},
      {comm::group::kEmbedding, kYellow}};
  auto it = kColours.find(group);
  return it != kColours.end() ? it->second : kVermillion;
}

std::string Escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

Unit UnitFor(double max) {
  if (max >= double(int64_t(1) << 30)) return {"GiB", double(int64_t(1) << 30)};
  if (max >= double(1 << 20)) return {"MiB", double(1 << 20)};
  if (max >= 1024) return {"KiB", 1024};
  return {"B", 1};
}

std::string Bytes(double v) {
  const Unit u = UnitFor(v);
  if (u.bytes == 1) return absl::StrCat(int64_t(v), " B");
  return absl::StrFormat("%.1f %s (%d B)", v / u.bytes, u.name, int64_t(v));
}

double NiceMax(double max) {
  if (max <= 0) return 1;
  const double p = std::pow(10.0, std::floor(std::log10(max)));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * p >= max * (1 - 1e-12)) return m * p;
  }
  return 10 * p;
}

std::string TickLabel(double v) {
  return std::abs(v - std::round(v)) < 1e-9 ? absl::StrCat(int64_t(std::round(v)))
                                            : absl::StrFormat("%g", v);
}

std::string HorizontalAxis(double x0, double y, double width, double end, const std::string& unit) {
  std::string out = absl::StrFormat(
      R"~(<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" class="axis"/>)~", x0, y, x0 + width, y);
  for (int i = 0; i <= 4; ++i) {
    const double x = x0 + width * i / 4;
    absl::StrAppendFormat(&out,
                          R"~(<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" class="axis"/>)~"
                          R"~(<text x="%.1f" y="%.1f" class="tick" text-anchor="middle">%s</text>)~",
                          x, y, x, y + 4, x, y + 15, TickLabel(end * i / 4));
  }
  absl::StrAppendFormat(&out, R"~(<text x="%.1f" y="%.1f" class="unit">%s</text>)~",
                        x0 + width + 16, y + 15, Escape(unit));
  return out;
}

std::string VerticalAxis(double x, double y0, double height, double end, const std::string& unit) {
  std::string out = absl::StrFormat(
      R"~(<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" class="axis"/>)~", x, y0, x, y0 - height);
  for (int i = 0; i <= 4; ++i) {
    const double y = y0 - height * i / 4;
    absl::StrAppendFormat(&out,
                          R"~(<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" class="axis"/>)~"
                          R"~(<text x="%.1f" y="%.1f" class="tick" text-anchor="end">%s</text>)~",
                          x - 4, y, x, y, x - 6, y + 4, TickLabel(end * i / 4));
  }
  absl::StrAppendFormat(&out, R"~(<text x="%.1f" y="%.1f" class="unit" text-anchor="middle">%s</text>)~",
                        x, y0 - height - 8, Escape(unit));
  return out;
}

std::string Svg(double width, double height, const std::string& label, const std::string& body) {
  return absl::StrFormat(
      R"~(<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" role="img" aria-label="%s">%s</svg>)~",
      width, height, width, height, Escape(label), body);
}

std::string Patterns(const std::set<std::string>& colours) {
  std::string out = R"~(<svg width="0" height="0" class="defs"><defs>)~";
  for (const std::string& c : colours) {
    absl::StrAppendFormat(
        &out,
        R"~(<pattern id="hatch-%s" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><rect width="6" height="6" fill="#ffffff"/><line x1="0" y1="0" x2="0" y2="6" stroke="%s" stroke-width="3"/></pattern>)~",
        c.substr(1), c);
  }
  return out + "</defs></svg>";
}

}  // namespace tally::report::svg
