// Terminal table and markdown.
#include <algorithm>
#include <cstdio>
#include <sstream>
#include <vector>

#include "harness/compare/render.hpp"
#include "harness/compare/text_format.hpp"

namespace shardbench {
namespace {

const char* color_of(Verdict v) {
  switch (v) {
    case Verdict::kRegression:
    case Verdict::kLossMismatch:
    case Verdict::kFailed:
    case Verdict::kNan:
      return "\033[1;31m";  // bold red
    case Verdict::kImprovement:
      return "\033[1;36m";  // bold cyan: flagged, not wrong
    case Verdict::kInconclusive:
      return "\033[33m";  // yellow
    case Verdict::kOk:
      return "\033[32m";
    default:
      return "";
  }
}

std::string paint(const std::string& text, Verdict v, bool color) {
  const char* code = color_of(v);
  if (!color || *code == '\0') return text;
  return std::string(code) + text + "\033[0m";
}

std::string verdict_cell(const MetricRow& row) {
  if (row.gate == Gate::kNone) return "";
  return std::string(verdict_name(row.verdict));
}

std::string pad_right(const std::string& s, std::size_t width) {
  return s.size() >= width ? s : s + std::string(width - s.size(), ' ');
}
std::string pad_left(const std::string& s, std::size_t width) {
  return s.size() >= width ? s : std::string(width - s.size(), ' ') + s;
}

std::string files_line(const std::vector<RunRef>& runs) {
  std::string out;
  for (std::size_t i = 0; i < runs.size() && i < 3; ++i) {
    out += (i ? ", " : "") + runs[i].file + " [" + runs[i].label + "]";
  }
  if (runs.size() > 3) out += ", +" + std::to_string(runs.size() - 3) + " more";
  return out;
}

}  // namespace

std::string sample_line(const PairResult& pair) {
  char buffer[256];
  std::snprintf(buffer, sizeof buffer,
                "step samples %zu base (%zu run%s, cv %.1f%%, lag-1 autocorrelation %.2f, block "
                "%zu) vs %zu head (%zu run%s, cv %.1f%%, autocorrelation %.2f, block %zu)",
                pair.base_samples, pair.base_step_ms.size(),
                pair.base_step_ms.size() == 1 ? "" : "s", pair.base_cv * 100, pair.base_rho,
                pair.base_block, pair.head_samples, pair.head_step_ms.size(),
                pair.head_step_ms.size() == 1 ? "" : "s", pair.head_cv * 100, pair.head_rho,
                pair.head_block);
  std::string line = buffer;
  if (pair.run_pairs > 0) {
    line += "; interval over " + std::to_string(pair.run_pairs) + " paired runs (--paired)";
  }
  return line;
}

namespace {

std::string summary_line(const CompareResult& r) {
  std::ostringstream os;
  os << r.pairs.size() << " matched: " << r.count(Verdict::kRegression) << " regression, "
     << r.count(Verdict::kImprovement) << " unexpected improvement, "
     << r.count(Verdict::kInconclusive) << " inconclusive, " << r.count(Verdict::kLossMismatch)
     << " loss mismatch, " << r.count(Verdict::kNan) << " NaN loss, " << r.count(Verdict::kFailed)
     << " failed, " << r.count(Verdict::kOk) << " ok; unmatched: " << r.unmatched_base.size()
     << " base, " << r.unmatched_head.size() << " head"
     << (r.thresholds.allow_unmatched ? " (allowed)" : "") << "; exit " << r.exit_code();
  return os.str();
}

// The lines under a pair's metrics: its samples, loss parity, notes and config differences, in
// the terminal table's words or in markdown.
void write_pair_notes(std::ostream& os, const PairResult& pair, bool markdown) {
  os << (markdown ? "\n" : "  ") << sample_line(pair) << (markdown ? ".\n" : "\n");
  for (const std::string& line : pair.loss_parity) {
    os << (markdown ? "- " : "  ") << "loss parity " << line << "\n";
  }
  for (const std::string& note : pair.notes) os << (markdown ? "- " : "  note: ") << note << "\n";
  if (pair.config_differences.empty()) return;
  if (markdown) {
    os << "\n<details><summary>config differences (base -> head)</summary>\n\n";
    for (const std::string& d : pair.config_differences) os << "- `" << d << "`\n";
    os << "\n</details>\n";
  } else {
    os << "  config differences (base -> head):\n";
    for (const std::string& d : pair.config_differences) os << "    " << d << "\n";
  }
}

}  // namespace

std::string render_table(const CompareResult& result, bool color) {
  std::ostringstream os;
  os << "perf-compare: " << describe_thresholds(result.thresholds) << "\n";
  for (const PairResult& pair : result.pairs) {
    os << "\n"
       << pair.name << "  " << paint(verdict_heading(pair.verdict), pair.verdict, color) << "\n";
    os << "  base: " << files_line(pair.base_runs) << "\n  head: " << files_line(pair.head_runs)
       << "\n";
    std::vector<std::vector<std::string>> cells = {
        {"metric", "base", "head", "change", "interval", "verdict"}};
    for (const MetricRow& row : pair.metrics) {
      cells.push_back({row.title, format_metric_value(row.base, row.unit),
                       format_metric_value(row.head, row.unit), format_change(row.relative_change),
                       format_interval(row.ci_low, row.ci_high), verdict_cell(row)});
    }
    std::vector<std::size_t> width(6, 0);
    for (const auto& line : cells) {
      for (std::size_t c = 0; c < line.size(); ++c) width[c] = std::max(width[c], line[c].size());
    }
    for (std::size_t i = 0; i < cells.size(); ++i) {
      const auto& line = cells[i];
      os << "  " << pad_right(line[0], width[0]);
      for (std::size_t c = 1; c < 5; ++c) os << "  " << pad_left(line[c], width[c]);
      const Verdict v = i == 0 ? Verdict::kInfo : pair.metrics[i - 1].verdict;
      os << "  " << (i == 0 ? line[5] : paint(line[5], v, color)) << "\n";
    }
    write_pair_notes(os, pair, /*markdown=*/false);
  }
  if (!result.unmatched_base.empty() || !result.unmatched_head.empty()) os << "\n";
  for (const UnmatchedRun& u : result.unmatched_base) {
    os << "unmatched base: " << u.name << "  [" << u.file << "]\n";
  }
  for (const UnmatchedRun& u : result.unmatched_head) {
    os << "unmatched head: " << u.name << "  [" << u.file << "]\n";
  }
  for (const std::string& s : result.skipped_files)
    os << "skipped (not a shardbench report): " << s << "\n";
  os << "\nsummary: " << summary_line(result) << "\n";
  return os.str();
}

std::string render_markdown(const CompareResult& result) {
  std::ostringstream os;
  const int exit_code = result.exit_code();
  os << "## perf-compare: "
     << (exit_code == 1                   ? "**regression**"
         : exit_code == kExitInconclusive ? "**inconclusive**"
                                          : "no regression")
     << "\n\n";
  os << summary_line(result) << ".  \nGate: " << describe_thresholds(result.thresholds) << ".\n";
  for (const PairResult& pair : result.pairs) {
    os << "\n### `" << pair.name << "`: " << verdict_heading(pair.verdict) << "\n\n";
    os << "base: `" << files_line(pair.base_runs) << "`  \nhead: `" << files_line(pair.head_runs)
       << "`\n\n";
    os << "| metric | base | head | change | interval | verdict |\n|---|---:|---:|---:|---:|---|\n";
    for (const MetricRow& row : pair.metrics) {
      std::string verdict = verdict_cell(row);
      if (row.verdict == Verdict::kRegression || row.verdict == Verdict::kImprovement) {
        verdict = "**" + verdict + "**";
      }
      os << "| " << row.title << " | " << format_metric_value(row.base, row.unit) << " | "
         << format_metric_value(row.head, row.unit) << " | " << format_change(row.relative_change)
         << " | " << format_interval(row.ci_low, row.ci_high) << " | " << verdict << " |\n";
    }
    write_pair_notes(os, pair, /*markdown=*/true);
  }
  if (!result.unmatched_base.empty() || !result.unmatched_head.empty()) {
    os << "\n### Unmatched runs\n\n";
    for (const UnmatchedRun& u : result.unmatched_base)
      os << "- base only: `" << u.name << "` (" << u.file << ")\n";
    for (const UnmatchedRun& u : result.unmatched_head)
      os << "- head only: `" << u.name << "` (" << u.file << ")\n";
  }
  return os.str();
}

}  // namespace shardbench
