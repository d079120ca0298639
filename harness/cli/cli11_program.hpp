// The command-line entry that perf-compare and perf-project share: CLI11 parses the arguments,
// -h/--help prints the options and a parse error is one line that points to PROGRAM --help.
#pragma once

#include <functional>
#include <ostream>
#include <string>
#include <vector>

namespace CLI {
class App;
}  // namespace CLI

namespace shardbench {

// Parses `args` (without the program name) into `app` and returns `body()`. --help writes the
// help to `out` and returns 0; a CLI11 parse or validation error, from the parse or the body,
// writes "PROGRAM: error: WHAT" and the pointer to --help to `err` and returns 2. Other
// exceptions pass to the caller.
int parse_and_run(CLI::App& app, const std::string& program, const std::vector<std::string>& args,
                  std::ostream& out, std::ostream& err, const std::function<int()>& body);

}  // namespace shardbench
