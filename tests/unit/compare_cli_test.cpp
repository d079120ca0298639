// perf-compare end to end in-process: every exit code, each output format, golden export and
// comparison, and the nightly history on the HTML page.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "harness/compare/compare_cli.hpp"
#include "harness/report/noise_model.hpp"
#include "tests/compare/fixtures.hpp"

namespace shardbench {
namespace {

using compare_fixtures::ddp_run;
using compare_fixtures::fsdp_run;
using compare_fixtures::steady_steps;
using compare_fixtures::TempDir;
using nlohmann::json;

struct CliResult {
  int code = -1;
  std::string out, err;
};

// One run per side in most tests here: the fixtures' machine is calibrated with no run-to-run
// noise (SHARDBENCH_NOISE_DIR), so the step-level interval decides; OneRunPerSide below uses the
// committed CPU default instead.
CliResult cli(const std::vector<std::string>& args, bool terminal = false,
              const std::filesystem::path& noise_dir = compare_fixtures::quiet_noise_dir()) {
  ::setenv("SHARDBENCH_NOISE_DIR", noise_dir.c_str(), 1);
  std::ostringstream out, err;
  CliResult r;
  r.code = perf_compare_main(args, out, err, terminal);
  r.out = out.str();
  r.err = err.str();
  return r;
}

std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class CompareCli : public ::testing::Test {
 protected:
  CompareCli() : dir_("cli") {
    base_ = dir_.write("base.json", compare_fixtures::make_report({fsdp_run(steady_steps(20, 20)),
                                                                   ddp_run(steady_steps(18, 20))}));
    same_ = dir_.write("same.json", compare_fixtures::make_report({fsdp_run(steady_steps(20.2, 20)),
                                                                   ddp_run(steady_steps(18, 20))}));
    slower_ =
        dir_.write("slower.json", compare_fixtures::make_report({fsdp_run(steady_steps(23, 20)),
                                                                 ddp_run(steady_steps(18, 20))}));
  }
  TempDir dir_;
  std::string base_, same_, slower_;
};

TEST_F(CompareCli, ExitZeroWithoutRegression) {
  const CliResult r = cli({base_, same_});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("2 matched"), std::string::npos);
  EXPECT_NE(r.out.find("exit 0"), std::string::npos);
}

TEST_F(CompareCli, ExitOneOnRegression) {
  const CliResult r = cli({base_, slower_});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("REGRESSION"), std::string::npos);
  EXPECT_NE(r.out.find("regression"), std::string::npos);
  // A looser timing threshold from the command line turns it into a pass.
  EXPECT_EQ(cli({base_, slower_, "--timing_threshold", "0.2"}).code, 0);
  // .. and from a file; the command line wins over the file.
  const std::string file = dir_.write("t.json", json{{"timing_threshold", 0.2}});
  EXPECT_EQ(cli({base_, slower_, "--thresholds", file}).code, 0);
  EXPECT_EQ(cli({base_, slower_, "--thresholds", file, "--timing_threshold", "0.05"}).code, 1);
}

TEST_F(CompareCli, ExitTwoOnBadInputNamingTheFileAndProblem) {
  const CliResult missing = cli({base_, (dir_.path() / "nope.json").string()});
  EXPECT_EQ(missing.code, 2);
  EXPECT_NE(missing.err.find("nope.json: no such file or directory"), std::string::npos)
      << missing.err;

  json future = json::parse(slurp(base_));
  future["schema_version"] = "2.0";
  const CliResult major = cli({dir_.write("future.json", future), same_});
  EXPECT_EQ(major.code, 2);
  EXPECT_NE(major.err.find("future.json: schema_version \"2.0\" has major version 2"),
            std::string::npos)
      << major.err;

  const CliResult unreadable = cli({dir_.write_text("broken.json", "{"), same_});
  EXPECT_EQ(unreadable.code, 2);
  EXPECT_NE(unreadable.err.find("broken.json: not valid JSON"), std::string::npos);
}

