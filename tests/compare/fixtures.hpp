// Small synthetic reports for perf-compare's tests, written by the real report writer
// (build_report) so the fixtures have exactly the shape perf-launch produces.
#pragma once

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/compare/compare_sides.hpp"
#include "harness/report/report.hpp"

namespace shardbench::compare_fixtures {

// A calibration of the fixtures' machine (cpu-default on host "fixture") with no run-to-run noise,
// for tests of the step-level statistics with one run per side: the interval is the bootstrap's
// alone. The noise model itself is tested in compare_noise_model_test.cpp.
inline std::filesystem::path quiet_noise_dir() {
  static const std::filesystem::path dir = [] {
    const std::filesystem::path d = std::filesystem::temp_directory_path() /
                                    ("shardbench_quiet_noise_" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    std::ofstream(d / "cpu-default@fixture.json")
        << R"({"device_class": "cpu-default", "host": "fixture", "run_to_run_sd": 0, "pairs": 20})";
    return d;
  }();
  return dir;
}

inline NoiseOptions quiet_noise() {
  NoiseOptions noise;
  noise.dir = quiet_noise_dir();
  return noise;
}

struct FixtureRun {
  std::string label = "megatron_fsdp/optim_grads_params";
  Wrapper wrapper = Wrapper::kMegatronFsdp;
  std::string strategy = "optim_grads_params";
  bool distributed_optimizer = true;
  std::string recipe = "llama3_tiny_cpu";
  int world_size = 2;
  std::string device = "cpu";
  std::string compute_dtype = "fp32";
  std::string fp8;  // "hybrid/tensorwise" for an FP8 run
  std::string fp8_transpose_cache;
  std::vector<double> step_ms;
  int nan_loss_at_iteration = 0;  // 0: every loss finite
  int64_t static_bytes = 1 << 20;
  int64_t temporary_peak_bytes = 1 << 18;
  double loss_drift = 0;  // added to the loss per iteration: a run that trains differently
  std::optional<double> max_alloc_gb;  // adds allocator snapshots (a GPU run)
  std::vector<std::string> failure_reasons;
};

// n steps around `ms` with a fixed +-1% wiggle: steady, but no two equal (no ties).
// noisy_steps below has a +-`spread` wiggle instead.
inline std::vector<double> steady_steps(double ms, std::size_t n, double first_step_ms = 500) {
  std::vector<double> out;
  for (std::size_t i = 0; i < n; ++i) {
    const double wiggle = 0.01 * (static_cast<double>((i * 7) % 11) - 5.0) / 5.0;
    out.push_back(i == 0 ? first_step_ms : ms * (1 + wiggle) + 1e-6 * static_cast<double>(i));
  }
  return out;
}

// n steps around `ms` spread +-`spread` (relative) in a fixed, non-monotone order.
inline std::vector<double> noisy_steps(double ms, std::size_t n, double spread,
                                       double first_step_ms = 500) {
  std::vector<double> out;
  for (std::size_t i = 0; i < n; ++i) {
    const double wiggle = spread * (static_cast<double>((i * 7) % 11) - 5.0) / 5.0;
    out.push_back(i == 0 ? first_step_ms : ms * (1 + wiggle) + 1e-6 * static_cast<double>(i));
  }
  return out;
}

inline RunRecord make_run(const FixtureRun& f) {
  RunRecord r;
  r.label = f.label;
  r.wrapper = f.wrapper;
  r.strategy = f.strategy;
  r.distributed_optimizer = f.distributed_optimizer;
  r.recipe = f.recipe;
  r.world_size = f.world_size;
  r.global_batch_size = 8;
  r.micro_batch_size = 2;
  r.seq_length = 32;
  r.num_parameters = 158016;
  r.model_flops_per_step = 198180864.0;
  r.compute_dtype = f.compute_dtype;
  r.device = f.device;
  r.fp8 = f.fp8;
  r.fp8_transpose_cache = f.fp8_transpose_cache;
  r.backend = f.device == "cpu" ? "gloo" : "nccl";
  r.sdpa_backend = "math";
  r.config = {{"model", {{"hidden_size", 64}, {"num_layers", 2}}},
              {"ddp", {{"overlap_grad_reduce", true}, {"bucket_size", nullptr}}}};
  r.train_iters = static_cast<int64_t>(f.step_ms.size());
  for (std::size_t i = 0; i < f.step_ms.size(); ++i) {
    StepRecord s;
    s.iteration = static_cast<int>(i + 1);
    s.elapsed_ms = f.step_ms[i];
    s.loss = s.iteration == f.nan_loss_at_iteration
                 ? std::numeric_limits<double>::quiet_NaN()
                 : 6.2 - 0.01 * static_cast<double>(i) + f.loss_drift * static_cast<double>(i);
    s.grad_norm = 0.8;
    s.learning_rate = 1e-4;
    r.steps.push_back(s);
  }
  r.memory.model_weight_bytes = f.static_bytes / 4;
  r.memory.main_grad_bytes = f.static_bytes / 4;
  r.memory.optimizer_state_bytes = f.static_bytes / 2;
  r.memory.temporary_peak_bytes = f.temporary_peak_bytes;
  if (f.max_alloc_gb) {
    const auto bytes = static_cast<int64_t>(*f.max_alloc_gb * 1e9);
    for (const char* when : {"after_iteration_1", "after_iteration_2"}) {
      AllocatorSnapshot a;
      a.when = when;
      a.allocated_bytes = bytes / 2;
      a.max_allocated_bytes = bytes;
      a.reserved_bytes = bytes + bytes / 10;
      a.max_reserved_bytes = bytes + bytes / 10;
      r.allocator.push_back(a);
    }
  }
  r.failure_reasons = f.failure_reasons;
  return r;
}

inline nlohmann::json make_report(const std::vector<FixtureRun>& runs,
                                  const std::string& start_time = "2026-12-01T03:00:00Z",
                                  const std::string& revision = "0123456789abcdef") {
  EnvironmentInfo env;
  env.host_name = "fixture";
  env.shardbench_version = "0.1.0";
  env.start_time_utc = start_time;
  env.git = GitInfo{revision, "main", false, ""};
  std::vector<RunRecord> records;
  for (const FixtureRun& f : runs) {
    records.push_back(make_run(f));
    env.world_size = f.world_size;
    if (f.device != "cpu") {
      env.gpu_names.assign(static_cast<std::size_t>(f.world_size), f.device);
      env.gpu_count = f.world_size;
    }
  }
  return build_report(env, records);
}

inline FixtureRun ddp_run(std::vector<double> step_ms) {
  FixtureRun f;
  f.label = "ddp+distopt";
  f.wrapper = Wrapper::kDdp;
  f.strategy = "ddp";
  f.step_ms = std::move(step_ms);
  f.static_bytes = 2 << 20;
  return f;
}

inline FixtureRun fsdp_run(std::vector<double> step_ms) {
  FixtureRun f;
  f.step_ms = std::move(step_ms);
  return f;
}

// A fresh folder under the system temp folder, removed with the object.
class TempDir {
 public:
  explicit TempDir(const std::string& name)
      : path_(std::filesystem::temp_directory_path() /
              ("shardbench_compare_" + name + "_" + std::to_string(::getpid()))) {
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::string write(const std::string& relative, const nlohmann::json& doc) const {
    return write_text(relative, doc.dump(2));
  }
  std::string write_text(const std::string& relative, const std::string& text) const {
    const std::filesystem::path p = path_ / relative;
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p) << text;
    return p.string();
  }

 private:
  std::filesystem::path path_;
};

}  // namespace shardbench::compare_fixtures
