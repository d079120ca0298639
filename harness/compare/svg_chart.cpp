#include "harness/compare/svg_chart.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "harness/compare/block_bootstrap.hpp"
#include "harness/compare/text_format.hpp"

namespace shardbench {
namespace {

constexpr int kWidth = 860;
constexpr int kBarLeft = 60;    // bars start here; the series name ("base") sits left of them
constexpr int kLabelLine = 16;  // a group's label line above its bars
constexpr int kCharWidth = 7;   // generous width of one 11px character, to size the picture
constexpr int kBarHeight = 14;
constexpr int kBarGap = 3;
constexpr int kGroupGap = 12;
constexpr int kSeriesColors = 8;  // classes s0..s7 in the page's CSS

std::string num(double x) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.1f", x);
  return buffer;
}

std::string truncate(const std::string& s, std::size_t n) {
  return s.size() <= n ? s : s.substr(0, n - 1) + "\u2026";
}

std::string legend_svg(const std::vector<LegendEntry>& legend, int y, int x) {
  std::ostringstream os;
  for (const LegendEntry& entry : legend) {
    os << "<rect class=\"" << entry.css_class << "\" x=\"" << x << "\" y=\"" << y - 10
       << "\" width=\"12\" height=\"12\"/><text class=\"legend\" x=\"" << x + 16 << "\" y=\"" << y
       << "\">" << html_escape(entry.name) << "</text>";
    x += 24 + static_cast<int>(entry.name.size()) * 7;
  }
  return os.str();
}

}  // namespace