TEST_F(CompareCli, OneRunPerSideUsesTheNoiseModelOrSaysWhyItCannot) {
  // No calibration of host "fixture", and the fixtures' ranks are placed by the OS (cpu-default),
  // for which no committed default exists: a 15% slowdown of one run against one run is
  // inconclusive, with the reason.
  const std::filesystem::path empty = dir_.path() / "no_calibration";
  std::filesystem::create_directories(empty);
  const std::string json_out = (dir_.path() / "r.json").string();
  const CliResult r = cli({base_, slower_, "--json", json_out}, false, empty);
  EXPECT_EQ(r.code, 3) << r.out << r.err;
  EXPECT_NE(r.out.find(kNoNoiseModelReason), std::string::npos) << r.out;
  const json doc = json::parse(slurp(json_out));
  const json& none = doc.at("pairs")[0].at("step_time").at("noise_model");
  EXPECT_EQ(none.at("applied"), false);
  EXPECT_TRUE(none.at("model").is_null());
  // A calibration with the CPU default's sd (0.203, a 49% band): within noise.
  const std::string wide = dir_.write("wide.json", json{{"device_class", "cpu-default"},
                                                        {"host", "fixture"},
                                                        {"run_to_run_sd", 0.203},
                                                        {"pairs", 200}});
  const CliResult w =
      cli({base_, slower_, "--noise_model", wide, "--json", json_out}, false, empty);
  EXPECT_EQ(w.code, 3) << w.out << w.err;
  EXPECT_NE(w.out.find("within noise"), std::string::npos) << w.out;
  EXPECT_NE(w.out.find("calibration of cpu-default on fixture"), std::string::npos) << w.out;
  const json wdoc = json::parse(slurp(json_out));
  EXPECT_EQ(wdoc.at("pairs")[0].at("step_time").at("noise_model").at("model").at("kind"),
            "calibration");
  // A calm calibration lets the step-level interval decide; one of another device is refused,
  // naming both.
  const std::string calm = dir_.write("calm.json", json{{"device_class", "cpu-default"},
                                                        {"host", "fixture"},
                                                        {"run_to_run_sd", 0.001},
                                                        {"pairs", 20}});
  EXPECT_EQ(cli({base_, slower_, "--noise_model", calm}, false, empty).code, 1);
  const std::string gpu = dir_.write(
      "gpu.json",
      json{{"device_class", "h200"}, {"host", "fixture"}, {"run_to_run_sd", 0.001}, {"pairs", 20}});
  const CliResult wrong = cli({base_, slower_, "--noise_model", gpu}, false, empty);
  EXPECT_EQ(wrong.code, 2);
  EXPECT_NE(wrong.err.find("h200"), std::string::npos) << wrong.err;
  EXPECT_NE(wrong.err.find("cpu-default"), std::string::npos) << wrong.err;
}

TEST_F(CompareCli, RepeatableOptionsTakeOneValuePerFlag) {
  // `--ignore_identity FIELD BASE HEAD`: BASE and HEAD stay positional.
  const CliResult r = cli({"--ignore_identity", "gpu", base_, slower_});
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_NE(r.out.find("REGRESSION"), std::string::npos) << r.out;
  EXPECT_EQ(
      cli({"--ignore_identity", "gpu", "--ignore_identity", "sdpa_backend", base_, same_}).code, 0);
  EXPECT_EQ(cli({"--match_config", "ddp.num_buckets", base_, same_}).code, 0);
  EXPECT_EQ(cli({"--base", base_, "--head", same_}).code, 0);
}

TEST_F(CompareCli, ExitTwoWhenNothingMatchedOrFlagsAreWrong) {
  const std::string other = dir_.write("other.json", compare_fixtures::make_report([] {
                                         auto f = fsdp_run(steady_steps(20, 20));
                                         f.world_size = 8;
                                         return std::vector{f};
                                       }()));
  const CliResult none = cli({base_, other});
  EXPECT_EQ(none.code, 2);
  EXPECT_NE(none.err.find("nothing matched"), std::string::npos);
  EXPECT_EQ(cli({base_}).code, 2);
  EXPECT_EQ(cli({base_, same_, "--format", "pdf"}).code, 2);
  EXPECT_EQ(cli({base_, same_, "--alpha", "2"}).code, 2);
  EXPECT_EQ(cli({base_, same_, "--bogus"}).code, 2);
  EXPECT_EQ(cli({"--help"}).code, 0);
}

