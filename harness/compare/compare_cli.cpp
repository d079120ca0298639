#include "harness/compare/compare_cli.hpp"

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <iostream>
#include <stdexcept>
#include <utility>

#include "harness/atomic_write.hpp"
#include "harness/cli/cli11_program.hpp"
#include "harness/compare/compare_sides.hpp"
#include "harness/compare/history.hpp"
#include "harness/compare/loss_check.hpp"
#include "harness/compare/render.hpp"
#include "harness/compare/report_reader.hpp"
#include "harness/report/golden_values.hpp"

namespace shardbench {
namespace {

constexpr const char* kDescription =
    "perf-compare: compare shardbench reports (base vs head) and gate regressions.\n"
    "  perf-compare BASE HEAD          each a report, a folder of reports, or (BASE) golden "
    "values\n"
    "  perf-compare --base A --base B --head C ...   several reports or folders per side\n"
    "  perf-compare --export_golden REPORT [--run LABEL] [-o FILE]\n"
    "Runs match by identity (recipe, strategy, world size, GPU, dtype, batch, relevant config).\n"
    "Against golden values the lm loss curve is judged too (evaluate.py's rules).\n"
    "Exit: 0 no regression, 1 regression / loss mismatch / NaN loss / failed run / unmatched run "
    "/\n"
    "      lm loss off golden values, 2 bad input, 3 inconclusive (too noisy to tell a\n"
    "      timing_threshold change from none).";

// --help of a gate number's flag, as perf-launch prints it: help, range and default, all from
// harness/config/gate_thresholds.hpp.
template <class S>
std::string help_of(const GateNumber<S>& number) {
  return gate_flag_help(number) + " (default: " + gate_default_text(number) + ")";
}

std::string thresholds_file_help() {
  std::string keys;
  for (const std::string& key : threshold_keys()) keys += (keys.empty() ? "" : ", ") + key;
  return "JSON file with any of " + keys + "; flags given here win";
}

struct Options {
  std::vector<std::string> positional, base, head;
  std::string thresholds_file;
  Thresholds numbers;  // the threshold numbers given as flags (app.count tells which)
  bool no_utest = false, fail_on_improvement = false, list_runs = false, allow_unmatched = false,
       paired = false;
  std::vector<std::string> ignore_identity, match_config;
  std::string run_label, format = "table", json_path, markdown_path, html_path, history_dir;
  std::string color = "auto", export_golden, output, noise_model;
  LossTolerances loss;
};

void write_output(const std::string& path, const std::string& contents) {
  try {
    write_file_atomically(path, contents);
  } catch (const std::exception& e) {
    throw InputError(std::string("cannot write output: ") + e.what());
  }
}

int export_golden(const Options& o, std::ostream& out) {
  const LoadedReport report = read_report(o.export_golden);
  if (report.golden) throw InputError(o.export_golden + ": already golden values, not a report");
  const nlohmann::json& runs = report.doc.at("runs");
  std::string labels;
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const std::string label = runs[i].value("label", std::string());
    labels += (labels.empty() ? "" : ", ") + label;
    if (o.run_label.empty() ? i == 0 : label == o.run_label) {
      const std::string text = golden_values(runs[i]).dump(2) + "\n";
      if (o.output.empty()) {
        out << text;
      } else {
        write_output(o.output, text);
      }
      return 0;
    }
  }
  throw InputError(o.export_golden + ": no run labelled \"" + o.run_label +
                   "\"; the report's runs: " + (labels.empty() ? "(none)" : labels));
}

std::vector<RunView> load_side(const std::vector<std::string>& paths, const MatchOptions& match,
                               std::vector<std::string>& files, std::vector<std::string>& skipped) {
  std::vector<std::filesystem::path> fs_paths(paths.begin(), paths.end());
  const ReportSet set = read_reports(fs_paths);
  std::vector<RunView> runs;
  for (const LoadedReport& report : set.reports) {
    files.push_back(report.path.string());
    for (RunView& run : runs_of(report, match)) runs.push_back(std::move(run));
  }
  skipped.insert(skipped.end(), set.skipped.begin(), set.skipped.end());
  return runs;
}

void list_runs(const std::vector<RunView>& runs, const char* side, std::ostream& out) {
  for (const RunView& run : runs) {
    out << side << "  " << run.name << "  [" << run.file << " #" << run.index << " \"" << run.label
        << "\"]\n    identity " << run.identity.dump() << "\n";
  }
}

bool use_color(const std::string& mode, bool terminal) {
  if (mode == "always") return true;
  if (mode == "never") return false;
  const char* no_color = std::getenv("NO_COLOR");
  return terminal && !(no_color && *no_color);
}

int compare_with_projection(const Options& o, const std::string& measured_path,
                            const std::string& projection_path, bool both, std::ostream& out,
                            const ProjectionRenderer& render) {
  if (both) {
    throw InputError(measured_path + " and " + projection_path +
                     ": both are perf-project projections; accepted: a measured report on one "
                     "side (a projection is compared with the measurement it predicts)");
  }
  const LoadedReport measured = read_report(measured_path);
  if (measured.golden) {
    throw InputError(measured_path +
                     ": golden values against a projection; accepted: a measured shardbench "
                     "report");
  }
  if (!render) {
    throw InputError(projection_path +
                     ": a perf-project projection, which this caller of perf-compare cannot "
                     "show; accepted: shardbench reports (the perf-compare program shows "
                     "projections)");
  }
  const nlohmann::json projection = read_json_file(projection_path);
  const auto as = [&](const std::string& format) {
    return render(measured.doc, measured_path, projection, projection_path, o.run_label, format);
  };
  out << as(o.format);
  if (!o.json_path.empty()) write_output(o.json_path, as("json"));
  if (!o.markdown_path.empty()) write_output(o.markdown_path, as("markdown"));
  if (!o.html_path.empty()) write_output(o.html_path, as("html"));
  return 0;
}

int run(const Options& o, const CLI::App& app, std::ostream& out, bool terminal,
        const ProjectionRenderer& projections) {
  if (!o.export_golden.empty()) return export_golden(o, out);

  std::vector<std::string> base = o.base, head = o.head;
  if (!o.positional.empty()) {
    if (o.positional.size() != 2 || !base.empty() || !head.empty()) {
      throw CLI::ValidationError("BASE HEAD",
                                 "give exactly two positional paths (BASE HEAD), or use --base and "
                                 "--head instead; got " +
                                     std::to_string(o.positional.size()) + " positional");
    }
    base.push_back(o.positional[0]);
    head.push_back(o.positional[1]);
  }
  if (base.empty() || head.empty()) {
    throw CLI::ValidationError("BASE HEAD",
                               "both sides are needed: BASE HEAD, or --base .. --head ..");
  }

  Thresholds t;
  if (!o.thresholds_file.empty()) apply_thresholds_file(o.thresholds_file, t);
  // Flags given on the command line win over the file.
  for (const ThresholdNumber& number : threshold_numbers()) {
    if (app.count(std::string("--") + number.key)) t.*number.value = o.numbers.*number.value;
  }
  if (o.no_utest) t.utest = false;
  if (o.fail_on_improvement) t.fail_on_improvement = true;
  if (o.allow_unmatched) t.allow_unmatched = true;
  if (o.paired) t.paired = true;
  validate_thresholds(t, "command line");
  validate_loss_tolerances(o.loss, "command line");

  // A perf-project document on either side: shown beside the measured report, without a verdict
  // (perf_compare_main's `projections`).
  std::error_code base_error, head_error;  // a looping link is reported by the readers below
  if (base.size() == 1 && head.size() == 1 &&
      std::filesystem::is_regular_file(base[0], base_error) &&
      std::filesystem::is_regular_file(head[0], head_error)) {
    const nlohmann::json b = read_json_file(base[0]), h = read_json_file(head[0]);
    if (is_projection_document(b) || is_projection_document(h)) {
      return compare_with_projection(o, is_projection_document(b) ? head[0] : base[0],
                                     is_projection_document(b) ? base[0] : head[0],
                                     is_projection_document(b) && is_projection_document(h), out,
                                     projections);
    }
  }

  MatchOptions match{o.ignore_identity, o.match_config};
  CompareResult result_files;
  std::vector<std::string> base_files, head_files, skipped;
  std::vector<RunView> base_runs = load_side(base, match, base_files, skipped);
  std::vector<RunView> head_runs = load_side(head, match, head_files, skipped);
  if (o.list_runs) {
    list_runs(base_runs, "base", out);
    list_runs(head_runs, "head", out);
    return 0;
  }
  NoiseOptions noise;
  if (!o.noise_model.empty()) noise.file = o.noise_model;
  CompareResult result = compare_sides(base_runs, head_runs, t, o.run_label, noise);
  judge_golden_losses(base_runs, head_runs, o.run_label, o.loss, result);
  result.base_files = base_files;
  result.head_files = head_files;
  result.skipped_files = skipped;

  std::optional<History> history;
  if (!o.history_dir.empty()) history = load_history(o.history_dir, t, match);

  if (o.format == "table") {
    out << render_table(result, use_color(o.color, terminal));
  } else if (o.format == "markdown") {
    out << render_markdown(result);
  } else if (o.format == "json") {
    out << render_json(result).dump(2) << "\n";
  } else if (o.format == "html") {
    out << render_html(result, history ? &*history : nullptr);
  }
  if (!o.json_path.empty()) write_output(o.json_path, render_json(result).dump(2) + "\n");
  if (!o.markdown_path.empty()) write_output(o.markdown_path, render_markdown(result));
  if (!o.html_path.empty())
    write_output(o.html_path, render_html(result, history ? &*history : nullptr));
  return result.exit_code();
}

}  // namespace

