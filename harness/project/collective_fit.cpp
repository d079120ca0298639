#include "harness/project/collective_fit.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "harness/project/whole_number.hpp"

namespace shardbench {

namespace {

using json = nlohmann::json;

// The benchmark families collectives_bench registers (variant_name in
// benchmarks/collectives_bench.cpp) and the collective each runs.
struct KnownVariant {
  std::string_view name;
  CollectiveOp op;
};
constexpr KnownVariant kKnownVariants[] = {
    {"all_gather", CollectiveOp::kAllGather},
    {"all_gather_in_place", CollectiveOp::kAllGather},
    {"reduce_scatter_sum", CollectiveOp::kReduceScatter},
    {"reduce_scatter_avg", CollectiveOp::kReduceScatter},
    {"reduce_scatter_sum_in_place", CollectiveOp::kReduceScatter},
    {"reduce_scatter_avg_in_place", CollectiveOp::kReduceScatter},
    {"all_reduce_sum", CollectiveOp::kAllReduce},
    {"all_reduce_avg", CollectiveOp::kAllReduce},
};

// A value as it reads in the file, cut short.
std::string shown(const json& value) {
  std::string text = value.dump();
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return text;
}

class Reader {
 public:
  explicit Reader(const std::string& path) : path_(path) {}

  [[noreturn]] void refuse(const std::string& field, const std::string& value,
                           const std::string& expected) const {
    throw std::invalid_argument("collectives_bench JSON '" + path_ + "': " + field + " is " +
                                value + "; expected " + expected);
  }

  const json& member(const json& object, const std::string& field, const std::string& key) const {
    const auto it = object.find(key);
    if (it == object.end()) refuse(field, "missing", expectation(key));
    return *it;
  }

  double positive_number(const json& object, const std::string& field,
                         const std::string& key) const {
    const json& v = member(object, field, key);
    if (!v.is_number() || !(v.get<double>() > 0) || !std::isfinite(v.get<double>())) {
      refuse(field, shown(v), expectation(key));
    }
    return v.get<double>();
  }

  const std::string& path() const { return path_; }

 private:
  static std::string expectation(const std::string& key) {
    if (key == "bytes") return "a number > 0 (the message size S)";
    if (key == "real_time") return "a number > 0 (the time per iteration)";
    if (key == "busbw") return "a number >= 0 (GB/s)";
    if (key == "time_unit") return "one of ns, us, ms, s";
    if (key == "name") return "a string such as all_gather/bf16/ranks:8/bytes:1048576";
    if (key == "world_size") return "an integer >= 1";
    if (key == "backend") return "a string (nccl or gloo)";
    if (key == "context") return "an object (the run's context block)";
    if (key == "benchmarks") return "a non-empty array of benchmark entries";
    return "a value";
  }

