// Nightly history: every report under a folder (results/<branch>/<date>/..), one point per run
// identity and report folder, each point judged against the previous one with the same rules as
// perf-compare, so the HTML page can mark where a metric regressed.
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "harness/compare/run_view.hpp"
#include "harness/compare/thresholds.hpp"
#include "harness/compare/verdict.hpp"

namespace shardbench {

struct HistoryPoint {
  std::string session;         // the folder holding the reports (a nightly date)
  std::string start_time_utc;  // earliest run start in it
  std::string git_revision;
  std::map<std::string, std::optional<double>> values;  // metric name -> value
  std::map<std::string, Verdict> verdicts;              // gated metrics, against the previous point
};

struct HistorySeries {
  std::string key;
  std::string name;
  std::vector<HistoryPoint> points;  // in time order
};

struct HistoryMetric {
  std::string name, title, unit;
};

struct History {
  std::string folder;
  std::vector<std::string> sessions;  // all sessions in time order (the x axis)
  std::vector<HistoryMetric> metrics;
  std::vector<HistorySeries> series;
};

// Throws InputError when the folder holds no report or a report is unreadable.
History load_history(const std::filesystem::path& folder, const Thresholds& thresholds,
                     const MatchOptions& match = {});

}  // namespace shardbench
