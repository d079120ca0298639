// perf-project: projects a measured report to another world size and interconnect (exit 0), or
// refuses bad input with one line (exit 2). See harness/project/project_cli.hpp.
#include <iostream>
#include <string>
#include <vector>

#include "harness/project/project_cli.hpp"

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  return shardbench::perf_project_main(args, std::cout, std::cerr);
}
