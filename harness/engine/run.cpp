#include "harness/engine/run.hpp"

#include <filesystem>
#include <fstream>
#include <iostream>
#include <vector>

#include "harness/config/field_registry.hpp"
#include "harness/config/resolve.hpp"
#include "harness/config/wrappers.hpp"
#include "harness/engine/bench_run.hpp"
#include "harness/engine/device_runtime.hpp"
#include "harness/engine/worker_context.hpp"
#include "harness/launch/heartbeat.hpp"
#include "harness/launch/launch_env.hpp"
#include "harness/report/comparison.hpp"
#include "harness/report/console.hpp"
#include "harness/report/environment.hpp"
#include "harness/report/report.hpp"
#include "harness/report/report_path.hpp"

namespace shardbench {
namespace {

// This process's argv, for the report (perf-launch workers run the user's own command line).
std::vector<std::string> own_command_line() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::vector<std::string> words;
  std::string word;
  while (std::getline(in, word, '\0')) words.push_back(word);
  return words;
}

}  // namespace

int run_worker(const ResolvedConfig& resolved, const LaunchEnv& env) {
  const auto start = std::chrono::system_clock::now();
  heartbeat("starting");
  try {
    // Before any communicator or worker thread exists: this forks git.
    EnvironmentInfo info = env.rank == 0 ? collect_environment(own_command_line(), start)
                                         : EnvironmentInfo{};
    const ConfigContainer& config = resolved.config;
    WorkerContext ctx = make_worker_context(config, env);
    if (env.rank == 0) {
      const RuntimeVersions v = runtime_versions();
      info.torch_version = v.torch;
      info.cuda_version = ctx.device.is_cuda() ? v.cuda : "";
      info.nccl_version = ctx.backend == CommBackend::kNccl ? v.nccl : "";
      info.cudnn_version = ctx.device.is_cuda() ? v.cudnn : "";
      info.world_size = env.world_size;
      info.node_count = std::max(1, env.world_size / std::max(1, env.local_world_size));
      if (ctx.device.is_cuda()) {
        info.gpu_names.push_back(device_name(ctx.device));
        info.gpu_count = env.world_size;
      }
    }

    // The requested run, then the comparison runs (other wrappers, the DDP baseline) on the same
    // model, batch, dtype policy and seed; validation already checked their configs.
    ValidationContext validation;
    validation.num_gpus = env.world_size;
    std::vector<RunRecord> runs;
    const nlohmann::json provenance = resolved.provenance.to_json();
    for (const PlannedRun& planned : planned_runs(config, validation)) {
      nlohmann::json run_prov = provenance;
      if (!planned.derivation.empty()) {
        if (env.rank == 0) {
          std::cout << "perf-launch: measuring " << planned.wrapper << " (" << planned.derivation
                    << ")" << std::endl;
        }
        run_prov["derived"] = planned.derivation;
        // Derived runs never save or load: only the requested run checkpoints.
        for (const char* key : {"checkpoint.save", "checkpoint.load"}) {
          run_prov[key].push_back(
              {{"source", "comparison run: only the requested run checkpoints"},
               {"previous", get_field(config, key)},
               {"value", nullptr}});
        }
      }
      runs.push_back(run_benchmark(planned.config, run_prov, resolved.model_recipe_name, ctx));
    }
    ctx.pgs.world->barrier();
    if (env.rank == 0) {
      const nlohmann::json report = build_report(info, runs);
      const RunRecord& head = runs.front();
      const std::filesystem::path path =
          config.shardbench.report_path
              ? std::filesystem::path(*config.shardbench.report_path)
              : default_report_path(config.shardbench.report_dir, head.recipe, head.wrapper,
                                    head.strategy, head.distributed_optimizer, head.world_size,
                                    start);
      write_report(path, report);
      const std::string summary = format_comparison_summary(report);
      if (!summary.empty()) std::cout << "\n" << summary;
      std::cout << "perf-launch: report written to " << path.string() << std::endl;
      // A run that trains differently from DDP is a failed comparison, however fast it is.
      if (const std::string bad = loss_parity_failures(report); !bad.empty()) {
        std::cerr << "perf-launch: loss parity failed:\n" << bad;
        heartbeat_error("loss parity failed");
        return 1;
      }
    }
    heartbeat("done");
    return 0;
  } catch (const std::exception& e) {
    const std::string message = std::string("rank ") + std::to_string(env.rank) + ": " + e.what();
    std::cerr << "perf-launch: " << message << std::endl;
    heartbeat_error(e.what());
    return 1;
  }
}

}  // namespace shardbench
