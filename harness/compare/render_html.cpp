// The self-contained HTML page: inline CSS, inline SVG and a few lines of inline script that
// check the charts rendered (the Chromium test reads the result from the DOM).
#include <algorithm>
#include <map>
#include <set>
#include <sstream>

#include "harness/compare/render.hpp"
#include "harness/config/wrapper.hpp"
#include "harness/compare/svg_chart.hpp"
#include "harness/compare/text_format.hpp"

namespace shardbench {
namespace {

constexpr const char* kStyle = R"css(
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 24px; color: #1d2330; }
h1 { font-size: 22px; margin: 0 0 4px; } h2 { font-size: 18px; margin-top: 32px; border-bottom: 1px solid #d8dce4; }
h3 { font-size: 15px; margin: 20px 0 6px; }
.summary { padding: 8px 12px; border-radius: 6px; background: #eef6ee; display: inline-block; }
.summary.failing { background: #fbeaea; }
table { border-collapse: collapse; margin: 6px 0 10px; } th, td { padding: 3px 10px; border-bottom: 1px solid #e5e7ec; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.v-regression, .v-nan, .v-failed, .v-loss_mismatch { color: #b3261e; font-weight: 600; }
.v-improvement { color: #0b63b6; font-weight: 600; } .v-inconclusive { color: #8a6d00; font-weight: 600; } .v-ok { color: #2e7d32; }
.note { color: #555; margin: 2px 0; } code { font-size: 12px; }
svg.chart { display: block; margin: 4px 0 18px; max-width: 100%; height: auto; }
svg text { font: 11px system-ui, sans-serif; fill: #333; } svg text.unit { fill: #777; }
rect.base { fill: #9aa5b8; } rect.head { fill: #2f6fd6; }
line.axis { stroke: #888; } line.grid { stroke: #eceef2; }
path.line { fill: none; stroke-width: 2; } circle.point { stroke: #fff; stroke-width: 1; }
circle.mark-regression { fill: #d32f2f !important; stroke: #7f0000; stroke-width: 2; }
circle.mark-improvement { fill: #1976d2 !important; stroke: #0d3c73; stroke-width: 2; }
circle.mark-inconclusive { stroke: #999; stroke-width: 2; }
circle.step.base { fill: #9aa5b8; fill-opacity: 0.8; } circle.step.head { fill: #2f6fd6; fill-opacity: 0.8; }
path.median { stroke: #1d2330; stroke-width: 2; }
.s0 { fill: #2f6fd6; stroke: #2f6fd6; } .s1 { fill: #e07b00; stroke: #e07b00; } .s2 { fill: #2e9d4b; stroke: #2e9d4b; }
.s3 { fill: #8e44ad; stroke: #8e44ad; } .s4 { fill: #c0392b; stroke: #c0392b; } .s5 { fill: #16a085; stroke: #16a085; }
.s6 { fill: #7f8c8d; stroke: #7f8c8d; } .s7 { fill: #b8860b; stroke: #b8860b; }
path.line.s0, path.line.s1, path.line.s2, path.line.s3, path.line.s4, path.line.s5, path.line.s6, path.line.s7 { fill: none; }
)css";

// Runs after the page is parsed: every chart must have drawn something, or the page reports an
// error on the console (which the Chromium check fails on).
constexpr const char* kCheckScript = R"js(
(function () {
  var charts = document.querySelectorAll('svg.chart');
  var empty = [];
  charts.forEach(function (c) { if (c.querySelectorAll('rect, path, circle').length === 0) empty.push(c.dataset.chart); });
  if (empty.length) { console.error('perf-compare: empty charts: ' + empty.join(', ')); }
  document.body.dataset.charts = String(charts.length);
  document.body.dataset.rendered = empty.length ? 'incomplete' : 'ok';
})();
)js";

// Chart values: bytes are shown in MiB.
std::optional<double> chart_value(const std::optional<double>& v, const std::string& unit) {
  if (!v || unit != "bytes") return v;
  return *v / (1024.0 * 1024.0);
}
std::string chart_unit(const std::string& unit) { return unit == "bytes" ? "MiB" : unit; }

std::string verdict_span(Verdict v) {
  return "<span class=\"v-" + std::string(verdict_name(v)) + "\">" +
         html_escape(verdict_heading(v)) + "</span>";
}

const MetricRow* throughput_row(const PairResult& pair) {
  for (const MetricRow& row : pair.metrics) {
    if (row.gate == Gate::kTiming) return &row;
  }
  return pair.metric("tflops_per_gpu");
}

std::string label_of(const PairResult& pair) {
  return pair.identity.value("recipe", std::string()) + " " + pair.head_runs.front().label + " ws" +
         (pair.identity.contains("world_size") ? pair.identity.at("world_size").dump() : "?");
}

// Bars of one metric for every pair: base and head.
std::string pairs_chart(const std::string& id, const CompareResult& result,
                        const std::string& metric, std::string* title_out) {
  std::vector<BarGroup> groups;
  std::string unit;
  for (const PairResult& pair : result.pairs) {
    const MetricRow* row = metric.empty() ? throughput_row(pair) : pair.metric(metric);
    if (!row || (!row->base && !row->head)) continue;
    unit = row->unit;
    *title_out = row->title;
    groups.push_back(
        {label_of(pair),
         {{"base", "base", chart_value(row->base, row->unit), ""},
          {"head", "head", chart_value(row->head, row->unit),
           format_change(row->relative_change) + ", " + std::string(verdict_name(row->verdict))}}});
  }
  if (groups.empty()) return "";
  return svg_bar_chart(id, chart_unit(unit), groups, {{"base", "base"}, {"head", "head"}});
}

// Scenario = identity without the strategy fields (and the DDP-config fields the strategy's
// override set changes): runs that differ only in DDP vs FSDP.
std::string scenario_of(const PairResult& pair) {
  nlohmann::json id = nlohmann::json::object();
  for (const auto& [field, value] : pair.identity.items()) {
    if (field == "wrapper" || field == "strategy" || field == "distributed_optimizer" ||
        field.rfind("config.ddp.", 0) == 0) {
      continue;
    }
    id[field] = value;
  }
  return id.dump();
}

std::string ddp_vs_fsdp_section(const CompareResult& result) {
  std::map<std::string, std::vector<const PairResult*>> scenarios;
  std::vector<std::string> order;
  for (const PairResult& pair : result.pairs) {
    const std::string s = scenario_of(pair);
    if (!scenarios.contains(s)) order.push_back(s);
    scenarios[s].push_back(&pair);
  }
  std::ostringstream os;
  int index = 0;
  for (const std::string& s : order) {
    std::vector<const PairResult*>& pairs = scenarios[s];
    if (pairs.size() < 2) continue;
    // DDP first: it is the reference the FSDP strategies are read against.
    const auto is_ddp = [](const PairResult* p) {
      return p->identity.value("wrapper", "") == label(Wrapper::kDdp);
    };
    std::stable_sort(pairs.begin(), pairs.end(), [&](const PairResult* a, const PairResult* b) {
      return is_ddp(a) > is_ddp(b);
    });
    const PairResult* ddp = nullptr;
    for (const PairResult* p : pairs) {
      if (is_ddp(p)) ddp = p;
    }
    const PairResult& first = *pairs.front();
    os << "<h3>" << html_escape(first.identity.value("recipe", std::string("?"))) << ", world size "
       << html_escape(first.identity.value("world_size", nlohmann::json()).dump()) << ", "
       << html_escape(first.identity.value("gpu", std::string("?"))) << "</h3>";
    std::vector<std::string> metrics = {""};
    for (const char* m : {"max_alloc_gb", "engine_static_bytes"}) {
      if (first.metric(m)) metrics.push_back(m);
    }
    for (const std::string& metric : metrics) {
      std::vector<BarGroup> groups;
      std::string unit, title;
      for (const PairResult* p : pairs) {
        const MetricRow* row = metric.empty() ? throughput_row(*p) : p->metric(metric);
        if (!row) continue;
        unit = row->unit;
        title = row->title;
        std::string label = p->head_runs.front().label;
        const MetricRow* ddp_row =
            ddp ? (metric.empty() ? throughput_row(*ddp) : ddp->metric(metric)) : nullptr;
        if (ddp && p != ddp && ddp_row && ddp_row->head && row->head && *ddp_row->head != 0) {
          label += " (" + format_change(*row->head / *ddp_row->head - 1) + " vs DDP)";
        }
        groups.push_back({label,
                          {{"base", "base", chart_value(row->base, unit), ""},
                           {"head", "head", chart_value(row->head, unit), ""}}});
      }
      os << "<h4>" << html_escape(title) << "</h4>"
         << svg_bar_chart("ddp-vs-fsdp-" + std::to_string(index) + "-" +
                              (metric.empty() ? "throughput" : metric),
                          chart_unit(unit), groups, {{"base", "base"}, {"head", "head"}});
    }
    ++index;
  }
  if (index == 0) {
    return "<p class=\"note\">No scenario has both a DDP and an FSDP run on both sides.</p>";
  }
  return os.str();
}

PointMark mark_of(const HistoryPoint& p, const std::string& metric) {
  auto it = p.verdicts.find(metric);
  if (it == p.verdicts.end()) return PointMark::kNone;
  switch (it->second) {
    case Verdict::kRegression:
      return PointMark::kRegression;
    case Verdict::kImprovement:
      return PointMark::kImprovement;
    case Verdict::kInconclusive:
      return PointMark::kInconclusive;
    default:
      return PointMark::kNone;
  }
}

std::string history_section(const History& history) {
  std::ostringstream os;
  os << "<p class=\"note\">Reports under <code>" << html_escape(history.folder)
     << "</code>: " << history.sessions.size() << " nightly folders, " << history.series.size()
     << " run identities. Each point is judged against the previous one of the same identity: "
        "red ring = regression, blue = unexpected improvement, grey = inconclusive (too noisy to "
        "tell).</p>";
  std::map<std::string, std::size_t> x_of;
  for (std::size_t i = 0; i < history.sessions.size(); ++i) x_of[history.sessions[i]] = i;
  for (const HistoryMetric& metric : history.metrics) {
    std::vector<LineSeries> lines;
    for (const HistorySeries& s : history.series) {
      LineSeries line{s.name, {}};
      for (const HistoryPoint& p : s.points) {
        auto it = p.values.find(metric.name);
        if (it == p.values.end() || !it->second) continue;
        const PointMark mark = mark_of(p, metric.name);
        std::string tip = p.git_revision.substr(0, 10);
        if (mark != PointMark::kNone)
          tip += " " + std::string(verdict_name(p.verdicts.at(metric.name)));
        line.points.push_back({x_of[p.session], chart_value(it->second, metric.unit), mark, tip});
      }
      if (!line.points.empty()) lines.push_back(std::move(line));
    }
    if (lines.empty()) continue;
    os << "<h3>" << html_escape(metric.title) << "</h3>"
       << svg_line_chart("history-" + metric.name, chart_unit(metric.unit), history.sessions,
                         lines);
  }
  return os.str();
}

std::string pair_table(const PairResult& pair, std::size_t index) {
  std::ostringstream os;
  os << "<h3>" << html_escape(pair.name) << ": " << verdict_span(pair.verdict) << "</h3>";
  os << "<table><tr><th>metric</th><th>base</th><th>head</th><th>change</th><th>"
     << "interval</th><th>verdict</th></tr>";
  for (const MetricRow& row : pair.metrics) {
    const std::string v = row.gate == Gate::kNone ? "" : std::string(verdict_name(row.verdict));
    os << "<tr><td>" << html_escape(row.title) << "</td><td class=\"num\">"
       << html_escape(format_metric_value(row.base, row.unit)) << "</td><td class=\"num\">"
       << html_escape(format_metric_value(row.head, row.unit)) << "</td><td class=\"num\">"
       << html_escape(format_change(row.relative_change)) << "</td><td class=\"num\">"
       << html_escape(format_interval(row.ci_low, row.ci_high)) << "</td><td class=\"v-" << v
       << "\">" << v << "</td></tr>";
  }
  os << "</table><p class=\"note\">" << html_escape(sample_line(pair)) << ".</p>";
  for (const std::string& line : pair.loss_parity) {
    const bool fail = line.rfind("fail", 0) == 0;
    os << "<p class=\"note" << (fail ? " v-loss_mismatch" : "") << "\">loss parity "
       << html_escape(line) << "</p>";
  }
  for (const std::string& note : pair.notes)
    os << "<p class=\"note\">" << html_escape(note) << "</p>";
  // Every step of the measured window, per run and side: the noise behind the verdict.
  std::vector<StripRow> rows;
  auto add = [&](const std::vector<std::vector<double>>& runs, const std::vector<RunRef>& refs,
                 const char* side) {
    for (std::size_t i = 0; i < runs.size(); ++i) {
      if (runs[i].empty()) continue;
      const std::string file = i < refs.size() ? refs[i].file + " [" + refs[i].label + "]" : "";
      rows.push_back(
          {std::string(side) + " " + std::to_string(i + 1) + ": " + file, side, runs[i]});
    }
  };
  add(pair.base_step_ms, pair.base_runs, "base");
  add(pair.head_step_ms, pair.head_runs, "head");
  if (!rows.empty()) {
    os << "<h4>Step times of the measured window (dot = step, tick = median)</h4>"
       << svg_strip_chart("steps-" + std::to_string(index), "ms", rows);
  }
  return os.str();
}

}  // namespace

std::string render_html(const CompareResult& result, const History* history) {
  std::ostringstream os;
  const int exit_code = result.exit_code();
  const bool failing = exit_code == 1;
  const char* headline = failing                          ? "Regression"
                         : exit_code == kExitInconclusive ? "Inconclusive"
                                                          : "No regression";
  os << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
     << "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
     << "<title>shardbench perf-compare</title><style>" << kStyle << "</style></head><body>\n";
  os << "<h1>shardbench perf-compare</h1>";
  os << "<p class=\"summary" << (failing ? " failing" : "") << "\"><b>" << headline
     << "</b>: " << result.pairs.size() << " matched, " << result.count(Verdict::kRegression)
     << " regression, " << result.count(Verdict::kImprovement) << " unexpected improvement, "
     << result.count(Verdict::kInconclusive) << " inconclusive, "
     << result.count(Verdict::kLossMismatch) << " loss mismatch, " << result.count(Verdict::kNan)
     << " NaN loss, " << result.count(Verdict::kFailed) << " failed; unmatched "
     << result.unmatched_base.size() << " base, " << result.unmatched_head.size() << " head; exit "
     << exit_code << "</p>";
  os << "<p class=\"note\">Gate: " << html_escape(describe_thresholds(result.thresholds))
     << "</p>\n";

  os << "<h2>Throughput and memory per strategy</h2>";
  std::string title;
  const std::string throughput = pairs_chart("throughput", result, "", &title);
  if (!throughput.empty()) os << "<h3>" << html_escape(title) << "</h3>" << throughput;
  for (const char* metric : {"max_alloc_gb", "max_reserved_gb", "alloc_gb", "engine_static_bytes",
                             "engine_temporary_peak_bytes"}) {
    const std::string chart = pairs_chart(std::string("memory-") + metric, result, metric, &title);
    if (!chart.empty()) os << "<h3>" << html_escape(title) << "</h3>" << chart;
  }
  os << "\n<h2>DDP vs FSDP side by side</h2>" << ddp_vs_fsdp_section(result);
  if (history) os << "\n<h2>History</h2>" << history_section(*history);

  os << "\n<h2>Details</h2>";
  for (std::size_t i = 0; i < result.pairs.size(); ++i) os << pair_table(result.pairs[i], i);
  if (!result.unmatched_base.empty() || !result.unmatched_head.empty()) {
    os << "<h3>Unmatched runs</h3><ul>";
    for (const UnmatchedRun& u : result.unmatched_base) {
      os << "<li>base only: <code>" << html_escape(u.name) << "</code> (" << html_escape(u.file)
         << ")</li>";
    }
    for (const UnmatchedRun& u : result.unmatched_head) {
      os << "<li>head only: <code>" << html_escape(u.name) << "</code> (" << html_escape(u.file)
         << ")</li>";
    }
    os << "</ul>";
  }
  os << "\n<script>" << kCheckScript << "</script>\n</body></html>\n";
  return os.str();
}

}  // namespace shardbench
