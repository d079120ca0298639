#include "harness/engine/determinism.hpp"

#include <mutex>

#include <ATen/Context.h>

namespace shardbench {
namespace {

struct SavedSwitches {
  bool algorithms = false, warn_only = false, cudnn_deterministic = false, cudnn_benchmark = false,
       flash_sdp = false, cudnn_sdp = false;
};

std::mutex g_scope_mutex;
int g_scope_depth = 0;
SavedSwitches g_saved;

}  // namespace

DeterministicScope::DeterministicScope(const ConfigContainer& c) {
  if (!c.model.deterministic_mode) return;
  active_ = true;
  std::lock_guard<std::mutex> lock(g_scope_mutex);
  if (g_scope_depth++ > 0) return;
  auto& ctx = at::globalContext();
  g_saved = {ctx.deterministicAlgorithms(), ctx.deterministicAlgorithmsWarnOnly(),
             ctx.deterministicCuDNN(),      ctx.benchmarkCuDNN(),
             ctx.userEnabledFlashSDP(),     ctx.userEnabledCuDNNSDP()};
  // torch.use_deterministic_algorithms(True): an op without a deterministic implementation
  // raises instead of running.
  ctx.setDeterministicAlgorithms(true, /*warn_only=*/false);
  ctx.setDeterministicCuDNN(true);
  ctx.setBenchmarkCuDNN(false);
  // Leaves SDPA the memory-efficient and math kernels.
  ctx.setSDPUseFlash(false);
  ctx.setSDPUseCuDNN(false);
}

DeterministicScope::~DeterministicScope() {
  if (!active_) return;
  std::lock_guard<std::mutex> lock(g_scope_mutex);
  if (--g_scope_depth > 0) return;
  auto& ctx = at::globalContext();
  ctx.setDeterministicAlgorithms(g_saved.algorithms, g_saved.warn_only);
  ctx.setDeterministicCuDNN(g_saved.cudnn_deterministic);
  ctx.setBenchmarkCuDNN(g_saved.cudnn_benchmark);
  ctx.setSDPUseFlash(g_saved.flash_sdp);
  ctx.setSDPUseCuDNN(g_saved.cudnn_sdp);
}

}  // namespace shardbench
