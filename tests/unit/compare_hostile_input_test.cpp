// perf-compare against hostile but fair input: files that are not regular files, too big, too
// deep, symlink loops, and reports that parse but break the report's semantics. Each is bad
// input: exit 2 and one line naming the file (and the JSON pointer), never nlohmann's own text.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <sstream>

#include "harness/compare/compare_cli.hpp"
#include "tests/compare/fixtures.hpp"

namespace shardbench {
namespace {

using compare_fixtures::fsdp_run;
using compare_fixtures::steady_steps;
using compare_fixtures::TempDir;
using nlohmann::json;

struct Out {
  int code = -1;
  std::string err;
};

// One run per side: the fixtures' machine is calibrated with no run-to-run noise, so a verdict
// does not depend on which other tests ran before this one in the same process.
Out compare(const std::vector<std::string>& args) {
  ::setenv("SHARDBENCH_NOISE_DIR", compare_fixtures::quiet_noise_dir().c_str(), 1);
  std::ostringstream out, err;
  Out r;
  r.code = perf_compare_main(args, out, err);
  r.err = err.str();
  return r;
}

class HostileInput : public ::testing::Test {
 protected:
  HostileInput() : dir_("hostile") {
    report_ = compare_fixtures::make_report({fsdp_run(steady_steps(20, 8))});
    base_ = dir_.write("base.json", report_);
  }
  // perf-compare BASE HEAD with HEAD = `text`; expects exit 2 and one error line that names the
  // head file, contains `expected` and none of nlohmann's exception tags.
  void expect_refused(const std::string& text, const std::string& expected) {
    const std::string head = dir_.write_text("head.json", text);
    const Out r = compare({base_, head});
    EXPECT_EQ(r.code, 2) << r.err;
    EXPECT_NE(r.err.find("perf-compare: error: " + head + ": "), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(expected), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("json.exception"), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
  void expect_refused(const json& doc, const std::string& expected) {
    expect_refused(doc.dump(), expected);
  }
  TempDir dir_;
  json report_;
  std::string base_;
};

// Issue case 2: arrays nested 100,000 deep (250 KB) once crashed the reader.
TEST_F(HostileInput, DeeplyNestedArraysAreRefusedNotACrash) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  expect_refused(deep, "JSON nested deeper than 64 levels");
  // The pointer says where: the 65th nested array.
  json doc = report_;
  json nested = json::array();
  for (int i = 0; i < 70; ++i) nested = json::array({nested});
  doc["runs"][0]["config"]["deep"] = nested;
  expect_refused(doc, "/runs/0/config/deep/0/0/");
}

// Issue case 3: /dev/zero, FIFOs and huge files were read without bound.
TEST_F(HostileInput, OnlyRegularFilesUpToTheCapAreRead) {
  Out r = compare({base_, "/dev/zero"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err,
            "perf-compare: error: /dev/zero: is a character device; accepted: a regular "
            "JSON file\n");
  const std::string fifo = (dir_.path() / "fifo.json").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  r = compare({base_, fifo});  // no writer: must not block
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("is a FIFO"), std::string::npos) << r.err;
  const std::string huge = (dir_.path() / "huge.json").string();
  { std::ofstream(huge) << "{}"; }
  std::filesystem::resize_file(huge, (std::uintmax_t{256} << 20) + 1);  // sparse: no disk used
  r = compare({base_, huge});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("huge.json: 268435457 bytes; accepted: at most 256 MiB"), std::string::npos)
      << r.err;
  r = compare({"--export_golden", "/dev/zero"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("is a character device"), std::string::npos) << r.err;
  r = compare({"--thresholds", "/dev/zero", base_, base_});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("/dev/zero: is a character device"), std::string::npos) << r.err;
}

// Issue case 11: a symlink loop said "no such file".
TEST_F(HostileInput, SymlinkLoopHasItsOwnMessage) {
  const auto a = dir_.path() / "a.json", b = dir_.path() / "b.json";
  std::filesystem::create_symlink(b, a);
  std::filesystem::create_symlink(a, b);
  Out r = compare({base_, a.string()});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "perf-compare: error: " + a.string() + ": too many levels of symbolic links\n");
  r = compare({base_, (dir_.path() / "nothing.json").string()});
  EXPECT_NE(r.err.find("nothing.json: no such file or directory"), std::string::npos) << r.err;
  // In a folder, a looping link is skipped like any non-report.
  std::filesystem::create_directories(dir_.path() / "folder");
  dir_.write("folder/r.json", report_);
  std::filesystem::create_symlink(dir_.path() / "folder" / "x.json",
                                  dir_.path() / "folder" / "x.json");
  EXPECT_EQ(compare({base_, (dir_.path() / "folder").string()}).code, 0);
}

// Issue case 11: semantics the comparison depends on.
TEST_F(HostileInput, EmptyStepsAreInvalid) {
  json doc = report_;
  doc["runs"][0]["steps"] = json::array();
  expect_refused(doc, "/runs/0/steps: is empty; accepted: at least one step");
}

TEST_F(HostileInput, NegativeOrZeroMeasurementsAreInvalidNotARegression) {
  json doc = report_;
  doc["runs"][0]["steps"][3]["tflops_per_gpu"] = -5.0;
  expect_refused(doc, "/runs/0/steps/3/tflops_per_gpu: is -5.0; accepted: a finite number >= 0");
  doc = report_;
  doc["runs"][0]["steps"][2]["elapsed_ms"] = 0;
  expect_refused(doc, "/runs/0/steps/2/elapsed_ms: is 0; accepted: a finite number > 0");
  doc = report_;
  doc["runs"][0]["steps"][1]["tokens_per_sec_per_gpu"] = -1;
  expect_refused(doc, "/runs/0/steps/1/tokens_per_sec_per_gpu: is -1");
}

TEST_F(HostileInput, NumbersOutOfRangeAndNullEnvironment) {
  std::string text = report_.dump();
  const std::string needle = "\"elapsed_ms\":";
  text.replace(text.find(needle) + needle.size(), 0, "1e400,\"was\":");
  expect_refused(text, "not valid JSON: number overflow parsing '1e400'");
  json doc = report_;
  doc["environment"] = nullptr;
  expect_refused(doc, "/environment: expected an object, got null");
}

TEST_F(HostileInput, DuplicateKeysAreRefusedWithTheirPointer) {
  std::string text = report_.dump();
  text.replace(text.find("\"label\":"), 0, "\"label\":\"other\",");
  expect_refused(text, "/label: duplicate key \"label\"; accepted: each key once per object");
}

TEST_F(HostileInput, MissingIdentityFieldsAndWrongTypes) {
  for (const char* field : {"recipe", "wrapper", "world_size", "device", "compute_dtype"}) {
    json doc = report_;
    doc["runs"][0]["identity"].erase(field);
    expect_refused(doc, "/runs/0/identity/" + std::string(field) + ": is missing");
  }
  json doc = report_;
  doc["runs"][0]["identity"]["world_size"] = "2";
  expect_refused(doc, "/runs/0/identity/world_size: is \"2\"; accepted: an integer >= 1");
  doc = report_;
  doc["runs"][0]["steps"][3]["loss"] = "x";
  expect_refused(doc, "/runs/0/steps/3/loss: expected a number or null, got \"x\"");
  doc = report_;
  doc["runs"][0]["steps"][0]["iteration"] = -1;
  expect_refused(doc, "/runs/0/steps/0/iteration: is -1; accepted: an integer >= 1");
  doc = report_;
  doc["runs"][0]["memory"] = "lots";
  expect_refused(doc, "/runs/0/memory: unexpected type string");
  doc = report_;
  doc["runs"][0]["identity"]["gpu"] = 7;  // a field read as a string elsewhere
  doc["environment"]["start_time_utc"] = 5;
  expect_refused(doc, "/runs/0: unexpected value (");
}

TEST_F(HostileInput, GoldenValuesOutOfRange) {
  expect_refused(json{{"0", {{"GPU utilization", -3.0}}}}.dump(),
                 "golden step \"0\": \"GPU utilization\" is -3.0; accepted: a number >= 0");
  expect_refused(json{{"99999999999999999999999", {{"lm loss", 1.0}}}}.dump(),
                 "golden step \"99999999999999999999999\" is out of range");
  expect_refused(json{{"1", {{"lm loss", 1.0}}}, {"01", {{"lm loss", 2.0}}}}.dump(),
                 "repeats a step");
}

}  // namespace
}  // namespace shardbench
