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

// Horizontal grouped bars; each group's label on its own line above its bars, never cut (the
// picture widens to the longest label). The <svg> carries
// class="chart" and data-chart=`chart_id`, which the Chromium check looks for.
std::string svg_bar_chart(const std::string& chart_id, const std::string& unit,
                          const std::vector<BarGroup>& groups,
                          const std::vector<LegendEntry>& legend);

// One row of a strip plot: every value a dot (e.g. each step time of a run's measured window).
struct StripRow {
  std::string label;
  std::string css_class;  // "base" or "head"
  std::vector<double> values;
};

// A strip plot on one shared axis: one row per run and side, a dot per value in order and a
// tick at the median, so a reader sees the noise that decided a verdict.
std::string svg_strip_chart(const std::string& chart_id, const std::string& unit,
                            const std::vector<StripRow>& rows);

enum class PointMark { kNone, kRegression, kImprovement, kInconclusive };

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
// red, improvement blue, inconclusive grey) and their tooltip.
std::string svg_line_chart(const std::string& chart_id, const std::string& unit,
                           const std::vector<std::string>& x_labels,
                           const std::vector<LineSeries>& series);

}  // namespace shardbench
