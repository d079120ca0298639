// perf-compare's command line, as a function so tests can run it in-process and check what it
// prints and returns.
#pragma once

#include <functional>
#include <iosfwd>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace shardbench {

// Exit codes: 0 no regression, 1 regression (or NaN loss, failed run, lm loss outside the golden
// values' tolerances, and unexpected improvement with --fail_on_improvement), 2 bad input
// (unreadable file, wrong schema version, nothing matched, bad flag). `args` excludes the program
// name. Colour is used only when `stdout_is_terminal` (and NO_COLOR is unset) unless --color says
// otherwise.
//
// A perf-project document (is_projection_document) on one side is shown beside the measured
// report, without a verdict, by `projections`: `format` is "table", "markdown", "json" or "html".
// The projection comparison lives above perf-compare's layer (harness/project/
// projection_compare.hpp, render_projection_comparison); perf-compare's main() passes it in.
// Without one, a projection is refused as input.
using ProjectionRenderer = std::function<std::string(
    const nlohmann::json& measured, const std::string& measured_path,
    const nlohmann::json& projection, const std::string& projection_path,
    const std::string& run_label, const std::string& format)>;
int perf_compare_main(const std::vector<std::string>& args, std::ostream& out, std::ostream& err,
                      bool stdout_is_terminal = false, const ProjectionRenderer& projections = {});

}  // namespace shardbench
