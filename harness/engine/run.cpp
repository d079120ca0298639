#include "harness/engine/run.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <random>
#include <thread>
#include <vector>

#include <unistd.h>

#include <ATen/Parallel.h>

#include "harness/config/field_registry.hpp"
#include "harness/config/resolve.hpp"
#include "harness/config/wrappers.hpp"
#include "harness/console_line.hpp"
#include "harness/engine/bench_run.hpp"
#include "harness/engine/device_runtime.hpp"
#include "harness/engine/worker_context.hpp"
#include "harness/launch/heartbeat.hpp"
#include "harness/launch/launch_env.hpp"
#include "harness/launch/shared_gpu.hpp"
#include "harness/parallel/process_group.hpp"
#include "harness/report/comparison.hpp"
#include "harness/report/console.hpp"
#include "harness/report/environment.hpp"
#include "harness/report/report.hpp"
#include "harness/report/report_path.hpp"
#include "harness/report/run_order.hpp"

namespace shardbench {
namespace {

// How long a rank that failed only because a peer did waits before reporting it: the peer is
// past the same collective and about to print its reason and exit.
constexpr std::chrono::milliseconds kPeerFailureDelay{2000};

// This process's argv, for the report (perf-launch workers run the user's own command line).
std::vector<std::string> own_command_line() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::vector<std::string> words;
  std::string word;
  while (std::getline(in, word, '\0')) words.push_back(word);
  return words;
}

// The micro-batch a comparison run tries after running out of memory at `micro_batch`: the
// largest below its half that still divides the global batch over the data-parallel ranks; 0
// when there is none (micro-batch 1).
int64_t smaller_micro_batch(int64_t micro_batch, int64_t global_batch, int64_t dp) {
  for (int64_t m = micro_batch / 2; m >= 1; --m) {
    if (global_batch % (m * dp) == 0) return m;
  }
  return 0;
}

// Runs `planned`. A comparison run that runs out of device memory on its one rank is tried again
// with a smaller micro-batch and the same global batch (more micro-batches per step), down to 1:
// that the baseline does not fit is an answer too, and the run at a micro-batch that fits is the
// next one (docs/out-of-memory.md). The record keeps every attempt (RunRecord::out_of_memory).
RunRecord run_fitting(const PlannedRun& planned, nlohmann::json provenance,
                      const std::string& recipe, WorkerContext& ctx) {
  ConfigContainer config = planned.config;
  std::vector<OutOfMemoryAttempt> earlier;
  for (;;) {
    RunRecord rec = run_benchmark(config, provenance, recipe, ctx);
    const int64_t micro_batch = config.train.micro_batch_size;
    const int64_t next = smaller_micro_batch(micro_batch, config.train.global_batch_size, ctx.dp);
    if (rec.out_of_memory.empty() || planned.derivation.empty() || next == 0) {
      rec.out_of_memory.insert(rec.out_of_memory.begin(), earlier.begin(), earlier.end());
      return rec;
    }
    const OutOfMemoryAttempt& oom = rec.out_of_memory.back();
    if (ctx.rank == 0) {
      constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
      char figures[96];
      std::snprintf(figures, sizeof figures, "allocator peak %.2f of %.2f GiB",
                    static_cast<double>(oom.max_allocated_bytes) / kGiB,
                    static_cast<double>(oom.device_total_bytes) / kGiB);
      std::cout << "perf-launch: " << rec.label
                << " ran out of device memory at micro_batch_size=" << micro_batch << " ("
                << figures << "); trying micro_batch_size=" << next
                << " with the same global batch of " << config.train.global_batch_size << std::endl;
    }
    earlier.insert(earlier.end(), rec.out_of_memory.begin(), rec.out_of_memory.end());
    provenance["train.micro_batch_size"].push_back(
        {{"source", "comparison run: out of device memory at micro_batch_size=" +
                        std::to_string(micro_batch) + ", tried again smaller"},
         {"previous", micro_batch},
         {"value", next}});
    config.train.micro_batch_size = next;
  }
}

// "<label>: <first reason>" of the first run whose status is failed; empty when all are ok.
std::string first_failure(const nlohmann::json& report) {
  for (const nlohmann::json& run : report.at("runs")) {
    if (run.value("status", "ok") == "ok") continue;
    const nlohmann::json& reasons = run.value("failure_reasons", nlohmann::json::array());
    return run.value("label", "run") + ": " +
           (reasons.empty() ? std::string("failed") : reasons.front().get<std::string>());
  }
  return "";
}

// Collective: rank 0's verdict to every rank (also the barrier after the report is written).
bool agree_on_failure(bool rank0_failed, WorkerContext& ctx) {
  at::Tensor flag =
      at::full({1}, rank0_failed ? 1.0 : 0.0, at::TensorOptions().dtype(at::kFloat)).to(ctx.device);
  wait_work(ctx.pgs.world->broadcast(flag, 0), "run-status broadcast");
  return flag.to(at::kCPU).item<float>() != 0;
}

// Rank 0's environment record: runtime versions, world, nodes and GPUs (before the runs).
void describe_ranks(EnvironmentInfo& info, const WorkerContext& ctx, const LaunchEnv& env,
                    int ranks_per_gpu) {
  const RuntimeVersions v = runtime_versions();
  info.torch_version = v.torch;
  info.cuda_version = ctx.device.is_cuda() ? v.cuda : "";
  info.nccl_version = ctx.backend == CommBackend::kNccl ? v.nccl : "";
  info.cudnn_version = ctx.device.is_cuda() ? v.cudnn : "";
  info.world_size = env.world_size;
  info.cpu_scheduling.intra_op_threads = at::get_num_threads();
  // Shared-GPU ranks each pose as a host of their own (GROUP_RANK = rank); they are one node.
  info.node_count =
      ranks_per_gpu > 1 ? 1 : std::max(1, env.world_size / std::max(1, env.local_world_size));
  if (ctx.device.is_cuda()) {
    info.gpu_names.push_back(device_name(ctx.device));
    info.gpu_count = env.world_size / ranks_per_gpu;
  }
  if (const std::string notice = shared_gpu_notice(ranks_per_gpu, env.world_size);
      !notice.empty()) {
    std::cout << "perf-launch: " << notice << std::endl;
  }
}

// The runs in planned order (the report's order) and the order they ran in.
struct PlannedRuns {
  std::vector<RunRecord> runs;
  RunOrderRule order_rule = RunOrderRule::kPlanned;
  std::vector<std::size_t> order;
};

// The requested run, then the comparison runs (other wrappers, the DDP baseline) on the same
// model, batch, dtype policy and seed; validation already checked their configs.
PlannedRuns run_planned(const ResolvedConfig& resolved, const LaunchEnv& env, WorkerContext& ctx) {
  const ConfigContainer& config = resolved.config;
  ValidationContext validation;
  validation.num_gpus = env.world_size;
  const nlohmann::json provenance = resolved.provenance.to_json();
  const std::vector<PlannedRun> plan = planned_runs(config, validation);
  // The runs share this process: a fixed order would turn the first run's cold start into a
  // difference between the wrappers (run_order.hpp). Every rank runs rank 0's order.
  PlannedRuns out;
  out.order_rule = run_order_rule(std::getenv(kRunOrderVariable));
  const bool reverse_coin = out.order_rule == RunOrderRule::kRandom && plan.size() > 1 &&
                            agree_on_failure(env.rank == 0 && std::random_device{}() % 2 == 1,
                                             ctx);  // rank 0's bit to every rank
  out.order = run_order(plan.size(), out.order_rule, reverse_coin);
  if (env.rank == 0 && plan.size() > 1) {
    std::vector<std::string> labels;
    for (const PlannedRun& planned : plan) labels.emplace_back(label(planned.wrapper));
    std::cout << "perf-launch: run order: " << run_order_text(out.order_rule, out.order, labels)
              << std::endl;
  }
  std::vector<std::optional<RunRecord>> ran(plan.size());
  for (const std::size_t index : out.order) {
    const PlannedRun& planned = plan[index];
    nlohmann::json run_prov = provenance;
    if (!planned.derivation.empty()) {
      if (env.rank == 0) {
        std::cout << "perf-launch: measuring " << label(planned.wrapper) << " ("
                  << planned.derivation << ")" << std::endl;
      }
      run_prov["derived"] = planned.derivation;
      // Derived runs never save or load: only the requested run checkpoints.
      for (const char* key : {"checkpoint.save", "checkpoint.load"}) {
        run_prov[key].push_back({{"source", "comparison run: only the requested run checkpoints"},
                                 {"previous", get_field(config, key)},
                                 {"value", nullptr}});
      }
    }
    ran[index] = run_fitting(planned, run_prov, resolved.model_recipe_name, ctx);
    // Every rank's own engine buffers (the run record holds only this rank's).
    ran[index]->memory_per_rank = gather_engine_memory(ctx, ran[index]->memory);
  }
  // The report lists the runs in planned order whatever order they ran in.
  for (std::optional<RunRecord>& run : ran) out.runs.push_back(std::move(*run));
  return out;
}

// Rank 0: builds and writes the report, prints the comparison summary, and returns the run's
// failure ("" when it passed), loss parity against DDP included.
std::string write_and_print_report(const EnvironmentInfo& info, const PlannedRuns& planned,
                                   const ConfigContainer& config, int ranks_per_gpu,
                                   std::chrono::system_clock::time_point start,
                                   std::filesystem::path* report_written) {
  ReportOptions report_options;
  report_options.ranks_per_gpu = ranks_per_gpu;
  report_options.run_order = run_order_json(planned.order_rule, planned.order);
  const nlohmann::json report = build_report(info, planned.runs, report_options);
  std::string failure = first_failure(report);
  const RunRecord& head = planned.runs.front();
  const bool explicit_path = config.shardbench.report_path.has_value();
  // A default name is unique per run (milliseconds and this process's id) and never
  // replaces a file; an explicit path may replace a regular file the user named.
  const std::filesystem::path path =
      explicit_path ? std::filesystem::path(*config.shardbench.report_path)
                    : default_report_path(config.shardbench.report_dir, head.recipe, head.wrapper,
                                          head.strategy, head.distributed_optimizer,
                                          head.world_size, start, std::to_string(::getpid()));
  write_report(path, report, explicit_path ? ExistingFile::kReplace : ExistingFile::kRefuse);
  if (report_written) *report_written = path;
  const std::string summary = format_comparison_summary(report);
  if (!summary.empty()) {
    std::cout << "\n";
    if (ranks_per_gpu > 1) {
      std::cout << "(functional run, ranks_per_gpu=" << ranks_per_gpu
                << ": the timing columns are not performance; memory columns are real)\n";
    }
    std::cout << summary;
  }
  std::cout << "perf-launch: report written to " << path.string() << std::endl;
  // A run that trains differently from DDP is a failed comparison, however fast it is.
  // Every rank learns it through agree_on_failure, so none is left waiting.
  if (const std::string bad = loss_parity_failures(report); !bad.empty()) {
    print_line(std::cerr, "loss parity failed:\n" + bad.substr(0, bad.find_last_not_of('\n') + 1));
    if (failure.empty()) failure = "loss parity against DDP failed";
  }
  return failure;
}

}  // namespace

