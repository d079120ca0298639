// Writes a small set of synthetic reports for the HTML and nightly checks:
//   DIR/base/r.json, DIR/head/r.json       FSDP (10% slower on head) and DDP runs
//   DIR/history/<date>/r.json              five nightlies, FSDP regressing on the fourth
// Usage: compare_write_fixtures DIR
#include <iostream>

#include "tests/compare/fixtures.hpp"

int main(int argc, char** argv) {
  using namespace shardbench::compare_fixtures;
  if (argc != 2) {
    std::cerr << "usage: compare_write_fixtures DIR\n";
    return 2;
  }
  const std::filesystem::path dir = argv[1];
  auto write = [&](const std::filesystem::path& relative, const nlohmann::json& doc) {
    std::filesystem::create_directories((dir / relative).parent_path());
    std::ofstream(dir / relative) << doc.dump(2) << "\n";
  };
  write("base/r.json",
        make_report({fsdp_run(steady_steps(20, 20)), ddp_run(steady_steps(18, 20))}));
  write("head/r.json",
        make_report({fsdp_run(steady_steps(22, 20)), ddp_run(steady_steps(18.1, 20))},
                    "2026-12-02T03:00:00Z", "fedcba9876543210"));
  const double fsdp_ms[] = {20, 20.2, 19.9, 23, 23.1};
  for (int day = 0; day < 5; ++day) {
    const std::string date = "2026-11-2" + std::to_string(day + 5);
    write("history/" + date + "/r.json",
          make_report({fsdp_run(steady_steps(fsdp_ms[day], 20)), ddp_run(steady_steps(18, 20))},
                      date + "T03:00:00Z", "rev" + std::to_string(day)));
  }
  return 0;
}
