// Inline SVG charts for the HTML page: no script libraries and no network, so the page opens
// anywhere (a CI artefact, an air-gapped cluster). Colours come from CSS classes the page defines.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace shardbench {

std::string html_escape(const std::string& text);

struct Bar {
  std::string series;     // legend name, e.g. "base"
  std::string css_class;  // e.g. "base", "head"
  std::optional<double> value;
  std::string tooltip;
};

struct BarGroup {
  std::string label;
  std::vector<Bar> bars;
};

struct LegendEntry {
  std::string name;
  std::string css_class;
};

// Horizontal grouped bars (long run names fit on the left). The <svg> carries
// class="chart" and data-chart=`chart_id`, which the Chromium check looks for.
std::string svg_bar_chart(const std::string& chart_id, const std::string& unit,
                          const std::vector<BarGroup>& groups,
                          const std::vector<LegendEntry>& legend);

enum class PointMark { kNone, kRegression, kImprovement, kNoise };

struct LinePoint {
  std::size_t x = 0;  // index into the chart's x labels
  std::optional<double> value;
  PointMark mark = PointMark::kNone;
  std::string tooltip;
};

struct LineSeries {
  std::string name;
  std::vector<LinePoint> points;
};

// One line per series over shared x labels (nightly dates); marked points get a ring (regression
// red, improvement blue, noise grey) and their tooltip.
std::string svg_line_chart(const std::string& chart_id, const std::string& unit,
                           const std::vector<std::string>& x_labels,
                           const std::vector<LineSeries>& series);

}  // namespace shardbench
