// perf-compare with a perf-project document on one side (issue 19, docs/projection.md "Projected
// next to measured"): each projected run beside the measured run of the same label, figure by
// figure, with the projection's error. A projection is not a measurement, so there is no
// verdict: no regression, no improvement, exit 0 once the two are shown. Torch-free.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace shardbench {

// is_projection_document: harness/compare/report_reader.hpp.

struct ProjectedFigure {
  std::string name;  // "step_ms", "tokens_per_s_per_gpu", "tflops_per_s_per_gpu", ...
  nlohmann::json measured;   // number or null (the report does not have it)
  nlohmann::json projected;  // number or null
  // projected / measured - 1 when both are numbers and measured is not 0, else null.
  nlohmann::json error() const;
};

struct ProjectedPair {
  std::string label;
  int measured_world = 0, projected_world = 0;
  std::string measured_device, projected_device;
  std::vector<ProjectedFigure> figures;
};

struct ProjectionComparison {
  std::string measured_file, projection_file;
  std::vector<ProjectedPair> pairs;
  std::vector<std::string> unmatched;  // projected runs with no measured run of their label
};

// Pairs every projected run (or --run's) with the measured run of the same label. Throws
// InputError (report_reader.hpp) naming the file and the field for a projection run without
// its figures, or when no projected run has a measured partner (listing both sides' labels).
ProjectionComparison compare_projection(const nlohmann::json& measured,
                                        const std::string& measured_file,
                                        const nlohmann::json& projection,
                                        const std::string& projection_file,
                                        const std::string& run_label);

std::string render_projection_table(const ProjectionComparison& c);
std::string render_projection_markdown(const ProjectionComparison& c);
nlohmann::json render_projection_json(const ProjectionComparison& c);
std::string render_projection_html(const ProjectionComparison& c);

// perf-compare's ProjectionRenderer (harness/compare/compare_cli.hpp): compare_projection, then
// the rendering in `format` ("table", "markdown", "json", "html"; json ends with a newline).
std::string render_projection_comparison(const nlohmann::json& measured,
                                         const std::string& measured_path,
                                         const nlohmann::json& projection,
                                         const std::string& projection_path,
                                         const std::string& run_label, const std::string& format);

}  // namespace shardbench
