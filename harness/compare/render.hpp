// perf-compare's outputs. All take the same CompareResult, so they never disagree.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "harness/compare/history.hpp"
#include "harness/compare/verdict.hpp"

namespace shardbench {

// Aligned terminal table; ANSI colour on the verdict words when `color` (a terminal).
std::string render_table(const CompareResult& result, bool color);

// "step samples 28 base (1 run, cv 3.1%, lag-1 autocorrelation 0.35, block 3) vs ..": what the
// timing interval was computed from, shared by the table, markdown and HTML.
std::string sample_line(const PairResult& pair);

// GitHub-flavoured markdown for a review comment: a summary line, one table per matched pair,
// notes, and unmatched runs.
std::string render_markdown(const CompareResult& result);

// Machine-readable: {"generator": "perf-compare", "format_version", "thresholds", "base",
// "head", "pairs": [..], "unmatched", "summary": {counts, "exit_code"}}.
nlohmann::json render_json(const CompareResult& result);
inline constexpr const char* kCompareJsonVersion = "2.0";  // 2.0: interval, inconclusive

// One self-contained HTML page (inline CSS and SVG, no network): summary, the tables, charts of
// throughput and memory per strategy for both sides, DDP vs FSDP side by side, and, when
// `history` is given, each metric's history with regressions marked.
std::string render_html(const CompareResult& result, const History* history = nullptr);

}  // namespace shardbench
