#include "harness/compare/loss_check.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "harness/compare/report_reader.hpp"

namespace shardbench {
namespace {

std::string fixed(double value, int digits) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*f", digits, value);
  return buffer;
}

// |head - golden| / |golden|; |head| where golden is 0 (evaluate.py's rule).
double relative_diff(double head, double golden) {
  return golden != 0 ? std::abs(head - golden) / std::abs(golden) : std::abs(head);
}

struct Point {
  long long step = 0;  // 0-based step key, as in golden values
  std::optional<double> head;
  double golden = 0;
};

}  // namespace

void validate_loss_tolerances(const LossTolerances& t, const std::string& where) {
  for (const LossToleranceField& field : loss_tolerance_fields()) {
    const double value = t.*field.value;
    if (!field.range.contains(value)) {
      throw InputError(where + ": " + field.key + " is " + fixed(value, 6) +
                       "; accepted: " + field.range.described());
    }
  }
}

namespace {

// The compared steps: those with a golden loss, less the leading skip_first_percent_loss share.
std::vector<Point> compared_points(const std::vector<std::optional<double>>& head,
                                   const std::vector<std::optional<double>>& golden,
                                   double skip_fraction, const std::vector<long long>& step_keys) {
  std::vector<Point> points;
  for (std::size_t i = 0; i < golden.size(); ++i) {
    if (!golden[i]) continue;
    const long long key = i < step_keys.size() ? step_keys[i] : static_cast<long long>(i);
    points.push_back({key, i < head.size() ? head[i] : std::nullopt, *golden[i]});
  }
  const std::size_t skip =
      static_cast<std::size_t>(static_cast<double>(points.size()) * skip_fraction);
  points.erase(points.begin(), points.begin() + static_cast<std::ptrdiff_t>(skip));
  return points;
}

// Adds one check's line to a LossCheck, passed or failed.
struct CheckLines {
  LossCheck& out;
  void fail(const char* check, std::string line) {
    out.passed = false;
    out.failed.push_back(check);
    out.lines.push_back("FAIL " + std::move(line));
  }
  void pass(std::string line) { out.lines.push_back("ok   " + std::move(line)); }
  void add(bool failed, const char* check, std::string line) {
    if (failed) {
      fail(check, std::move(line));
    } else {
      pass(std::move(line));
    }
  }
};

// Pearson correlation over the points both sides have. Undefined (a flat curve, fewer than two
// points) is not a failure: evaluate.py's NaN < threshold is false too.
void check_correlation(const std::vector<Point>& points, const LossTolerances& t, CheckLines& v) {
  double sh = 0, sg = 0, shh = 0, sgg = 0, shg = 0, m = 0;
  for (const Point& p : points) {
    if (!p.head) continue;
    sh += *p.head;
    sg += p.golden;
    shh += *p.head * *p.head;
    sgg += p.golden * p.golden;
    shg += *p.head * p.golden;
    ++m;
  }
  const double var_h = m * shh - sh * sh, var_g = m * sgg - sg * sg;
  if (!(m >= 2 && var_h > 0 && var_g > 0)) {
    v.pass("lm loss correlation not defined (flat curve or < 2 points): not judged");
    return;
  }
  const double r = (m * shg - sh * sg) / std::sqrt(var_h * var_g);
  v.add(r < t.correlation_threshold, "correlation",
        "lm loss correlation " + fixed(r, 4) + " (threshold " + fixed(t.correlation_threshold, 4) +
            ")");
}

// Point-wise, with a tolerance chosen by the golden loss's magnitude.
void check_point_wise(const std::vector<Point>& points, const LossTolerances& t, CheckLines& v) {
  std::size_t failures = 0;
  std::string first_failure;
  for (const Point& p : points) {
    const double tolerance = p.golden > 2.0   ? t.high_loss_tolerance
                             : p.golden > 0.5 ? t.medium_loss_tolerance
                                              : t.low_loss_tolerance;
    if (p.head && relative_diff(*p.head, p.golden) <= tolerance) continue;
    if (++failures == 1) {
      first_failure = "step " + std::to_string(p.step) + ": " +
                      (p.head ? fixed(*p.head, 6) : std::string("missing")) + " vs golden " +
                      fixed(p.golden, 6) +
                      (p.head ? " (diff " + fixed(relative_diff(*p.head, p.golden), 4) + " > " +
                                    fixed(tolerance, 4) + ")"
                              : std::string());
    }
  }
  const double ratio = static_cast<double>(failures) / static_cast<double>(points.size());
  v.add(ratio > t.max_outlier_ratio, "point_wise_tolerance",
        "lm loss point-wise: " + std::to_string(failures) + "/" + std::to_string(points.size()) +
            " steps outside tolerance" + (failures ? ", first " + first_failure : std::string()) +
            " (allowed share " + fixed(t.max_outlier_ratio, 2) + ")");
}

// The last compared step.
void check_final_loss(const Point& last, const LossTolerances& t, CheckLines& v) {
  if (!last.head) {
    v.fail("final_loss",
           "lm loss final (step " + std::to_string(last.step) + "): missing in the run");
    return;
  }
  const double diff = relative_diff(*last.head, last.golden);
  v.add(diff > t.final_loss_tolerance, "final_loss",
        "lm loss final (step " + std::to_string(last.step) + "): " + fixed(*last.head, 6) +
            " vs golden " + fixed(last.golden, 6) + ", diff " + fixed(diff, 4) + " (tolerance " +
            fixed(t.final_loss_tolerance, 4) + ")");
}

// Residual outliers: |r - mean(r)| > outlier_threshold * std(r) (population std).
void check_residual_outliers(const std::vector<Point>& points, const LossTolerances& t,
                             CheckLines& v) {
  double sum = 0, count = 0;
  for (const Point& p : points) {
    if (p.head) sum += *p.head - p.golden, ++count;
  }
  if (count == 0) return;
  const double mean = sum / count;
  double sq = 0;
  for (const Point& p : points) {
    if (p.head) sq += (*p.head - p.golden - mean) * (*p.head - p.golden - mean);
  }
  const double sd = std::sqrt(sq / count);
  std::size_t outliers = 0;
  for (const Point& p : points) {
    if (p.head && std::abs(*p.head - p.golden - mean) > t.outlier_threshold * sd) ++outliers;
  }
  const double share = static_cast<double>(outliers) / static_cast<double>(points.size());
  v.add(share > t.max_outlier_ratio, "outliers",
        "lm loss residual outliers: " + std::to_string(outliers) + "/" +
            std::to_string(points.size()) + " beyond " + fixed(t.outlier_threshold, 1) +
            " sigma (allowed share " + fixed(t.max_outlier_ratio, 2) + ")");
}

}  // namespace