  std::string path_;
};

double seconds_per_unit(const Reader& r, const json& entry, const std::string& field) {
  const json& unit = r.member(entry, field, "time_unit");
  const std::string u = unit.is_string() ? unit.get<std::string>() : "";
  if (u == "ns") return 1e-9;
  if (u == "us") return 1e-6;
  if (u == "ms") return 1e-3;
  if (u == "s") return 1.0;
  r.refuse(field, shown(unit), "one of ns, us, ms, s");
}

int world_size(const Reader& r, const json& context) {
  const json& v = r.member(context, "context.world_size", "world_size");
  // collectives_bench writes custom context values as strings.
  std::string text = v.is_string() ? v.get<std::string>() : v.is_number_integer() ? v.dump() : "";
  const std::optional<long> world = parse_whole_number(text);
  if (!world || *world < 1 || *world > std::numeric_limits<int>::max()) {
    r.refuse("context.world_size", shown(v), "an integer >= 1");
  }
  return static_cast<int>(*world);
}

CollectiveOp variant_op(const Reader& r, const std::string& variant, const std::string& field,
                        const json& name) {
  std::string names;
  for (const KnownVariant& k : kKnownVariants) {
    if (k.name == variant) return k.op;
    names += (names.empty() ? "" : ", ") + std::string(k.name);
  }
  r.refuse(field, shown(name), "a collectives_bench variant: " + names);
}

}  // namespace

AlphaBetaFit fit_alpha_beta(const std::vector<double>& wire_bytes,
                            const std::vector<double>& seconds) {
  if (wire_bytes.size() != seconds.size() || seconds.empty()) {
    throw std::invalid_argument("fit_alpha_beta: need as many wire sizes as times, at least one (" +
                                std::to_string(wire_bytes.size()) + " sizes, " +
                                std::to_string(seconds.size()) + " times)");
  }
  // Weighted sums with w = 1/t^2: minimising sum w (t - a - b x)^2 minimises relative residuals.
  double s0 = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (size_t i = 0; i < seconds.size(); ++i) {
    const double t = seconds[i], x = wire_bytes[i];
    if (!(t > 0) || !(x >= 0)) {
      throw std::invalid_argument("fit_alpha_beta: point " + std::to_string(i) + " has time " +
                                  std::to_string(t) + " s and " + std::to_string(x) +
                                  " wire bytes; need time > 0 and bytes >= 0");
    }
    const double w = 1.0 / (t * t);
    s0 += w;
    sx += w * x;
    sy += w * t;
    sxx += w * x * x;
    sxy += w * x * t;
  }
  const double mean_only = sy / s0;  // the best constant
  const double det = s0 * sxx - sx * sx;
  if (!(det > 1e-12 * s0 * sxx)) return {mean_only, 0};  // every x equal: no slope to fit
  AlphaBetaFit fit;
  fit.seconds_per_byte = (s0 * sxy - sx * sy) / det;
  fit.alpha_s = (sy - fit.seconds_per_byte * sx) / s0;
  if (fit.alpha_s < 0) {
    // The constrained optimum of a convex quadratic lies on the bound it breaks.
    fit.alpha_s = 0;
    fit.seconds_per_byte = sxy / sxx;
  }
  if (!(fit.seconds_per_byte > 0)) return {mean_only, 0};  // time does not grow with size
  return fit;
}

const CollectiveFit& CollectiveBenchRun::fit(std::string_view variant) const {
  std::string names;
  for (const CollectiveFit& f : fits) {
    if (f.variant == variant) return f;
    names += (names.empty() ? "" : ", ") + f.variant;
  }
  throw std::invalid_argument("collectives_bench JSON '" + path + "' has no variant '" +
                              std::string(variant) + "'; it holds " + names);
}

CollectiveBenchRun read_collectives_bench(std::string_view json_text, const std::string& path) {
  const Reader r(path);
  json doc;
  try {
    doc = json::parse(json_text);
  } catch (const json::parse_error& e) {
    r.refuse("the text", "not JSON (" + std::string(e.what()) + ")",
             "Google Benchmark JSON (--benchmark_out_format=json)");
  }
  if (!doc.is_object()) r.refuse("the document", shown(doc), "an object");
  const json& context = r.member(doc, "context", "context");
  if (!context.is_object()) r.refuse("context", shown(context), "an object");
  CollectiveBenchRun run;
  run.path = path;
  run.world = world_size(r, context);
  const json& backend = r.member(context, "context.backend", "backend");
  if (!backend.is_string()) r.refuse("context.backend", shown(backend), "a string");
  run.backend = backend.get<std::string>();
  if (const auto it = context.find("device"); it != context.end() && it->is_string()) {
    run.device = it->get<std::string>();
  }
  const json& entries = r.member(doc, "benchmarks", "benchmarks");
  if (!entries.is_array() || entries.empty()) {
    r.refuse("benchmarks", shown(entries), "a non-empty array of benchmark entries");
  }

  for (size_t i = 0; i < entries.size(); ++i) {
    const json& e = entries[i];
    const std::string at = "benchmarks[" + std::to_string(i) + "]";
    if (!e.is_object()) r.refuse(at, shown(e), "an object");
    if (const auto it = e.find("run_type"); it != e.end() && *it == "aggregate") continue;
    const json& name = r.member(e, at + ".name", "name");
    if (!name.is_string()) r.refuse(at + ".name", shown(name), "a string");
    if (const auto it = e.find("error_occurred"); it != e.end() && *it == true) {
      r.refuse(at + ".error_occurred", "true (" + shown(e.value("error_message", json(""))) + ")",
               "a run that completed");
    }
    const std::string full = name.get<std::string>();
    const std::string variant = full.substr(0, full.find('/'));
    const CollectiveOp op = variant_op(r, variant, at + ".name", name);
    // A name's ranks:N must agree with the context: wire bytes depend on it.
    if (const size_t pos = full.find("/ranks:"); pos != std::string::npos) {
      const std::string ranks = full.substr(pos + 7, full.find('/', pos + 1) - pos - 7);
      if (ranks != std::to_string(run.world)) {
        r.refuse(at + ".name", shown(name),
                 "ranks:" + std::to_string(run.world) + " as context.world_size says");
      }
    }
    CollectiveSample s;
    const double bytes = r.positive_number(e, at + ".bytes", "bytes");
    if (bytes != std::floor(bytes) || bytes > 9.0e18) {
      r.refuse(at + ".bytes", shown(e["bytes"]), "a whole number of bytes");
    }
    s.bytes = static_cast<int64_t>(bytes);
    s.seconds = r.positive_number(e, at + ".real_time", "real_time") *
                seconds_per_unit(r, e, at + ".time_unit");
    const json& busbw = r.member(e, at + ".busbw", "busbw");
    if (!busbw.is_number() || !(busbw.get<double>() >= 0)) {
      r.refuse(at + ".busbw", shown(busbw), "a number >= 0 (GB/s)");
    }
    s.busbw_gbps = busbw.get<double>();
    // The counter must be what bytes, time and world give (collective_bw.hpp): a file whose
    // busbw disagrees has another unit, another world size or another definition.
    const double expected = collective_bandwidth(op, s.bytes, s.seconds, run.world).busbw_gbps;
    if (std::abs(s.busbw_gbps - expected) > 0.01 * expected + 1e-9) {
      std::ostringstream want;
      want << "bytes / time x nccl-tests factor = " << expected << " GB/s (within 1%)";
      r.refuse(at + ".busbw", shown(busbw), want.str());
    }
    auto found = std::find_if(run.fits.begin(), run.fits.end(),
                              [&](const CollectiveFit& f) { return f.variant == variant; });
    if (found == run.fits.end()) {
      run.fits.push_back(CollectiveFit{variant, op, {}, 0, 0, 0});
      found = run.fits.end() - 1;
    }
    found->samples.push_back(s);
  }
  if (run.fits.empty()) {
    r.refuse("benchmarks", "only aggregate entries", "at least one iteration entry");
  }

  for (CollectiveFit& f : run.fits) {
    std::vector<double> x, t;
    for (const CollectiveSample& s : f.samples) {
      x.push_back(wire_bytes(f.op, s.bytes, run.world));
      t.push_back(s.seconds);
    }
    const AlphaBetaFit ab = fit_alpha_beta(x, t);
    f.alpha_s = ab.alpha_s;
    f.bandwidth_gbps = ab.seconds_per_byte > 0 ? 1e-9 / ab.seconds_per_byte : 0;
    for (size_t i = 0; i < t.size(); ++i) {
      const double model = ab.alpha_s + x[i] * ab.seconds_per_byte;
      f.max_relative_residual = std::max(f.max_relative_residual, std::abs(t[i] - model) / t[i]);
    }
  }
  return run;
}

CollectiveBenchRun load_collectives_bench(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw std::invalid_argument("collectives_bench JSON '" + path +
                                "': the file is missing or unreadable; expected a file written by "
                                "collectives_bench --benchmark_out=<file>");
  }
  std::ostringstream text;
  text << in.rdbuf();
  return read_collectives_bench(text.str(), path);
}