TEST_F(CompareCli, SeveralReportsAndFoldersPerSide) {
  dir_.write("nightly/a.json", json::parse(slurp(base_)));
  dir_.write("nightly/b.json", json::parse(slurp(same_)));
  const CliResult r = cli({"--base", (dir_.path() / "nightly").string(), "--head", same_, "--head",
                           slower_, "--format", "json"});
  // The head's two FSDP runs disagree by 14%: the interval resamples runs too, so run-to-run
  // variation of that size makes the FSDP pair inconclusive (exit 3), not a regression.
  EXPECT_EQ(r.code, 3);
  const json j = json::parse(r.out);
  EXPECT_EQ(j.at("pairs").size(), 2u);
  EXPECT_EQ(j.at("pairs")[0].at("base_runs").size(), 2u);
  EXPECT_EQ(j.at("pairs")[0].at("head_runs").size(), 2u);
}

TEST_F(CompareCli, TableUsesColourOnlyOnATerminal) {
  EXPECT_EQ(cli({base_, slower_}).out.find("\033["), std::string::npos);
  EXPECT_NE(cli({base_, slower_}, true).out.find("\033[1;31m"), std::string::npos);
  EXPECT_EQ(cli({base_, slower_, "--color", "never"}, true).out.find("\033["), std::string::npos);
  EXPECT_NE(cli({base_, slower_, "--color", "always"}).out.find("\033["), std::string::npos);
}

