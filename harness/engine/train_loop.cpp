// The train step of a run: the timed loop (harness/engine/train_loop.hpp).
#include "harness/engine/train_loop.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <memory>
#include <utility>

#include "harness/console_line.hpp"
#include "harness/engine/checkpoint_run.hpp"
#include "harness/engine/device_runtime.hpp"
#include "harness/engine/lr_schedule.hpp"
#include "harness/engine/mock_data.hpp"
#include "harness/engine/step_checks.hpp"
#include "harness/engine/train_step.hpp"
#include "harness/engine/train_step_phases.hpp"
#include "harness/engine/unit_timing.hpp"
#include "harness/launch/fault_spec.hpp"
#include "harness/launch/heartbeat.hpp"
#include "harness/measure/nsys_capture.hpp"
#include "harness/measure/nvtx.hpp"
#include "harness/measure/phase_timer_cuda.hpp"
#include "harness/measure/step_injection.hpp"
#include "harness/measure/torch_profiler.hpp"
#include "harness/report/console.hpp"
#include "workloads/llama/llama_model.hpp"
#include "workloads/moe/moe_model.hpp"

namespace shardbench {
namespace {

// The SHARDBENCH_FAULT drill (harness/launch/fault_spec.hpp, read once per run), fired at `step`
// of the run `label` on `rank`: the launcher checked the spec before any worker started.
void maybe_inject_fault(const std::optional<FaultSpec>& fault, int rank, int64_t step,
                        int64_t micro_batch, const std::string& label) {
  if (!fault || fault->rank != rank) return;
  if (fault->kind == "oom") {
    if (step != 1 || micro_batch < fault->micro_batch || label.rfind(fault->label_prefix, 0) != 0) {
      return;
    }
    throw c10::OutOfMemoryError({__func__, __FILE__, static_cast<uint32_t>(__LINE__)},
                                "CUDA out of memory (SHARDBENCH_FAULT drill: micro-batch " +
                                    std::to_string(micro_batch) + " of " + label + ")");
  }
  if (step != fault->step) return;
  if (fault->kind == "kill") std::raise(SIGKILL);
  if (fault->kind == "hang") {
    for (;;) pause();
  }
}

// The loop's own host synchronisations with the GPU (the engine's are not counted here). Each
// one drains the device queue, so the count says what the measurement adds to a step. Megatron's
// loop pays the same ones: its timer's barrier and synchronize, and the logged loss and norm.
class HostSyncCounter {
 public:
  explicit HostSyncCounter(const WorkerContext& ctx)
      : device_(ctx.device), nccl_(ctx.pgs.world->backend_kind() == CommBackend::kNccl) {}

  // ProcessGroupNCCL's barrier blocks the host until its all-reduce has run on the device.
  void barrier(ProcessGroup& group) {
    group.barrier();
    count_ += nccl_ ? 1 : 0;
  }
  void synchronize() {
    synchronize_device(device_);
    count_ += device_.is_cuda() ? 1 : 0;
  }
  double item(const at::Tensor& t) {
    const double v = t.item<double>();
    count_ += t.is_cuda() ? 1 : 0;
    return v;
  }
  // The count since the last call.
  int64_t take() { return std::exchange(count_, 0); }

