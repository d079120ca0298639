#include "harness/project/projection_compare.hpp"

#include <cmath>
#include <cstdio>
#include <sstream>

#include "harness/compare/report_reader.hpp"
#include "harness/compare/svg_chart.hpp"
#include "harness/report/json_path.hpp"

namespace shardbench {

namespace {

using nlohmann::json;

json number_or_null(const json& v) {
  return v.is_number() && std::isfinite(v.get<double>()) ? v : json(nullptr);
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// The figures shown, in order: name, unit scale for display, format.
struct FigureSpec {
  const char* name;
  const char* title;
  double scale;
  const char* format;
};
constexpr FigureSpec kFigures[] = {
    {"step_ms", "step ms (median)", 1, "%.2f"},
    {"tokens_per_s_per_gpu", "tokens/s/GPU", 1, "%.0f"},
    {"tflops_per_s_per_gpu", "model TFLOP/s/GPU", 1, "%.1f"},
    {"exposed_comm_ms", "exposed comm ms", 1, "%.2f"},
    {"peak_allocated_gib", "peak allocated GiB", 1.0 / (1 << 30), "%.2f"},
};

std::string shown(const json& v, const FigureSpec& f) {
  return v.is_number() ? fmt(f.format, v.get<double>() * f.scale) : std::string("-");
}

std::string shown_error(const json& e) {
  return e.is_number() ? fmt("%+.1f%%", 100 * e.get<double>()) : std::string("-");
}

const char* kNoVerdict =
    "no verdict: a projection is not a measurement (perf-project); the error is projected / "
    "measured - 1";

std::string pair_title(const ProjectedPair& p) {
  return p.label + ": projected to " + std::to_string(p.projected_world) + " ranks" +
         (p.projected_device.empty() ? "" : " on " + p.projected_device) + ", measured at " +
         std::to_string(p.measured_world) + " on " + p.measured_device;
}

}  // namespace

json ProjectedFigure::error() const {
  if (!measured.is_number() || !projected.is_number() || measured.get<double>() == 0) {
    return nullptr;
  }
  return projected.get<double>() / measured.get<double>() - 1;
}

ProjectionComparison compare_projection(const json& measured, const std::string& measured_file,
                                        const json& projection,
                                        const std::string& projection_file,
                                        const std::string& run_label) {
  ProjectionComparison c;
  c.measured_file = measured_file;
  c.projection_file = projection_file;
  const json& pruns = json_at(projection, {"runs"});
  if (!pruns.is_array() || pruns.empty()) {
    throw InputError(projection_file + ": /runs is " + (pruns.is_null() ? "missing" : pruns.dump()) +
                     "; expected the projected runs of a perf-project document");
  }
  const json& mruns = json_at(measured, {"runs"});
  std::string measured_labels, projected_labels;
  for (const json& m : mruns) {
    measured_labels += (measured_labels.empty() ? "" : ", ") + m.value("label", std::string("?"));
  }
  for (size_t i = 0; i < pruns.size(); ++i) {
    const json& p = pruns[i];
    const std::string where = projection_file + ": /runs/" + std::to_string(i);
    if (!p.is_object() || !p.value("label", json()).is_string()) {
      throw InputError(where + "/label is missing; expected the projected run's label");
    }
    const std::string label = p["label"].get<std::string>();
    projected_labels += (projected_labels.empty() ? "" : ", ") + label;
    if (!run_label.empty() && label != run_label) continue;
    const json& world = json_at(p, {"identity", "world_size"});
    if (!world.is_number_integer()) {
      throw InputError(where + "/identity/world_size is " +
                       (world.is_null() ? std::string("missing") : world.dump()) +
                       "; expected the projected world size");
    }
    if (!json_at(p, {"step_ms"}).is_number()) {
      throw InputError(where + "/step_ms is missing; expected the projected step time in ms");
    }
    const json* partner = nullptr;
    for (const json& m : mruns) {
      if (m.value("label", std::string()) == label) {
        partner = &m;
        break;
      }
    }
    if (partner == nullptr) {
      c.unmatched.push_back(label);
      continue;
    }
    const json& m = *partner;
    ProjectedPair pair;
    pair.label = label;
    pair.projected_world = world.get<int>();
    pair.measured_world = json_at(m, {"identity", "world_size"}).is_number_integer()
                              ? json_at(m, {"identity", "world_size"}).get<int>()
                              : 0;
    pair.projected_device = json_at(p, {"identity", "projected_device"}).is_string()
                                ? json_at(p, {"identity", "projected_device"}).get<std::string>()
                                : std::string();
    pair.measured_device = json_at(m, {"identity", "device"}).is_string()
                               ? json_at(m, {"identity", "device"}).get<std::string>()
                               : std::string("?");
    const json measured_figures[] = {
        json_at(m, {"summary", "step_time_ms", "median"}),
        json_at(m, {"summary", "from_median_step_time", "tokens_per_sec_per_gpu"}),
        json_at(m, {"summary", "from_median_step_time", "tflops_per_gpu"}),
        json_at(m, {"summary", "phase_ms_median", "exposed_comm"}),
        json_at(m, {"memory", "peak_breakdown", "max_allocated_bytes"})};
    const json projected_figures[] = {
        json_at(p, {"step_ms"}), json_at(p, {"tokens_per_s_per_rank"}),
        json_at(p, {"tflops_per_s_per_rank"}), json_at(p, {"exposed_comm_ms"}),
        json_at(p, {"memory", "projected_peak", "max_allocated_bytes"})};
    for (size_t f = 0; f < std::size(kFigures); ++f) {
      pair.figures.push_back({kFigures[f].name, number_or_null(measured_figures[f]),
                              number_or_null(projected_figures[f])});
    }
    c.pairs.push_back(std::move(pair));
  }
  if (c.pairs.empty()) {
    throw InputError(
        run_label.empty()
            ? projection_file + ": no projected run has a measured run of its label in " +
                  measured_file + "; projected: " + projected_labels +
                  "; measured: " + (measured_labels.empty() ? "(none)" : measured_labels)
            : projection_file + ": no projected run labelled \"" + run_label +
                  "\" with a measured partner; projected: " + projected_labels +
                  "; measured: " + (measured_labels.empty() ? "(none)" : measured_labels));
  }
  return c;
}

std::string render_projection_table(const ProjectionComparison& c) {
  std::ostringstream out;
  out << "perf-compare: measured " << c.measured_file << " against projected " << c.projection_file
      << "\n" << kNoVerdict << "\n";
  for (const ProjectedPair& p : c.pairs) {
    out << "\n" << pair_title(p) << "\n";
    char line[200];
    std::snprintf(line, sizeof line, "  %-20s %14s %14s %9s\n", "", "measured", "projected",
                  "error");
    out << line;
    for (size_t i = 0; i < p.figures.size(); ++i) {
      const ProjectedFigure& f = p.figures[i];
      std::snprintf(line, sizeof line, "  %-20s %14s %14s %9s\n", kFigures[i].title,
                    shown(f.measured, kFigures[i]).c_str(), shown(f.projected, kFigures[i]).c_str(),
                    shown_error(f.error()).c_str());
      out << line;
    }
  }
  for (const std::string& u : c.unmatched) {
    out << "\nnot shown: projected run \"" << u << "\" has no measured run of its label\n";
  }
  return out.str();
}

std::string render_projection_markdown(const ProjectionComparison& c) {
  std::ostringstream out;
  out << "**Projected against measured** (`" << c.projection_file << "` against `"
      << c.measured_file << "`): " << kNoVerdict << ".\n";
  for (const ProjectedPair& p : c.pairs) {
    out << "\n" << pair_title(p) << "\n\n| figure | measured | projected | error |\n|---|---|---|---|\n";
    for (size_t i = 0; i < p.figures.size(); ++i) {
      const ProjectedFigure& f = p.figures[i];
      out << "| " << kFigures[i].title << " | " << shown(f.measured, kFigures[i]) << " | "
          << shown(f.projected, kFigures[i]) << " | " << shown_error(f.error()) << " |\n";
    }
  }
  for (const std::string& u : c.unmatched) {
    out << "\nNot shown: projected run \"" << u << "\" has no measured run of its label.\n";
  }
  return out.str();
}

json render_projection_json(const ProjectionComparison& c) {
  json pairs = json::array();
  for (const ProjectedPair& p : c.pairs) {
    json figures = json::object();
    for (const ProjectedFigure& f : p.figures) {
      figures[f.name] = {{"measured", f.measured}, {"projected", f.projected}, {"error", f.error()}};
    }
    pairs.push_back({{"label", p.label},
                     {"measured", {{"world_size", p.measured_world}, {"device", p.measured_device}}},
                     {"projected",
                      {{"world_size", p.projected_world},
                       {"device", p.projected_device.empty() ? json(nullptr)
                                                             : json(p.projected_device)}}},
                     {"figures", figures}});
  }
  return {{"kind", "projected_against_measured"},
          {"verdict", nullptr},
          {"note", kNoVerdict},
          {"measured_file", c.measured_file},
          {"projection_file", c.projection_file},
          {"runs", pairs},
          {"unmatched_projected_runs", c.unmatched}};
}

std::string render_projection_html(const ProjectionComparison& c) {
  std::ostringstream out;
  out << "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>perf-compare: "
         "projected against measured</title><style>body{font-family:sans-serif;margin:2em}"
         "table{border-collapse:collapse;margin:0.5em 0 1.5em}td,th{border:1px solid #bbb;"
         "padding:0.2em 0.6em;text-align:right}th:first-child,td:first-child{text-align:left}"
         ".projected{background:#eef3fb}.badge{background:#4a6fa5;color:#fff;padding:0.1em "
         "0.5em;border-radius:0.3em;font-size:0.85em}</style></head><body>\n";
  out << "<h1>Projected against measured</h1>\n<p><span class=\"badge\">projected</span> "
      << html_escape(c.projection_file) << " against the measurement " << html_escape(c.measured_file)
      << ".</p>\n<p>" << html_escape(kNoVerdict) << ".</p>\n";
  for (const ProjectedPair& p : c.pairs) {
    out << "<h2>" << html_escape(pair_title(p)) << "</h2>\n<table><tr><th>figure</th><th>measured"
        << "</th><th class=\"projected\">projected</th><th>error</th></tr>\n";
    for (size_t i = 0; i < p.figures.size(); ++i) {
      const ProjectedFigure& f = p.figures[i];
      out << "<tr><td>" << kFigures[i].title << "</td><td>" << shown(f.measured, kFigures[i])
          << "</td><td class=\"projected\">" << shown(f.projected, kFigures[i]) << "</td><td>"
          << shown_error(f.error()) << "</td></tr>\n";
    }
    out << "</table>\n";
  }
  for (const std::string& u : c.unmatched) {
    out << "<p>Not shown: projected run &quot;" << html_escape(u)
        << "&quot; has no measured run of its label.</p>\n";
  }
  out << "</body></html>\n";
  return out.str();
}

std::string render_projection_comparison(const json& measured, const std::string& measured_path,
                                         const json& projection,
                                         const std::string& projection_path,
                                         const std::string& run_label, const std::string& format) {
  const ProjectionComparison c =
      compare_projection(measured, measured_path, projection, projection_path, run_label);
  if (format == "markdown") return render_projection_markdown(c);
  if (format == "json") return render_projection_json(c).dump(2) + "\n";
  if (format == "html") return render_projection_html(c);
  return render_projection_table(c);
}

}  // namespace shardbench
