#include "harness/engine/worker_context.hpp"

#include <chrono>
#include <cstdlib>
#include <stdexcept>

#include <ATen/Context.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "harness/engine/device_runtime.hpp"
#include "harness/launch/heartbeat.hpp"

namespace shardbench {
namespace {

void pin_sdpa_backend(const std::string& backend) {
  if (backend == "auto") return;
  // Comparable runs pin the attention kernel (SDPA prefers cuDNN on Hopper in torch 2.11).
  auto& ctx = at::globalContext();
  ctx.setSDPUseFlash(backend == "flash");
  ctx.setSDPUseMemEfficient(backend == "efficient");
  ctx.setSDPUseCuDNN(backend == "cudnn");
  ctx.setSDPUseMath(backend == "math");
}

}  // namespace

WorkerContext make_worker_context(const ConfigContainer& config, const LaunchEnv& env) {
  pin_sdpa_backend(config.shardbench.sdpa_backend);
  WorkerContext ctx;
  ctx.rank = env.rank;
  ctx.world_size = env.world_size;
  ctx.local_rank = env.local_rank;

  const std::string& want_device = config.shardbench.device;
  const bool use_cuda = want_device == "cuda" || (want_device == "auto" && cuda_available());
  if (use_cuda) {
    if (!cuda_available()) {
      throw std::runtime_error("shardbench.device=cuda but no CUDA device is visible; accepted "
                               "on this machine: cpu, auto");
    }
    const int count = cuda_device_count();
    if (env.local_rank >= count) {
      throw std::runtime_error("local rank " + std::to_string(env.local_rank) + " has no GPU: " +
                               std::to_string(count) + " visible on this node");
    }
    set_cuda_device(env.local_rank);
    ctx.device = at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(env.local_rank));
  }
  const std::string& want_backend = config.shardbench.backend;
  if (want_backend == "nccl" || (want_backend == "auto" && use_cuda)) {
    if (!use_cuda) {
      throw std::runtime_error("shardbench.backend=nccl needs CUDA devices; accepted on CPU: gloo");
    }
    ctx.backend = CommBackend::kNccl;
  }

  const auto timeout = std::chrono::minutes(config.dist.distributed_timeout_minutes);
  c10d::TCPStoreOptions so;
  so.port = static_cast<std::uint16_t>(env.master_port);
  so.numWorkers = env.world_size;
  so.waitWorkers = false;
  so.timeout = std::chrono::duration_cast<std::chrono::milliseconds>(timeout);
  // torchrun's agent already serves a store at MASTER_PORT; elsewhere rank 0 hosts it.
  const char* agent_store = std::getenv("TORCHELASTIC_USE_AGENT_STORE");
  const bool agent = agent_store && std::string(agent_store) == "True";
  so.isServer = !agent && env.rank == 0;
  heartbeat("rendezvous");
  ctx.store = c10::make_intrusive<c10d::TCPStore>(env.master_addr, so);

  ProcessGroupOptions po;
  po.backend = ctx.backend;
  po.timeout = std::chrono::duration_cast<std::chrono::milliseconds>(timeout);
  po.device_index = env.local_rank;
  // Gloo binds to loopback when every rank is on this host, else to the default interface.
  po.gloo_hostname = env.local_world_size == env.world_size ? "127.0.0.1" : "";
  ctx.pgs.world = ProcessGroup::create(ctx.store, "world", env.rank, env.world_size, po);
  // Megatron FSDP gathers on a communicator of its own so that all-gathers and reduce-scatters
  // do not queue behind each other (independent_all_gather).
  ctx.pgs.all_gather = ProcessGroup::create(ctx.store, "all_gather", env.rank, env.world_size, po);
  ctx.pgs.reduce_scatter =
      ProcessGroup::create(ctx.store, "reduce_scatter", env.rank, env.world_size, po);
  heartbeat("process groups ready");
  return ctx;
}

}  // namespace shardbench
