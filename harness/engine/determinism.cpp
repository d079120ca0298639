#include "harness/engine/determinism.hpp"

#include <array>
#include <mutex>
#include <stdexcept>

#include <ATen/Context.h>

namespace shardbench {
namespace {

void refuse(const std::string& field, const std::string& value, const std::string& accepted) {
  throw std::invalid_argument(field + "=" + value +
                              " has no deterministic path with model.deterministic_mode=true; "
                              "accepted: " +
                              accepted);
}

}  // namespace

void check_deterministic_config(const ConfigContainer& c, bool cuda, bool nccl,
                                const GetEnv& getenv) {
  if (!c.model.deterministic_mode) return;
  // Megatron-LM (arguments.py): "Cross Entropy Fusion is currently not deterministic."
  if (c.model.cross_entropy_loss_fusion) {
    refuse("model.cross_entropy_loss_fusion", "true", "false (the deterministic set sets it)");
  }
  // Megatron-LM refuses flash attention in deterministic mode; cuDNN's SDPA backward is not
  // deterministic (ATen excludes it itself). The memory-efficient kernel runs its backward
  // without key splits under deterministic algorithms, and math is deterministic.
  const std::string& sdpa = c.shardbench.sdpa_backend;
  if (sdpa == "flash" || sdpa == "cudnn") {
    refuse("shardbench.sdpa_backend", sdpa, "auto, efficient, math");
  }
  if (cuda) {
    // ATen refuses cuBLAS calls under deterministic algorithms without a fixed workspace.
    const char* ws = getenv("CUBLAS_WORKSPACE_CONFIG");
    const std::string v = ws ? ws : "";
    if (v != ":4096:8" && v != ":16:8") {
      refuse("env.CUBLAS_WORKSPACE_CONFIG", ws ? v : "(unset)", ":4096:8 or :16:8");
    }
  }
  if (nccl) {
    // Megatron-LM's list: a fixed algorithm, never NVLS (its reduction order varies).
    static const std::array<const char*, 5> kAlgos = {"Tree", "Ring", "CollnetDirect",
                                                      "CollnetChain", "^NVLS"};
    const char* algo = getenv("NCCL_ALGO");
    const std::string v = algo ? algo : "";
    bool ok = false;
    for (const char* a : kAlgos) ok = ok || v == a;
    if (!ok) {
      refuse("env.NCCL_ALGO", algo ? v : "(unset)",
             "Tree, Ring, CollnetDirect, CollnetChain, ^NVLS");
    }
  }
}

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
