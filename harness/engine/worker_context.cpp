#include "harness/engine/worker_context.hpp"

#include "workloads/moe/moe_config.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <future>
#include <memory>
#include <stdexcept>
#include <thread>

#include <ATen/Context.h>
#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "harness/config/run_device.hpp"
#include "harness/engine/device_runtime.hpp"
#include "harness/launch/heartbeat.hpp"
#include "harness/launch/worker_command.hpp"
#include "harness/config/parallel_layout.hpp"

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

// TCPStore's constructor honours its timeout while connecting, but a client that reached a
// listener which is no store (MASTER_PORT taken by another program) waits for its handshake
// reply without one. The constructor therefore runs on a thread of its own; past the deadline
// this rank gives up with one line (the thread stays blocked until the process exits).
c10::intrusive_ptr<c10d::Store> connect_store(const std::string& addr,
                                              const c10d::TCPStoreOptions& options,
                                              std::chrono::milliseconds timeout) {
  auto result = std::make_shared<std::promise<c10::intrusive_ptr<c10d::Store>>>();
  std::future<c10::intrusive_ptr<c10d::Store>> done = result->get_future();
  std::thread([result, addr, options] {
    try {
      result->set_value(c10::make_intrusive<c10d::TCPStore>(addr, options));
    } catch (...) {
      result->set_exception(std::current_exception());
    }
  }).detach();
  // Slack over the store's own timeout, so that its own (clearer) error wins when it has one.
  if (done.wait_for(timeout + std::chrono::seconds(5)) != std::future_status::ready) {
    throw std::runtime_error("no answer from a store at " + addr + ":" +
                             std::to_string(options.port) +
                             " (is the port taken by a program that is not rank 0's store?)");
  }
  return done.get();
}

}  // namespace

namespace {

// An MoE model's expert groups (docs/moe.md, "Expert parallelism in the engine"): with EP 1 and
// one instance they are the engine's dense groups; otherwise this rank's expert-data-parallel
// groups (inside its instance), its cross-instance expert group and its EP group.
template <typename MakeGroup>
void add_expert_groups(WorkerContext& ctx, const ParallelLayout& layout, int rank,
                       MakeGroup& group) {
  ProcessGroups& e = ctx.engine_pgs;
  if (layout.ep == 1 && layout.dp_instances == 1) {
    e.expert_world = e.world;
    e.expert_all_gather = e.all_gather;
    e.expert_reduce_scatter = e.reduce_scatter;
    return;
  }
  const std::vector<int> edp = layout.expert_instance_group_of(rank);
  e.expert_world = group(edp, "edp", "world");
  e.expert_all_gather = group(edp, "edp", "all_gather");
  e.expert_reduce_scatter = group(edp, "edp", "reduce_scatter");
  if (layout.dp_instances > 1) {
    e.expert_outer = group(layout.expert_cross_instance_group_of(rank), "eouter", "outer");
  }
  if (layout.ep > 1) e.ep = group(layout.expert_group_of("ep", rank), "ep", "ep");
}

}  // namespace