LossCheck check_loss_curve(const std::vector<std::optional<double>>& head,
                           const std::vector<std::optional<double>>& golden,
                           const LossTolerances& t, const std::vector<long long>& step_keys) {
  const std::vector<Point> points =
      compared_points(head, golden, t.skip_first_percent_loss, step_keys);
  LossCheck out;
  if (points.empty()) return out;
  out.judged = true;
  CheckLines verdicts{out};
  check_correlation(points, t, verdicts);
  check_point_wise(points, t, verdicts);
  check_final_loss(points.back(), t, verdicts);
  check_residual_outliers(points, t, verdicts);
  return out;
}

void judge_golden_losses(const std::vector<RunView>& base, const std::vector<RunView>& head,
                         const std::string& golden_head_label, const LossTolerances& tolerances,
                         CompareResult& result) {
  for (const RunView& golden : base) {
    if (!golden.golden) continue;
    const RunView* like = golden_stand_in(head, golden_head_label);
    if (!like) continue;  // compare_sides has already refused this
    for (PairResult& pair : result.pairs) {
      if (pair.key != like->key) continue;
      // Golden files may be downsampled: compare by iteration, not by position.
      std::map<long long, std::optional<double>> head_by_iteration;
      for (std::size_t i = 0; i < like->loss.size() && i < like->iterations.size(); ++i) {
        head_by_iteration[like->iterations[i]] = like->loss[i];
      }
      std::vector<std::optional<double>> head_loss, golden_loss;
      std::vector<long long> step_keys;
      for (std::size_t i = 0; i < golden.loss.size() && i < golden.iterations.size(); ++i) {
        auto it = head_by_iteration.find(golden.iterations[i]);
        head_loss.push_back(it == head_by_iteration.end() ? std::nullopt : it->second);
        golden_loss.push_back(golden.loss[i]);
        step_keys.push_back(golden.iterations[i] - 1);
      }
      const LossCheck check = check_loss_curve(head_loss, golden_loss, tolerances, step_keys);
      if (!check.judged) {
        pair.notes.push_back("lm loss vs golden values: no golden loss to compare");
        continue;
      }
      for (const std::string& line : check.lines) {
        pair.notes.push_back("lm loss vs golden values: " + line);
      }
      if (!check.passed) pair.verdict = std::max(pair.verdict, Verdict::kRegression);
    }
  }
}

}  // namespace shardbench