TEST_F(CompareCli, MarkdownJsonAndHtmlOutputs) {
  const std::string md = (dir_.path() / "out.md").string();
  const std::string js = (dir_.path() / "out.json").string();
  const std::string html = (dir_.path() / "out.html").string();
  const CliResult r = cli({base_, slower_, "--markdown", md, "--json", js, "--html", html});
  EXPECT_EQ(r.code, 1);
  const std::string markdown = slurp(md);
  EXPECT_NE(markdown.find("## perf-compare: **regression**"), std::string::npos);
  EXPECT_NE(markdown.find("| metric | base | head | change | interval | verdict |"),
            std::string::npos);
  EXPECT_NE(markdown.find("| **regression** |"), std::string::npos);

  const json j = json::parse(slurp(js));
  EXPECT_EQ(j.at("generator"), "perf-compare");
  EXPECT_EQ(j.at("summary").at("exit_code"), 1);
  EXPECT_EQ(j.at("summary").at("verdicts").at("regression"), 1);
  const json& median = j.at("pairs")[0].at("metrics").at("step_time_median_ms");
  EXPECT_EQ(median.at("verdict"), "regression");
  EXPECT_GT(median.at("relative_change").get<double>(), 0.05);
  EXPECT_GT(median.at("ci_low").get<double>(), 0);
  EXPECT_LT(median.at("detectable_change").get<double>(), 0.05);
  EXPECT_EQ(j.at("pairs")[0].at("step_time").at("base").at("runs"), 1);

  const std::string page = slurp(html);
  EXPECT_EQ(page.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_NE(page.find("data-chart=\"throughput\""), std::string::npos);
  EXPECT_NE(page.find("data-chart=\"memory-engine_static_bytes\""), std::string::npos);
  EXPECT_NE(page.find("data-chart=\"ddp-vs-fsdp-0-throughput\""), std::string::npos);
  // A strip plot of every measured step per run and side.
  EXPECT_NE(page.find("data-chart=\"steps-0\""), std::string::npos);
  EXPECT_NE(page.find("class=\"step head\""), std::string::npos);
  // Self-contained: nothing is fetched (the SVG namespace URI is an identifier, not a fetch).
  EXPECT_EQ(page.find("src="), std::string::npos);
  EXPECT_EQ(page.find("<link"), std::string::npos);
  EXPECT_EQ(page.find("https://"), std::string::npos);
  // stdout formats too.
  EXPECT_NE(cli({base_, slower_, "--format", "markdown"}).out.find("### `"), std::string::npos);
  EXPECT_NE(cli({base_, slower_, "--format", "html"}).out.find("<svg class=\"chart\""),
            std::string::npos);
}

TEST_F(CompareCli, ExitThreeWhenInconclusive) {
  using compare_fixtures::noisy_steps;
  const std::string noisy_base = dir_.write(
      "noisy_base.json", compare_fixtures::make_report({fsdp_run(noisy_steps(20, 20, 0.4))}));
  const std::string noisy_head = dir_.write(
      "noisy_head.json", compare_fixtures::make_report({fsdp_run(noisy_steps(20.1, 20, 0.4))}));
  const CliResult r = cli({noisy_base, noisy_head});
  EXPECT_EQ(r.code, 3) << r.out << r.err;
  EXPECT_NE(r.out.find("INCONCLUSIVE"), std::string::npos);
  EXPECT_NE(r.out.find("smallest detectable change"), std::string::npos);
  EXPECT_NE(r.out.find("exit 3"), std::string::npos);
  EXPECT_NE(cli({noisy_base, noisy_head, "--format", "markdown"}).out.find("**inconclusive**"),
            std::string::npos);
}

TEST_F(CompareCli, PairedRunsCancelSharedLoad) {
  // Four interleaved pairs, each under its own load (x1, x1.3, x0.8, x1.1), the head 10% slower
  // than the base next to it. The base's file names run against start time (z.. first), the
  // head's with it (a.. first), so pairing in name order would mix the loads up.
  const double load[] = {1.0, 1.3, 0.8, 1.1};
  for (int i = 0; i < 4; ++i) {
    const std::string start = "2026-12-01T03:0" + std::to_string(i) + ":00Z";
    dir_.write("paired_base/" + std::string(1, static_cast<char>('z' - i)) + ".json",
               compare_fixtures::make_report({fsdp_run(steady_steps(20 * load[i], 20))}, start));
    dir_.write("paired_head/" + std::string(1, static_cast<char>('a' + i)) + ".json",
               compare_fixtures::make_report({fsdp_run(steady_steps(22 * load[i], 20))}, start));
  }
  const std::string base = (dir_.path() / "paired_base").string();
  const std::string head = (dir_.path() / "paired_head").string();
  // Unpaired, the load's spread between runs hides the change.
  EXPECT_EQ(cli({base, head}).code, 3);
  const CliResult r = cli({base, head, "--paired", "--format", "json"});
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  const json j = json::parse(r.out);
  EXPECT_EQ(j.at("pairs")[0].at("step_time").at("run_pairs"), 4);
  EXPECT_NEAR(j.at("pairs")[0].at("metrics").at("step_time_median_ms").at("relative_change"), 0.10,
              1e-3);
  EXPECT_EQ(j.at("thresholds").at("paired"), true);
  // The same from a thresholds file.
  const std::string file = dir_.write("paired.json", json{{"paired", true}});
  EXPECT_EQ(cli({base, head, "--thresholds", file}).code, 1);
  // Pairing needs the same number of runs on each side.
  const CliResult uneven = cli({"--base", base, "--head", head, "--head", same_, "--paired"});
  EXPECT_EQ(uneven.code, 2) << uneven.out << uneven.err;
  EXPECT_NE(uneven.err.find("--paired"), std::string::npos) << uneven.err;
  EXPECT_NE(uneven.err.find("4 base and 5 head runs"), std::string::npos) << uneven.err;
}

TEST_F(CompareCli, UnmatchedRunsExitOneUnlessAllowed) {
  // The head report lost its DDP run.
  const std::string head_only_fsdp = dir_.write(
      "fsdp_only.json", compare_fixtures::make_report({fsdp_run(steady_steps(20.2, 20))}));
  const CliResult r = cli({base_, head_only_fsdp});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("unmatched base: "), std::string::npos);
  EXPECT_EQ(cli({base_, head_only_fsdp, "--allow_unmatched"}).code, 0);
  const std::string file = dir_.write("allow.json", json{{"allow_unmatched", true}});
  EXPECT_EQ(cli({base_, head_only_fsdp, "--thresholds", file}).code, 0);
}