WorkerContext make_worker_context(const ConfigContainer& config, const LaunchEnv& env) {
  pin_sdpa_backend(config.shardbench.sdpa_backend);
  WorkerContext ctx;
  ctx.rank = env.rank;
  ctx.world_size = env.world_size;
  ctx.local_rank = env.local_rank;

  const DeviceChoice want_device = device_choice(config.shardbench);
  const bool use_cuda = want_device == DeviceChoice::kCuda ||
                        (want_device == DeviceChoice::kAuto && cuda_available());
  if (use_cuda) {
    if (!cuda_available()) {
      throw std::runtime_error(
          "shardbench.device=cuda but no CUDA device is visible; accepted "
          "on this machine: cpu, auto");
    }
    const int count = cuda_device_count();
    if (env.local_rank >= count) {
      throw std::runtime_error("local rank " + std::to_string(env.local_rank) +
                               " has no GPU: " + std::to_string(count) + " visible on this node");
    }
    set_cuda_device(env.local_rank);
    ctx.device = at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(env.local_rank));
  }
  const BackendChoice want_backend = backend_choice(config.shardbench);
  if (want_backend == BackendChoice::kNccl || (want_backend == BackendChoice::kAuto && use_cuda)) {
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
  // Connecting (or finding the port taken by something that is no store) is bounded by the hang
  // timeout too: a rank that cannot reach the store is silent, and every rank should fail with
  // its own line rather than wait the whole distributed timeout.
  const auto full_timeout = std::chrono::duration_cast<std::chrono::milliseconds>(timeout);
  const auto connect_timeout =
      std::min(full_timeout, std::chrono::duration_cast<std::chrono::milliseconds>(
                                 std::chrono::seconds(config.shardbench.hang_timeout_s)));
  so.timeout = connect_timeout;
  // torchrun's agent already serves a store at MASTER_PORT; elsewhere rank 0 hosts it.
  const char* agent_store = std::getenv("TORCHELASTIC_USE_AGENT_STORE");
  const bool agent = agent_store && std::string(agent_store) == "True";
  so.isServer = !agent && env.rank == 0;
  // perf-launch's own launcher bound the port and passed the socket (bind_store_socket).
  if (const char* fd = std::getenv(kStoreListenFdVar); so.isServer && fd != nullptr) {
    so.masterListenFd = std::atoi(fd);
  }
  heartbeat("rendezvous");
  try {
    ctx.store = connect_store(env.master_addr, so, connect_timeout);
  } catch (const std::exception& e) {
    std::string why = error_text(e);
    why = why.substr(0, why.find('\n'));
    throw std::runtime_error(
        "rendezvous at " + env.master_addr + ":" + std::to_string(env.master_port) + " failed (" +
        (so.isServer ? "this rank hosts the store" : "the store is hosted by rank 0") +
        ", timeout " + std::to_string(connect_timeout.count() / 1000) + " s): " + why);
  }
  ctx.store->setTimeout(full_timeout);

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
  const ParallelLayout layout = ParallelLayout::make(
      env.world_size, static_cast<int>(config.model.tensor_model_parallel_size),
      static_cast<int>(config.model.context_parallel_size),
      static_cast<int>(config.model.expert_model_parallel_size),
      static_cast<int>(config.model.pipeline_model_parallel_size),
      static_cast<int>(config.ddp.num_distributed_optimizer_instances));
  ctx.tp = layout.tp;
  ctx.cp = layout.cp;
  ctx.dp = layout.dp;
  // Each group under its own store keys, named by its kind and first rank; a rank creates
  // only the groups it belongs to, in the same order on every rank.
  auto group = [&](const std::vector<int>& members, const std::string& kind,
                   const std::string& name) {
    const int me =
        static_cast<int>(std::find(members.begin(), members.end(), env.rank) - members.begin());
    return ProcessGroup::create(ctx.store, kind + std::to_string(members.front()) + "/" + name,
                                me, static_cast<int>(members.size()), po);
  };
  if (layout.tp == 1 && layout.dp_instances == 1) {
    ctx.engine_pgs = ctx.pgs;
  } else {
    // The engine shards over its instance (the whole data-parallel group with one instance).
    const std::vector<int> instance = layout.instance_group_of(env.rank);
    ctx.engine_pgs.world = group(instance, "dp", "world");
    ctx.engine_pgs.all_gather = group(instance, "dp", "all_gather");
    ctx.engine_pgs.reduce_scatter = group(instance, "dp", "reduce_scatter");
    if (layout.tp > 1) ctx.engine_pgs.tp = group(layout.group_of("tp", env.rank), "tp", "tp");
    if (layout.dp_instances > 1) {
      ctx.engine_pgs.outer = group(layout.cross_instance_group_of(env.rank), "outer", "outer");
    }
  }
  // Context parallelism: the CP group (the engine's groups above already span data x context).
  if (layout.cp > 1) ctx.engine_pgs.cp = group(layout.group_of("cp", env.rank), "cp", "cp");
  if (is_moe_config(config.model)) add_expert_groups(ctx, layout, env.rank, group);
  heartbeat("process groups ready");
  return ctx;
}

void destroy_process_groups(WorkerContext& ctx, bool failed) {
  // Groups may be shared (the engine's are the run's without tensor parallelism and HSDP; the
  // expert ones are the dense ones with EP 1): each is shut down once, the engine's first.
  std::vector<ProcessGroup*> done;
  for (std::shared_ptr<ProcessGroup>* group :
       {&ctx.engine_pgs.ep, &ctx.engine_pgs.expert_outer, &ctx.engine_pgs.expert_reduce_scatter,
        &ctx.engine_pgs.expert_all_gather, &ctx.engine_pgs.expert_world, &ctx.engine_pgs.outer,
        &ctx.engine_pgs.cp, &ctx.engine_pgs.tp, &ctx.engine_pgs.reduce_scatter, &ctx.engine_pgs.all_gather,
        &ctx.engine_pgs.world, &ctx.pgs.reduce_scatter, &ctx.pgs.all_gather, &ctx.pgs.world}) {
    if (!*group) continue;
    if (std::find(done.begin(), done.end(), group->get()) == done.end()) {
      done.push_back(group->get());
      try {
        failed ? (*group)->abort() : (*group)->shutdown();
      } catch (const std::exception&) {
        // Exiting anyway: a group that cannot shut down cleanly is released by the process exit.
      }
    }
    group->reset();
  }
}

std::vector<EngineMemory> gather_engine_memory(WorkerContext& ctx, const EngineMemory& mine) {
  const std::vector<int64_t> fields = {mine.model_weight_bytes,   mine.main_weight_bytes,
                                       mine.main_grad_bytes,      mine.optimizer_state_bytes,
                                       mine.temporary_peak_bytes, mine.predicted_static_bytes};
  const auto n = static_cast<int64_t>(fields.size());
  at::Tensor in = at::tensor(fields, at::TensorOptions().dtype(at::kLong)).to(ctx.device);
  at::Tensor out = at::empty({ctx.world_size * n}, in.options());
  wait_work(ctx.pgs.world->all_gather(out, in), "engine memory per rank");
  const at::Tensor host = out.to(at::kCPU);
  const int64_t* v = host.data_ptr<int64_t>();
  std::vector<EngineMemory> per_rank(static_cast<std::size_t>(ctx.world_size));
  for (int r = 0; r < ctx.world_size; ++r) {
    const int64_t* f = v + r * n;
    per_rank[static_cast<std::size_t>(r)] = {f[0], f[1], f[2], f[3], f[4], f[5]};
  }
  return per_rank;
}

std::string error_text(const std::exception& e) {
  if (const auto* c10_error = dynamic_cast<const c10::Error*>(&e)) {
    return c10_error->what_without_backtrace();
  }
  return e.what();
}

}  // namespace shardbench