 private:
  at::Device device_;
  bool nccl_;
  int64_t count_ = 0;
};

std::unique_ptr<PhaseTimer> make_phase_timer(const at::Device& device) {
  if (device.is_cuda()) return make_cuda_phase_timer(device.index());
  return std::make_unique<HostPhaseTimer>();
}

bool profiles_this_rank(const ConfigContainer& c, const WorkerContext& ctx) {
  const auto& ranks = c.profiling.profile_ranks;
  return c.profiling.use_nsys_profiler && ctx.device.is_cuda() &&
         std::find(ranks.begin(), ranks.end(), ctx.rank) != ranks.end();
}

bool torch_profiles_this_rank(const ConfigContainer& c, const WorkerContext& ctx) {
  const auto& ranks = c.profiling.profile_ranks;
  return c.profiling.use_pytorch_profiler &&
         std::find(ranks.begin(), ranks.end(), ctx.rank) != ranks.end();
}

// The profiler's files go to logger.tensorboard_dir when set (as Megatron-Bridge's trace
// handler), else next to the report; named after the run so a baseline does not overwrite them.
TorchProfilerFiles torch_profiler_files_for(const ConfigContainer& c, const RunRecord& rec,
                                            int rank) {
  std::filesystem::path dir;
  if (c.logger.tensorboard_dir) {
    dir = *c.logger.tensorboard_dir;
  } else if (c.shardbench.report_path) {
    dir = std::filesystem::path(*c.shardbench.report_path).parent_path();
  } else {
    dir = c.shardbench.report_dir;
  }
  std::string stem = rec.recipe + "_" + rec.label + "_ws" + std::to_string(rec.world_size);
  std::replace(stem.begin(), stem.end(), '/', '-');
  std::replace(stem.begin(), stem.end(), '+', '-');
  return torch_profiler_files(dir, stem, rank);
}

// Collective: the same answer on every rank (see step_checks.hpp). The loss check comes first,
// as Megatron checks the loss in forward, before backward's grad checks.
std::string step_failure(const ConfigContainer& c, const DataParallelEngine& engine,
                         WorkerContext& ctx, int64_t iteration, double loss) {
  std::string failure =
      loss_check_failure(c.rerun_state_machine.check_for_nan_in_loss, loss, iteration);
  if (engine.options().check_for_nan_in_grad) {
    std::string grads =
        grad_check_failure(engine.grad_fault(), iteration, *ctx.pgs.world, ctx.device);
    if (failure.empty()) failure = std::move(grads);
  }
  return failure;
}

}  // namespace

namespace {

// ---- train_loop's pieces, in the order it takes them -------------------------------------------

// The profilers and timers that watch the steps: nsys's capture window, the PyTorch profiler,
// the phase timer (CUDA events on a GPU) and the count of the loop's own host syncs.
class StepProbes {
 public:
  StepProbes(const ConfigContainer& config, const RunRecord& rec, const WorkerContext& ctx,
             DataParallelEngine& engine)
      : config_(config),
        rank_(ctx.rank),
        // Each run (the FSDP run and its DDP baseline) opens its own window: nsys's
        // --capture-range-end=stop keeps the first, repeat keeps both.
        nsys_(profiles_this_rank(config, ctx), config.profiling.profile_step_start,
              config.profiling.profile_step_end),
        torch_profiler_(torch_profiles_this_rank(config, ctx), config.profiling.profile_step_start,
                        config.profiling.profile_step_end, ctx.device.is_cuda(),
                        config.profiling.record_shapes, config.profiling.record_memory_history,
                        torch_profiler_files_for(config, rec, ctx.rank),
                        // The collectives the step left running end their profiler events first.
                        [&engine] { engine.wait_in_flight(); }),
        phases_(make_phase_timer(ctx.device)),
        units_(config.shardbench.unit_timing, ctx.device, engine),
        syncs_(ctx) {
    if (ctx.rank == 0 && config.profiling.use_nsys_profiler && !ctx.device.is_cuda()) {
      std::cout << "perf-launch: profiling.use_nsys_profiler=true has no effect on " << rec.device
                << " (cudaProfilerStart/Stop need a CUDA device)" << std::endl;
    }
  }

  void before_step(int64_t iteration) {
    nsys_.before_step(iteration);
    torch_profiler_.before_step(iteration);
  }
  void after_step(int64_t iteration) {
    nsys_.after_step(iteration);
    torch_profiler_.after_step(iteration);
    if (!torch_profiler_.summary().empty() && !torch_profiler_.capturing() &&
        iteration == config_.profiling.profile_step_end) {
      std::cout << "perf-launch: rank " << rank_ << " " << torch_profiler_.summary() << std::flush;
    }
  }
  PhaseTimer& phases() { return *phases_; }
  UnitTimingProbe& units() { return units_; }
  HostSyncCounter& syncs() { return syncs_; }