int perf_compare_main(const std::vector<std::string>& args, std::ostream& out, std::ostream& err,
                      bool stdout_is_terminal, const ProjectionRenderer& projections) {
  CLI::App app(kDescription, "perf-compare");
  Options o;
  app.add_option("paths", o.positional,
                 "BASE HEAD: report files, folders of reports, or golden values (BASE)");
  // Repeatable options take one value per flag: `--ignore_identity gpu BASE HEAD` leaves BASE and
  // HEAD to the positional paths.
  app.add_option("--base", o.base, "A base-side report or folder; repeatable")
      ->allow_extra_args(false);
  app.add_option("--head", o.head, "A head-side report or folder; repeatable")
      ->allow_extra_args(false);
  app.add_option("--thresholds", o.thresholds_file, thresholds_file_help());
  for (const ThresholdNumber& number : threshold_numbers()) {
    app.add_option(std::string("--") + number.key, o.numbers.*number.value, help_of(number));
  }
  app.add_flag("--no_utest", o.no_utest,
               "The threshold alone decides (no bootstrap interval, never inconclusive)");
  app.add_flag("--paired", o.paired,
               "Base and head ran interleaved (b1 h1 b2 h2 ..): the timing interval is Student's t "
               "over the log ratios of paired run medians (runs paired in start-time order; each "
               "side needs the same number of runs, at least 2)");
  app.add_flag("--allow_unmatched", o.allow_unmatched,
               "A run on one side only is listed but does not make the exit code 1");
  const std::string loss_group = "lm loss against golden values (evaluate.py's convergence check)";
  for (const LossToleranceField& field : loss_tolerance_fields()) {
    app.add_option(std::string("--") + field.key, o.loss.*field.value, help_of(field))
        ->group(loss_group);
  }
  app.add_flag("--fail_on_improvement", o.fail_on_improvement,
               "Exit 1 on an unexpected improvement too, as Megatron-Bridge's evaluate.py does");
  app.add_option("--ignore_identity", o.ignore_identity,
                 "Identity field left out of matching, e.g. gpu, sdpa_backend, "
                 "config.ddp.bucket_size; repeatable, one field per flag")
      ->allow_extra_args(false);
  app.add_option(
         "--match_config", o.match_config,
         "Extra resolved-config field that must agree, dotted (ddp.num_buckets); repeatable, one "
         "field per flag")
      ->allow_extra_args(false);
  app.add_option("--noise_model", o.noise_model,
                 "Run-to-run noise for comparisons with one run on a side: a calibration file "
                 "(scripts/compare_calibration writes one). Default: the calibration of the runs' "
                 "device and host in $SHARDBENCH_NOISE_DIR (else ~/.cache/shardbench/noise), else "
                 "the device's committed default (cpu, h200); with neither, the timing verdict "
                 "is inconclusive");
  app.add_option(
      "--run", o.run_label,
      "Run label: the head run golden values stand for, or the run --export_golden exports "
      "(default: each report's first run)");
  app.add_option("--format", o.format, "What goes to stdout (default: table)")
      ->check(CLI::IsMember({"table", "markdown", "json", "html"}));
  app.add_option("--json", o.json_path, "Also write the JSON result to this file");
  app.add_option("--markdown", o.markdown_path, "Also write markdown to this file");
  app.add_option("--html", o.html_path, "Also write the self-contained HTML page to this file");
  app.add_option(
      "--history", o.history_dir,
      "Folder of nightly reports (results/<branch>): adds history charts to the HTML page");
  app.add_option("--color", o.color, "Colour in the table: auto (terminal only), always, never")
      ->check(CLI::IsMember({"auto", "always", "never"}));
  app.add_flag("--list_runs", o.list_runs,
               "Print each side's runs and identities, compare nothing");
  app.add_option("--export_golden", o.export_golden,
                 "Write a report run as Megatron-Bridge golden values (stdout or -o)");
  app.add_option("-o,--output", o.output, "File for --export_golden");

  try {
    return parse_and_run(app, "perf-compare", args, out, err,
                         [&] { return run(o, app, out, stdout_is_terminal, projections); });
  } catch (const InputError& e) {
    err << "perf-compare: error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    // Nothing should get here (readers turn bad input into InputError); if something does, it
    // is still bad input: one line, exit 2.
    std::string what = e.what();
    if (what.rfind("[json.exception.", 0) == 0 && what.find("] ") != std::string::npos)
      what = what.substr(what.find("] ") + 2);
    err << "perf-compare: error: " << what << "\n";
    return 2;
  }
}

}  // namespace shardbench