std::string html_escape(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// Labels sit on their own line above their bars, starting at the left edge, and the picture
// widens to the longest label: a long run name is never cut (the old layout right-aligned labels
// into a fixed left margin and lost their beginning).
std::string svg_bar_chart(const std::string& chart_id, const std::string& unit,
                          const std::vector<BarGroup>& groups,
                          const std::vector<LegendEntry>& legend) {
  double max_value = 0;
  std::size_t bar_count = 0;
  std::size_t longest_label = 0;
  for (const BarGroup& g : groups) {
    longest_label = std::max(longest_label, g.label.size());
    for (const Bar& b : g.bars) {
      if (b.value) max_value = std::max(max_value, *b.value);
      ++bar_count;
    }
  }
  if (max_value <= 0) max_value = 1;
  const int width = std::max(kWidth, kBarLeft + static_cast<int>(longest_label) * kCharWidth + 16);
  const int top = 28;
  const int height = top + static_cast<int>(bar_count) * (kBarHeight + kBarGap) +
                     static_cast<int>(groups.size()) * (kGroupGap + kLabelLine) + 24;
  const double plot_width = kWidth - kBarLeft - 110;
  std::ostringstream os;
  os << "<svg class=\"chart\" data-chart=\"" << html_escape(chart_id) << "\" role=\"img\" "
     << "aria-label=\"" << html_escape(chart_id) << "\" xmlns=\"http://www.w3.org/2000/svg\" "
     << "viewBox=\"0 0 " << width << " " << height << "\" width=\"" << width << "\" height=\""
     << height << "\">";
  os << legend_svg(legend, 16, kBarLeft);
  int y = top;
  for (const BarGroup& g : groups) {
    os << "<text class=\"label\" x=\"" << kBarLeft << "\" y=\"" << y + kLabelLine - 4 << "\">"
       << html_escape(g.label) << "</text>";
    y += kLabelLine;
    for (const Bar& b : g.bars) {
      const double w = b.value ? std::max(1.0, *b.value / max_value * plot_width) : 0;
      os << "<g><title>"
         << html_escape(b.series + ": " + format_metric_value(b.value, unit) +
                        (b.tooltip.empty() ? "" : " (" + b.tooltip + ")"))
         << "</title>";
      os << "<text class=\"series\" x=\"" << kBarLeft - 6 << "\" y=\"" << y + kBarHeight - 3
         << "\" text-anchor=\"end\">" << html_escape(b.series) << "</text>";
      if (b.value) {
        os << "<rect class=\"" << b.css_class << "\" x=\"" << kBarLeft << "\" y=\"" << y
           << "\" width=\"" << num(w) << "\" height=\"" << kBarHeight << "\"/>";
      }
      os << "<text class=\"value\" x=\"" << num(kBarLeft + w + 4) << "\" y=\"" << y + kBarHeight - 3
         << "\">" << html_escape(b.value ? format_significant_fixed(*b.value) : "n/a")
         << "</text></g>";
      y += kBarHeight + kBarGap;
    }
    y += kGroupGap;
  }
  os << "<line class=\"axis\" x1=\"" << kBarLeft << "\" y1=\"" << top - 4 << "\" x2=\"" << kBarLeft
     << "\" y2=\"" << y - kGroupGap << "\"/>";
  os << "<text class=\"unit\" x=\"" << kBarLeft << "\" y=\"" << y + 8 << "\">" << html_escape(unit)
     << "</text></svg>";
  return os.str();
}

std::string svg_strip_chart(const std::string& chart_id, const std::string& unit,
                            const std::vector<StripRow>& rows) {
  double lo = INFINITY, hi = -INFINITY;
  std::size_t longest_label = 0;
  for (const StripRow& r : rows) {
    longest_label = std::max(longest_label, r.label.size());
    for (double v : r.values) {
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
  }
  if (!std::isfinite(lo)) lo = 0, hi = 1;
  if (hi - lo < 1e-12 * std::max(1.0, std::abs(hi))) {
    lo -= std::max(std::abs(lo) * 0.05, 1e-9);
    hi += std::max(std::abs(hi) * 0.05, 1e-9);
  }
  const int left = 60, right = 40, top = 10, row_height = 34;
  const int width = std::max(kWidth, left + static_cast<int>(longest_label) * kCharWidth + 16);
  const double plot_width = kWidth - left - right;
  const int height = top + static_cast<int>(rows.size()) * row_height + 30;
  auto x_of = [&](double v) { return left + plot_width * (v - lo) / (hi - lo); };
  std::ostringstream os;
  os << "<svg class=\"chart strip\" data-chart=\"" << html_escape(chart_id) << "\" role=\"img\" "
     << "aria-label=\"" << html_escape(chart_id) << "\" xmlns=\"http://www.w3.org/2000/svg\" "
     << "viewBox=\"0 0 " << width << " " << height << "\" width=\"" << width << "\" height=\""
     << height << "\">";
  int y = top;
  for (const StripRow& r : rows) {
    os << "<text class=\"label\" x=\"" << left << "\" y=\"" << y + 10 << "\">"
       << html_escape(r.label) << "</text>";
    const int cy = y + 22;
    os << "<line class=\"grid\" x1=\"" << left << "\" y1=\"" << cy << "\" x2=\"" << kWidth - right
       << "\" y2=\"" << cy << "\"/>";
    // Each step a dot, in step order; the median a vertical tick.
    for (std::size_t i = 0; i < r.values.size(); ++i) {
      os << "<circle class=\"step " << r.css_class << "\" cx=\"" << num(x_of(r.values[i]))
         << "\" cy=\"" << cy << "\" r=\"3\"><title>step " << i + 1
         << " of the window: " << html_escape(format_metric_value(r.values[i], unit))
         << "</title></circle>";
    }
    if (!r.values.empty()) {
      const double median = median_of(r.values);
      os << "<path class=\"median\" d=\"M" << num(x_of(median)) << " " << cy - 8 << " L"
         << num(x_of(median)) << " " << cy + 8 << "\"><title>median "
         << html_escape(format_metric_value(median, unit)) << "</title></path>";
    }
    y += row_height;
  }
  for (int tick = 0; tick <= 4; ++tick) {
    const double v = lo + (hi - lo) * tick / 4.0;
    os << "<text class=\"tick\" x=\"" << num(x_of(v)) << "\" y=\"" << y + 14
       << "\" text-anchor=\"middle\">" << html_escape(format_significant_fixed(v, 3)) << "</text>";
  }
  os << "<text class=\"unit\" x=\"4\" y=\"" << y + 14 << "\">" << html_escape(unit)
     << "</text></svg>";
  return os.str();
}

std::string svg_line_chart(const std::string& chart_id, const std::string& unit,
                           const std::vector<std::string>& x_labels,
                           const std::vector<LineSeries>& series) {
  double lo = INFINITY, hi = -INFINITY;
  for (const LineSeries& s : series) {
    for (const LinePoint& p : s.points) {
      if (!p.value) continue;
      lo = std::min(lo, *p.value);
      hi = std::max(hi, *p.value);
    }
  }
  if (!std::isfinite(lo)) lo = 0, hi = 1;
  if (hi - lo < 1e-12 * std::max(1.0, std::abs(hi))) {
    lo -= std::max(std::abs(lo) * 0.05, 1e-9);
    hi += std::max(std::abs(hi) * 0.05, 1e-9);
  }
  const double pad = (hi - lo) * 0.1;
  lo -= pad;
  hi += pad;
  const int left = 80, right = 70, top = 20, plot_height = 180;
  const int legend_rows = static_cast<int>(series.size());
  const int height = top + plot_height + 40 + legend_rows * 16 + 8;
  const double plot_width = kWidth - left - right;
  const std::size_t n = std::max<std::size_t>(x_labels.size(), 1);
  auto x_of = [&](std::size_t i) {
    return n == 1 ? left + plot_width / 2
                  : left + plot_width * static_cast<double>(i) / static_cast<double>(n - 1);
  };
  auto y_of = [&](double v) { return top + plot_height * (1 - (v - lo) / (hi - lo)); };

  std::ostringstream os;
  os << "<svg class=\"chart\" data-chart=\"" << html_escape(chart_id) << "\" role=\"img\" "
     << "aria-label=\"" << html_escape(chart_id) << "\" xmlns=\"http://www.w3.org/2000/svg\" "
     << "viewBox=\"0 0 " << kWidth << " " << height << "\" width=\"" << kWidth << "\" height=\""
     << height << "\">";
  for (int tick = 0; tick <= 4; ++tick) {
    const double v = lo + (hi - lo) * tick / 4.0;
    const double y = y_of(v);
    os << "<line class=\"grid\" x1=\"" << left << "\" y1=\"" << num(y) << "\" x2=\""
       << kWidth - right << "\" y2=\"" << num(y) << "\"/><text class=\"tick\" x=\"" << left - 6
       << "\" y=\"" << num(y + 4) << "\" text-anchor=\"end\">"
       << html_escape(format_significant_fixed(v, 3)) << "</text>";
  }
  const std::size_t label_step = std::max<std::size_t>(1, x_labels.size() / 8);
  for (std::size_t i = 0; i < x_labels.size(); i += label_step) {
    os << "<text class=\"tick\" x=\"" << num(x_of(i)) << "\" y=\"" << top + plot_height + 16
       << "\" text-anchor=\"middle\">" << html_escape(truncate(x_labels[i], 20)) << "</text>";
  }
  for (std::size_t s = 0; s < series.size(); ++s) {
    const std::string cls = "s" + std::to_string(s % kSeriesColors);
    std::string path;
    for (const LinePoint& p : series[s].points) {
      if (!p.value) continue;
      path += (path.empty() ? "M" : " L") + num(x_of(p.x)) + " " + num(y_of(*p.value));
    }
    os << "<path class=\"line " << cls << "\" d=\"" << path << "\"/>";
    for (const LinePoint& p : series[s].points) {
      if (!p.value) continue;
      const char* mark = p.mark == PointMark::kRegression     ? " mark-regression"
                         : p.mark == PointMark::kImprovement  ? " mark-improvement"
                         : p.mark == PointMark::kInconclusive ? " mark-inconclusive"
                                                              : "";
      os << "<circle class=\"point " << cls << mark << "\" cx=\"" << num(x_of(p.x)) << "\" cy=\""
         << num(y_of(*p.value)) << "\" r=\"" << (*mark ? 6 : 3) << "\"><title>"
         << html_escape(series[s].name + " @ " + (p.x < x_labels.size() ? x_labels[p.x] : "") +
                        ": " + format_metric_value(p.value, unit) +
                        (p.tooltip.empty() ? "" : " - " + p.tooltip))
         << "</title></circle>";
    }
    const int ly = top + plot_height + 36 + static_cast<int>(s) * 16;
    os << "<rect class=\"" << cls << "\" x=\"" << left << "\" y=\"" << ly - 10
       << "\" width=\"12\" height=\"12\"/><text class=\"legend\" x=\"" << left + 16 << "\" y=\""
       << ly << "\">" << html_escape(series[s].name) << "</text>";
  }
  os << "<text class=\"unit\" x=\"4\" y=\"" << top - 6 << "\">" << html_escape(unit)
     << "</text></svg>";
  return os.str();
}

}  // namespace shardbench
