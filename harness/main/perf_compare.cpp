// perf-compare: compares shardbench reports (or a report against Megatron-Bridge golden values)
// and exits 0 (no regression), 1 (regression) or 2 (bad input). See harness/compare/.
#include <unistd.h>

#include <iostream>
#include <string>
#include <vector>

#include "harness/compare/compare_cli.hpp"
#include "harness/project/projection_compare.hpp"

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  return shardbench::perf_compare_main(args, std::cout, std::cerr, isatty(STDOUT_FILENO) == 1,
                                       shardbench::render_projection_comparison);
}