 private:
  const ConfigContainer& config_;
  int rank_;
  NsysCaptureWindow nsys_;
  TorchProfilerWindow torch_profiler_;
  std::unique_ptr<PhaseTimer> phases_;
  UnitTimingProbe units_;
  HostSyncCounter syncs_;
};

// One step as Megatron's interval timer sees it: barrier, start; the step; barrier-aligned stop.
struct TimedStep {
  StepOutputs out;
  double elapsed_ms = 0;  // the slowest rank's step, barrier to barrier
  double mine_ms = 0;     // this rank's own step (device time between its events on a GPU)
  PhaseTimes phases;
  bool graphed = false;  // the step replayed a CUDA graph (forward and backward not told apart)
};

TimedStep timed_step(const TrainableModel& model, DataParallelEngine& engine, const RunPlan& plan,
                     const StepInputs& in, int64_t iteration, const ConfigContainer& config,
                     StepProbes& probes, const WorkerContext& ctx) {
  StepGraph* graph = plan.graph.get();
  static const nvtx::LabelTable kStepLabels{"training_step_", nvtx::Color::kStep};
  TimedStep t;
  probes.syncs().barrier(*ctx.pgs.world);
  probes.syncs().synchronize();
  const auto t0 = std::chrono::steady_clock::now();
  {
    nvtx::Range step_range(kStepLabels[iteration]);
    // The step as a user scope in the PyTorch profiler's trace (free when it is off).
    RECORD_USER_SCOPE("training_step_" + std::to_string(iteration));
    probes.phases().begin_step();
    probes.units().begin_step();
    t.out = graph               ? graph->step(model, engine, in, &probes.phases())
            : plan.layer_graphs ? plan.layer_graphs->step(model, engine, in, &probes.phases())
                                : train_step(model, engine, in, &probes.phases());
    t.graphed = graph && graph->replayed_last_step();
    // Calibration only (off unless configured). On a GPU the host is ahead of the device here:
    // wait for the step's work first, so that the busy-wait is a fraction of the device's step
    // and the device idles through it, before the end event.
    if (injects_slowdown(config.shardbench)) {
      probes.syncs().synchronize();
      inject_step_slowdown(config.shardbench, t0);
    }
    probes.phases().end_step();
    probes.syncs().synchronize();
  }
  t.mine_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  probes.syncs().barrier(*ctx.pgs.world);
  t.elapsed_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  // The synchronize above completed every event of the step: reading them does not block.
  t.phases = probes.phases().read();
  probes.units().end_step(t.phases[Phase::kOptimizer]);
  // GPU: this rank's own step time is the device time between its step events, free of the
  // host's wake-up after the synchronize.
  if (t.phases.step_ms) t.mine_ms = *t.phases.step_ms;
  return t;
}

// The step's report row: the loss averaged over ranks, the grad norm, the phase times.
// `moe_ep`: a mixture of experts with expert parallelism, whose exchanges the step timed.
StepRecord record_step(const TimedStep& t, const StepInputs& in, int64_t iteration,
                       HostSyncCounter& syncs, const WorkerContext& ctx, bool moe_ep) {
  at::Tensor metrics = at::stack({t.out.loss.to(at::kFloat), t.out.grad_norm.to(at::kFloat)});
  at::Tensor loss_avg = metrics.narrow(0, 0, 1).clone();
  wait_work(ctx.pgs.world->all_reduce(loss_avg, Reduction::kAvg), "loss all-reduce");
  StepRecord step;
  step.iteration = static_cast<int>(iteration);
  step.elapsed_ms = t.elapsed_ms;
  step.loss = syncs.item(loss_avg);
  step.grad_norm = syncs.item(metrics[1]);
  step.learning_rate = in.lr;
  if (t.graphed) {
    step.graph_ms = t.phases[Phase::kGraph];
  } else {
    step.forward_ms = t.phases[Phase::kForward];
    step.backward_ms = t.phases[Phase::kBackward];
    step.exposed_comm_ms = t.phases[Phase::kExposedComm];
  }
  step.optimizer_ms = t.phases[Phase::kOptimizer];
  if (moe_ep) {
    step.moe_dispatch_ms = t.phases[Phase::kMoeDispatch];
    step.moe_combine_ms = t.phases[Phase::kMoeCombine];
  }
  if (ctx.cp > 1) step.cp_exchange_ms = t.phases[Phase::kCpExchange];
  // Only a GPU step has device syncs to count; on CPU the field stays absent rather than 0.
  const int64_t step_syncs = syncs.take();
  if (ctx.device.is_cuda()) step.host_syncs = step_syncs;
  return step;
}

// The allocator after the first two iterations, as Megatron's memory report prints it.
void snapshot_memory(RunMeasurements& m, int64_t iteration, const WorkerContext& ctx) {
  if (!ctx.device.is_cuda() || iteration > 2) return;
  auto snap =
      allocator_snapshot(ctx.device, "after_iteration_" + std::to_string(iteration), ctx.rank);
  if (ctx.rank == 0) std::cout << format_memory_line(snap, iteration) << std::endl;
  m.allocator.push_back(snap);
}

// What autograd kept for backward in the step's first micro-batch (rank 0), by module and op.
void take_saved_activations(RunMeasurements& m, const LlamaModel& model, int64_t iteration) {
  std::optional<SavedActivations> census = model.take_activation_census();
  if (!census) return;
  census->measured = "rank 0, iteration " + std::to_string(iteration) + ", micro-batch 1";
  int64_t layer_bytes = 0, layers = 0;
  for (const ModuleSavedActivations& m : census->modules) {
    if (m.name.rfind("layer ", 0) == 0) {
      layer_bytes = std::max(layer_bytes, m.bytes);
      ++layers;
    }
  }
  constexpr double kMiB = 1024.0 * 1024.0;
  std::printf(
      "perf-launch: saved activations per micro-batch: %.1f MiB (largest of %lld layers %.2f MiB, "
      "offloaded %.1f MiB; measured on %s)\n",
      static_cast<double>(census->total_bytes) / kMiB, static_cast<long long>(layers),
      static_cast<double>(layer_bytes) / kMiB, static_cast<double>(census->offloaded_bytes) / kMiB,
      census->measured.c_str());
  std::fflush(stdout);
  m.saved_activations = std::move(census);
}

// Megatron's training_log: the iteration line every logger.log_interval iterations, with the
// step-time line for runs whose step time is a throughput.
void log_step(const ConfigContainer& config, const RunRecord& rec, const StepRecord& step,
              int64_t iteration, const WorkerContext& ctx) {
  if (ctx.rank != 0 || !config.shardbench.log_per_step ||
      iteration % config.logger.log_interval != 0) {
    return;
  }
  std::cout << format_iteration_line(iteration_log(rec, step, 0)) << "\n";
  // Ranks sharing a GPU time-slice it: their step time is no throughput (shared_gpu.hpp).
  if (config.shardbench.ranks_per_gpu <= 1) {
    std::cout << format_step_time_line(
                     step.elapsed_ms,
                     rec.model_flops_per_step / (step.elapsed_ms * 1e-3 * 1e12 * ctx.world_size))
              << "\n";
  }
  std::cout << std::flush;
}

}  // namespace

void train_loop(RunPlan& plan, RunMeasurements& m, WorkerContext& ctx) {
  const ConfigContainer& config = plan.config;
  const RunRecord& rec = plan.record;
  RunModel& model = plan.model;
  DataParallelEngine& engine = *plan.engine;
  StepProbes probes(config, rec, ctx, engine);
  // Groups the steps of one run: the FSDP run and its DDP baseline share one process.
  nvtx::Range run_range("benchmark/" + rec.label, nvtx::Color::kStep);

  // A resumed run continues with the iteration after the checkpoint's: its batch, its LR.
  const int64_t iters = config.train.train_iters;
  const int64_t first_it =
      plan.checkpoints->resume(engine, *model.trainable, *ctx.pgs.world, iters, ctx.rank == 0);
  const bool moe_ep = model.moe && model.moe->ep_size() > 1;
  for (int64_t it = first_it; it < iters; ++it) {
    const int64_t iteration = it + 1;
    heartbeat("step " + std::to_string(iteration));
    maybe_inject_fault(plan.fault, ctx.rank, iteration, config.train.micro_batch_size, rec.label);
    const StepInputs in{
        mock_global_batch(static_cast<uint64_t>(config.rng.seed), it,
                          config.train.global_batch_size, model.seq_length, model.vocab),
        config.train.micro_batch_size, plan.lr.at(it), config.train.empty_unused_memory_level,
        test_fault_loss_scale(config.shardbench, plan.options.wrapper, ctx.rank)};
    // Megatron registers the FSDP buffers at the start of the second iteration, outside its
    // step timing (ddp.fsdp_manual_registration).
    if (engine.register_comm_buffers_if_due() && ctx.rank == 0) {
      std::cout << "perf-launch: NCCL user buffers registered before iteration " << iteration
                << " (ddp.fsdp_manual_registration)" << std::endl;
    }
    probes.before_step(iteration);
    // The run's first step (never in the statistics, WarmupRule): rank 0 records what autograd
    // saves in its first micro-batch's forward.
    const bool census = it == first_it && ctx.rank == 0 && model.llama;
    if (census) model.llama->arm_activation_census();
    const TimedStep timed =
        timed_step(*model.trainable, engine, plan, in, iteration, config, probes, ctx);
    if (census) take_saved_activations(m, *model.llama, iteration);
    m.my_step_ms.push_back(timed.mine_ms);
    m.steps.push_back(record_step(timed, in, iteration, probes.syncs(), ctx, moe_ep));
    probes.after_step(iteration);
    log_step(config, rec, m.steps.back(), iteration, ctx);
    snapshot_memory(m, iteration, ctx);
    // Megatron's fatal checks end the run after this step, before a checkpoint could save it.
    if (const std::string failure =
            step_failure(config, engine, ctx, iteration, m.steps.back().loss);
        !failure.empty()) {
      m.failure_reasons.push_back(failure);
      if (ctx.rank == 0) print_line(std::cerr, failure);
      break;
    }
    // Outside the timed step, as Megatron's save_checkpoint_and_time.
    plan.checkpoints->after_iteration(engine, *model.trainable, *ctx.pgs.world, iteration, iters,
                                      ctx.rank == 0);
  }
  if (ctx.device.is_cuda()) {
    m.allocator.push_back(allocator_snapshot(ctx.device, "end", ctx.rank));
  }
  m.unit_timing = probes.units().record(config.train.global_batch_size /
                                        (config.train.micro_batch_size * ctx.dp));
}

}  // namespace shardbench
