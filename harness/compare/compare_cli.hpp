// perf-compare's command line, as a function so tests can run it in-process and check what it
// prints and returns.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

namespace shardbench {

// Exit codes: 0 no regression, 1 regression (or NaN loss, failed run, lm loss outside the golden
// values' tolerances, and unexpected improvement with --fail_on_improvement), 2 bad input
// (unreadable file, wrong schema version, nothing matched, bad flag). `args` excludes the program
// name. Colour is used only when `stdout_is_terminal` (and NO_COLOR is unset) unless --color says
// otherwise.
int perf_compare_main(const std::vector<std::string>& args, std::ostream& out, std::ostream& err,
                      bool stdout_is_terminal = false);

}  // namespace shardbench