TEST_F(CompareCli, HtmlNeverCutsLongRunLabels) {
  auto f = fsdp_run(steady_steps(20, 20));
  f.recipe = "llama3_tiny_cpu_with_a_very_long_recipe_name_that_used_to_lose_its_beginning";
  const std::string a = dir_.write("long_a.json", compare_fixtures::make_report({f}));
  const std::string b = dir_.write("long_b.json", compare_fixtures::make_report({f}));
  const std::string page = cli({a, b, "--format", "html"}).out;
  // The whole label is drawn as text (not only in a tooltip), and the picture is wide enough.
  EXPECT_NE(page.find(">" + f.recipe + " megatron_fsdp/optim_grads_params ws2</text>"),
            std::string::npos);
}

TEST_F(CompareCli, ExportGoldenValuesAndCompareAgainstThem) {
  const std::string golden = (dir_.path() / "golden.json").string();
  ASSERT_EQ(cli({"--export_golden", base_, "-o", golden}).code, 0);
  const json g = json::parse(slurp(golden));
  EXPECT_TRUE(g.contains("0"));
  EXPECT_TRUE(g.at("19").contains("GPU utilization"));
  // Golden values come from one run on an unknown host: the CPU default's band would make the
  // step-time verdict inconclusive; a calibration file given on the command line applies instead.
  const std::string quiet =
      (compare_fixtures::quiet_noise_dir() / "cpu-default@fixture.json").string();
  EXPECT_EQ(cli({golden, same_, "--noise_model", quiet}).code, 0);
  EXPECT_EQ(cli({golden, slower_, "--noise_model", quiet}).code, 1);
  // The DDP run exported and compared by label.
  const CliResult ddp = cli({"--export_golden", base_, "--run", "ddp+distopt"});
  EXPECT_EQ(ddp.code, 0);
  EXPECT_NE(ddp.out.find("\"GPU utilization\""), std::string::npos);
  const CliResult unknown = cli({"--export_golden", base_, "--run", "zero3"});
  EXPECT_EQ(unknown.code, 2);
  EXPECT_NE(unknown.err.find("no run labelled \"zero3\"; the report's runs: "
                             "megatron_fsdp/optim_grads_params, ddp+distopt"),
            std::string::npos)
      << unknown.err;
}

TEST_F(CompareCli, ListRunsShowsIdentities) {
  const CliResult r = cli({base_, same_, "--list_runs"});
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("\"recipe\":\"llama3_tiny_cpu\""), std::string::npos);
}

TEST_F(CompareCli, HtmlHistoryMarksRegressions) {
  // Three nightlies: steady, then a 15% slowdown of FSDP.
  const std::string days[] = {"2026-11-29", "2026-11-30", "2026-12-01"};
  const double fsdp_ms[] = {20, 20.1, 23};
  for (int d = 0; d < 3; ++d) {
    dir_.write("results/main/" + days[d] + "/r.json",
               compare_fixtures::make_report(
                   {fsdp_run(steady_steps(fsdp_ms[d], 20)), ddp_run(steady_steps(18, 20))},
                   days[d] + "T03:00:00Z", "rev" + std::to_string(d)));
  }
  const std::string html = (dir_.path() / "h.html").string();
  const CliResult r =
      cli({base_, slower_, "--html", html, "--history", (dir_.path() / "results/main").string()});
  EXPECT_EQ(r.code, 1) << r.err;
  const std::string page = slurp(html);
  EXPECT_NE(page.find("data-chart=\"history-tflops_per_gpu\""), std::string::npos);
  EXPECT_NE(page.find("data-chart=\"history-step_time_median_ms\""), std::string::npos);
  EXPECT_NE(page.find("mark-regression"), std::string::npos);
  EXPECT_NE(page.find("2026-11-30"), std::string::npos);
}

}  // namespace
}  // namespace shardbench