CollectiveModel with_measured_intra_node(const CollectiveModel& base, const CollectiveBenchRun& run,
                                         const MeasuredVariants& variants) {
  CollectiveModel model = base;
  const std::pair<CollectiveOp, const std::string*> chosen[] = {
      {CollectiveOp::kAllGather, &variants.all_gather},
      {CollectiveOp::kReduceScatter, &variants.reduce_scatter},
      {CollectiveOp::kAllReduce, &variants.all_reduce},
  };
  std::string measured;
  for (const auto& [op, variant] : chosen) {
    const CollectiveFit& f = run.fit(*variant);
    if (f.op != op) {
      throw std::invalid_argument("measured variant '" + *variant + "' runs " + to_string(f.op) +
                                  "; expected a variant of " + to_string(op));
    }
    OpCost& cost = model.op(op);
    if (f.bandwidth_gbps > 0) cost.intra.bandwidth_gbps = f.bandwidth_gbps;
    cost.base_latency_us =
        std::max(0.0, f.alpha_s * 1e6 - ring_steps(op, run.world) * cost.intra.step_latency_us);
    measured += (measured.empty() ? "" : ", ") + *variant;
  }
  model.source = base.source + "; within a node measured (" + measured + ") at world size " +
                 std::to_string(run.world) + " on " + run.backend +
                 (run.device.empty() ? "" : " " + run.device) + " from " + run.path +
                 (run.world == 1 ? " (world size 1: latency only, bandwidth from the table)" : "");
  return model;
}

}  // namespace shardbench