int run_worker(const ResolvedConfig& resolved, const LaunchEnv& env,
               std::filesystem::path* report_written) {
  const auto start = std::chrono::system_clock::now();
  heartbeat("starting");
  std::optional<WorkerContext> ctx;
  try {
    // Before any communicator or worker thread exists: this forks git.
    EnvironmentInfo info =
        env.rank == 0 ? collect_environment(own_command_line(), start) : EnvironmentInfo{};
    const ConfigContainer& config = resolved.config;
    const int ranks_per_gpu =
        static_cast<int>(std::max<int64_t>(1, config.shardbench.ranks_per_gpu));
    ctx.emplace(make_worker_context(config, env));
    if (env.rank == 0) describe_ranks(info, *ctx, env, ranks_per_gpu);
    const PlannedRuns runs = run_planned(resolved, env, *ctx);
    ctx->pgs.world->barrier();
    // Rank 0's report decides the run's status; every rank exits with it, after the report is
    // written (a rank leaving early would make the launcher stop rank 0 mid-write).
    std::string failure;
    if (env.rank == 0) {
      failure = write_and_print_report(info, runs, config, ranks_per_gpu, start, report_written);
    }
    const bool failed = agree_on_failure(!failure.empty(), *ctx);
    destroy_process_groups(*ctx, /*failed=*/false);
    if (failed) {
      if (env.rank == 0) print_line(std::cerr, "run failed: " + failure);
      heartbeat_error(env.rank == 0 ? "run failed: " + failure
                                    : "run failed (rank 0's report names why)");
      return 1;
    }
    heartbeat("done");
    return 0;
  } catch (const std::exception& e) {
    const std::string text = error_text(e);
    if (dynamic_cast<const PeerFailedError*>(&e) != nullptr) {
      // Another rank failed first and prints its own reason: give it the first line (and,
      // under perf-launch, the launcher's verdict) before this consequence is reported.
      std::this_thread::sleep_for(kPeerFailureDelay);
    }
    const std::string message = std::string("rank ") + std::to_string(env.rank) + ": " + text;
    print_line(std::cerr, message);
    heartbeat_error(text);
    if (ctx) destroy_process_groups(*ctx, /*failed=*/true);
    return 1;
  }
}

}  // namespace shardbench
