// perf-project: projects a measured shardbench report (runs with shardbench.unit_timing=true) to
// another world size and interconnect with the step simulator (docs/projection.md); with --sweep,
// to several world sizes and interconnects at once, with the crossover and an HTML chart
// (docs/projection.md "Sweep"). Exit 0 on success, 2 on bad input with one line naming the file,
// the field, the value and what is accepted.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace shardbench {

int perf_project_main(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace shardbench
