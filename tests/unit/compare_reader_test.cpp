// Reading reports: schema-version refusal, unknown fields ignored, folders, golden values, and
// error messages that name the file and the problem.
#include <gtest/gtest.h>

#include "harness/compare/report_reader.hpp"
#include "harness/compare/run_view.hpp"
#include "tests/compare/fixtures.hpp"

namespace shardbench {
namespace {

using compare_fixtures::TempDir;
using nlohmann::json;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(CompareReader, ReadsAWrittenReport) {
  TempDir dir("reader_ok");
  const std::string file =
      dir.write("r.json", compare_fixtures::make_report(
                              {compare_fixtures::fsdp_run(compare_fixtures::steady_steps(20, 10)),
                               compare_fixtures::ddp_run(compare_fixtures::steady_steps(18, 10))}));
  const LoadedReport report = read_report(file);
  EXPECT_FALSE(report.golden);
  const std::vector<RunView> runs = runs_of(report);
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].label, "megatron_fsdp/optim_grads_params");
  EXPECT_EQ(runs[0].identity.at("gpu"), "cpu");
  EXPECT_EQ(runs[0].identity.at("config.model.hidden_size"), 64);
  EXPECT_NE(runs[0].key, runs[1].key);
  EXPECT_EQ(runs[0].tflops_per_gpu.size(), 10u);
  EXPECT_EQ(runs[0].measured_begin, 1u);
  EXPECT_TRUE(runs[0].engine_static_bytes.has_value());
  EXPECT_FALSE(runs[0].max_alloc_gb.has_value());  // CPU: no allocator snapshots
}

TEST(CompareReader, RefusesAnUnknownMajorVersionNamingFileAndVersion) {
  TempDir dir("reader_major");
  json doc = compare_fixtures::make_report(
      {compare_fixtures::fsdp_run(compare_fixtures::steady_steps(20, 5))});
  doc["schema_version"] = "2.0";
  const std::string file = dir.write("future.json", doc);
  const std::string message = error_of([&] { read_report(file); });
  EXPECT_NE(message.find(file), std::string::npos) << message;
  EXPECT_NE(message.find("\"2.0\""), std::string::npos) << message;
  EXPECT_NE(message.find("major version 2"), std::string::npos) << message;
  EXPECT_NE(message.find("1.x"), std::string::npos) << message;
}

TEST(CompareReader, AcceptsALaterMinorAndIgnoresUnknownFields) {
  TempDir dir("reader_minor");
  json doc = compare_fixtures::make_report(
      {compare_fixtures::fsdp_run(compare_fixtures::steady_steps(20, 5))});
  doc["schema_version"] = "1.7";
  doc["a_future_field"] = {{"x", 1}};
  doc["runs"][0]["another_future_field"] = "y";
  doc["runs"][0]["steps"][0]["future_step_field"] = 3;
  const LoadedReport report = read_report(dir.write("minor.json", doc));
  EXPECT_EQ(runs_of(report).size(), 1u);
}

TEST(CompareReader, MalformedVersionsAndFiles) {
  TempDir dir("reader_bad");
  json doc = compare_fixtures::make_report(
      {compare_fixtures::fsdp_run(compare_fixtures::steady_steps(20, 5))});
  doc["schema_version"] = 1;
  EXPECT_NE(error_of([&] { read_report(dir.write("int.json", doc)); }).find("\"MAJOR.MINOR\""),
            std::string::npos);
  doc["schema_version"] = "one.zero";
  EXPECT_NE(error_of([&] { read_report(dir.write("word.json", doc)); }).find("\"one.zero\""),
            std::string::npos);
  const std::string broken = dir.write_text("broken.json", "{\"runs\": [");
  EXPECT_NE(error_of([&] { read_report(broken); }).find("not valid JSON"), std::string::npos);
  EXPECT_NE(error_of([&] {
              read_report(dir.path() / "missing.json");
            }).find("missing.json: no such file or directory"),
            std::string::npos);
  const std::string other = dir.write("other.json", json{{"hello", 1}});
  EXPECT_NE(error_of([&] { read_report(other); }).find("no \"schema_version\""), std::string::npos);
  json no_identity = compare_fixtures::make_report(
      {compare_fixtures::fsdp_run(compare_fixtures::steady_steps(20, 5))});
  no_identity["runs"][0].erase("identity");
  const std::string ni = dir.write("ni.json", no_identity);
  const std::string message = error_of([&] { runs_of(read_report(ni)); });
  EXPECT_NE(message.find(ni + ": /runs/0/identity is missing"), std::string::npos) << message;
}

TEST(CompareReader, FoldersAreSearchedRecursivelyAndSkipNonReports) {
  TempDir dir("reader_folder");
  dir.write("main/2026-12-01/a.json", compare_fixtures::make_report({compare_fixtures::fsdp_run(
                                          compare_fixtures::steady_steps(20, 5))}));
  dir.write("main/2026-12-02/b.json", compare_fixtures::make_report({compare_fixtures::ddp_run(
                                          compare_fixtures::steady_steps(20, 5))}));
  dir.write("main/2026-12-02/compare.json", json{{"generator", "perf-compare"}});
  const ReportSet set = read_reports({dir.path() / "main"});
  EXPECT_EQ(set.reports.size(), 2u);
  ASSERT_EQ(set.skipped.size(), 1u);
  EXPECT_NE(set.skipped[0].find("compare.json"), std::string::npos);
  const std::string message = error_of([&] { read_reports({dir.path() / "main" / "nothing"}); });
  EXPECT_NE(message.find("nothing: no such file or directory"), std::string::npos) << message;
  std::filesystem::create_directories(dir.path() / "empty");
  EXPECT_NE(
      error_of([&] { read_reports({dir.path() / "empty"}); }).find("holds no shardbench report"),
      std::string::npos);
}

TEST(CompareReader, GoldenValuesBecomeAOneRunReport) {
  TempDir dir("reader_golden");
  const json golden = {
      {"0",
       {{"lm loss", 11.9}, {"elapsed time per iteration (ms)", 5300.0}, {"GPU utilization", 1.0}}},
      {"1",
       {{"lm loss", 11.8}, {"elapsed time per iteration (ms)", 280.0}, {"GPU utilization", 410.0}}},
      {"2",
       {{"lm loss", 11.7}, {"elapsed time per iteration (ms)", 281.0}, {"GPU utilization", 409.0}}},
      {"alloc", 20.5},
      {"max_alloc", 41.2},
      {"max_reserved", 45.0}};
  const LoadedReport report = read_report(dir.write("golden.json", golden));
  ASSERT_TRUE(report.golden);
  const std::vector<RunView> runs = runs_of(report);
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_TRUE(runs[0].golden);
  EXPECT_EQ(runs[0].tflops_per_gpu.size(), 3u);
  EXPECT_DOUBLE_EQ(*runs[0].tflops_per_gpu[2], 409.0);
  EXPECT_DOUBLE_EQ(*runs[0].max_alloc_gb, 41.2);
  EXPECT_DOUBLE_EQ(*runs[0].max_reserved_gb, 45.0);
  const std::string bad = dir.write("bad_golden.json", json{{"0", {{"lm loss", "x"}}}});
  EXPECT_NE(error_of([&] { read_report(bad); }).find("\"lm loss\" is \"x\""), std::string::npos);
}

}  // namespace
}  // namespace shardbench
