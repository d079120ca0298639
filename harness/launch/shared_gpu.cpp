#include "harness/launch/shared_gpu.hpp"

#include "harness/config/errors.hpp"
#include "harness/config/run_device.hpp"

namespace shardbench {
namespace {

[[noreturn]] void reject(int64_t value, const std::string& accepted) {
  throw UsageError("shardbench.ranks_per_gpu=" + std::to_string(value) +
                   " is invalid; accepted: " + accepted);
}

}  // namespace

void check_ranks_per_gpu(const ConfigContainer& config, int world_size, const std::string& gpu,
                         Launcher launcher) {
  const int64_t n = config.shardbench.ranks_per_gpu;
  if (n < 1) reject(n, "an integer >= 1 (1: one rank per GPU)");
  if (n == 1) return;
  if (world_size % n != 0) {
    reject(n, "a divisor of the world size -ng " + std::to_string(world_size) +
                  " (every GPU hosts the same number of ranks), or 1");
  }
  if (is_cpu_run(config.shardbench, gpu)) {
    reject(n, "1 on CPU (-g cpu / shardbench.device=cpu): ranks share GPUs only");
  }
  if (backend_choice(config.shardbench) == BackendChoice::kGloo) {
    reject(n,
           "1 with shardbench.backend=gloo: shared GPUs are an NCCL mode (backend auto or nccl)");
  }
  if (launcher != Launcher::kNone && launcher != Launcher::kPerfLaunch) {
    reject(n, std::string("1 under ") + launcher_name(launcher) +
                  ", which places ranks on GPUs itself; perf-launch's local executor starts "
                  "shared-GPU ranks");
  }
}

std::string shared_gpu_notice(int ranks_per_gpu, int world_size) {
  if (ranks_per_gpu <= 1) return "";
  return "functional run: shardbench.ranks_per_gpu=" + std::to_string(ranks_per_gpu) + ", " +
         std::to_string(world_size) + " ranks on " + std::to_string(world_size / ranks_per_gpu) +
         " GPU(s), NCCL over loopback sockets; step times and TFLOP/s below are not performance "
         "numbers (losses, memory per rank and failure handling are real)";
}

}  // namespace shardbench
