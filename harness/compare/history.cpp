#include "harness/compare/history.hpp"

#include <algorithm>
#include <set>

#include "harness/compare/compare_sides.hpp"
#include "harness/compare/report_reader.hpp"

namespace shardbench {

History load_history(const std::filesystem::path& folder, const Thresholds& thresholds,
                     const MatchOptions& match) {
  History history;
  history.folder = folder.string();
  const ReportSet set = read_reports({folder});
  std::vector<RunView> runs;
  for (const LoadedReport& report : set.reports) {
    for (RunView& run : runs_of(report, match)) runs.push_back(std::move(run));
  }
  // key -> session -> runs; a session is the folder of the report file (one nightly).
  std::map<std::string, std::map<std::string, std::vector<const RunView*>>> grouped;
  std::map<std::string, std::string> session_time;
  std::vector<std::string> key_order;
  for (const RunView& run : runs) {
    const std::string session = std::filesystem::path(run.file).parent_path().filename().string();
    if (!grouped.contains(run.key)) key_order.push_back(run.key);
    grouped[run.key][session].push_back(&run);
    auto [it, inserted] = session_time.emplace(session, run.start_time_utc);
    if (!inserted && run.start_time_utc < it->second) it->second = run.start_time_utc;
  }
  auto by_time = [&](const std::string& a, const std::string& b) {
    return std::pair(session_time[a], a) < std::pair(session_time[b], b);
  };
  for (const auto& [session, time] : session_time) history.sessions.push_back(session);
  std::sort(history.sessions.begin(), history.sessions.end(), by_time);

  std::set<std::string> seen_metrics;
  for (const std::string& key : key_order) {
    HistorySeries series;
    series.key = key;
    std::vector<std::string> sessions;
    for (const auto& [session, session_runs] : grouped[key]) sessions.push_back(session);
    std::sort(sessions.begin(), sessions.end(), by_time);
    const std::vector<const RunView*>* previous = nullptr;
    for (const std::string& session : sessions) {
      const std::vector<const RunView*>& current = grouped[key][session];
      // The first point is compared with itself: its values, no verdicts.
      const PairResult pair = compare_pair(previous ? *previous : current, current, thresholds);
      series.name = pair.name;
      HistoryPoint point;
      point.session = session;
      point.start_time_utc = session_time[session];
      point.git_revision = current.front()->git_revision;
      // Throughput and step-time charts all carry the timing gate's verdict: they show one
      // change in different units.
      std::optional<Verdict> timing;
      for (const MetricRow& row : pair.metrics) {
        if (row.gate == Gate::kTiming) timing = row.verdict;
      }
      for (const MetricRow& row : pair.metrics) {
        point.values[row.name] = row.head;
        if (previous && row.gate != Gate::kNone) point.verdicts[row.name] = row.verdict;
        if (previous && row.gate == Gate::kNone && timing) point.verdicts[row.name] = *timing;
        if (seen_metrics.insert(row.name).second)
          history.metrics.push_back({row.name, row.title, row.unit});
      }
      if (previous && pair.verdict == Verdict::kNan) point.verdicts["loss"] = Verdict::kNan;
      series.points.push_back(std::move(point));
      previous = &current;
    }
    history.series.push_back(std::move(series));
  }
  return history;
}

}  // namespace shardbench
