#include "harness/cli/cli11_program.hpp"

#include <CLI/CLI.hpp>

namespace shardbench {

int parse_and_run(CLI::App& app, const std::string& program, const std::vector<std::string>& args,
                  std::ostream& out, std::ostream& err, const std::function<int()>& body) {
  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 takes argv reversed
  try {
    app.parse(reversed);
    return body();
  } catch (const CLI::CallForHelp&) {
    out << app.help();
    return 0;
  } catch (const CLI::ParseError& e) {
    err << program << ": error: " << e.what() << "\n  (" << program
        << " --help lists the options)\n";
    return 2;
  }
}

}  // namespace shardbench
