#include "harness/parallel/process_group.hpp"

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <stdexcept>
#include <thread>
#include <vector>

#include "harness/launch/heartbeat.hpp"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#ifdef SHARDBENCH_WITH_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

namespace shardbench {

namespace {

bool work_is_cuda(const c10d::Work& work) {
#ifdef SHARDBENCH_WITH_NCCL
  return dynamic_cast<const c10d::ProcessGroupNCCL::WorkNCCL*>(&work) != nullptr;
#else
  (void)work;
  return false;
#endif
}

// While the host is blocked in a gloo collective, a background thread sends a heartbeat every
// second naming it. A rank stuck anywhere else stays silent and is the one the launcher names.
class WaitingScope {
 public:
  explicit WaitingScope(const char* what) {
    if (what == nullptr || !heartbeat_enabled()) return;
    ticker();  // started once per process
    current().store(what);
    active_ = true;
  }
  ~WaitingScope() {
    if (active_) current().store(nullptr);
  }
  WaitingScope(const WaitingScope&) = delete;
  WaitingScope& operator=(const WaitingScope&) = delete;

 private:
  static std::atomic<const char*>& current() {
    static std::atomic<const char*> what{nullptr};
    return what;
  }
  static void ticker() {
    static const bool started = [] {
      std::thread([] {
        for (;;) {
          std::this_thread::sleep_for(std::chrono::seconds(1));
          if (const char* what = current().load()) heartbeat(std::string("waiting in ") + what);
        }
      }).detach();
      return true;
    }();
    (void)started;
  }
  bool active_ = false;
};

}  // namespace

const char* to_string(CommBackend backend) {
  return backend == CommBackend::kNccl ? "nccl" : "gloo";
}

std::shared_ptr<ProcessGroup> ProcessGroup::create(const c10::intrusive_ptr<c10d::Store>& store,
                                                   const std::string& prefix, int rank, int world,
                                                   const ProcessGroupOptions& options) {
  auto prefixed = c10::make_intrusive<c10d::PrefixStore>(prefix, store);
  c10::intrusive_ptr<c10d::Backend> backend;
  if (options.backend == CommBackend::kGloo) {
    // Options::create() has no device and a 30-minute default timeout: set both. The
    // constructor connects the full mesh under the options' timeout; the collectives then run
    // under `options.timeout`.
    const bool own_connect_timeout = options.connect_timeout.count() > 0;
    auto gloo_options = c10d::ProcessGroupGloo::Options::create(
        own_connect_timeout ? options.connect_timeout : options.timeout);
    gloo_options->devices.push_back(
        options.gloo_hostname.empty()
            ? c10d::ProcessGroupGloo::createDefaultDevice()
            : c10d::ProcessGroupGloo::createDeviceForHostname(options.gloo_hostname));
    auto gloo = c10::make_intrusive<c10d::ProcessGroupGloo>(prefixed, rank, world, gloo_options);
    if (own_connect_timeout) gloo->setTimeout(options.timeout);
    backend = gloo;
  } else {
#ifdef SHARDBENCH_WITH_NCCL
    auto nccl_options = c10d::ProcessGroupNCCL::Options::create(options.high_priority_stream);
    nccl_options->timeout = options.timeout;
    auto nccl = c10::make_intrusive<c10d::ProcessGroupNCCL>(prefixed, rank, world, nccl_options);
    nccl->eagerConnectSingleDevice(at::Device(at::kCUDA, options.device_index));
    backend = nccl;
#else
    throw std::runtime_error("backend 'nccl' requested but shardbench was built without NCCL");
#endif
  }
  return std::shared_ptr<ProcessGroup>(new ProcessGroup(std::move(backend), rank, world, options));
}

c10d::ReduceOp ProcessGroup::to_reduce_op(Reduction op) const {
  switch (op) {
    case Reduction::kAvg:
      return c10d::ReduceOp(c10d::ReduceOp::AVG);
    case Reduction::kMax:
      return c10d::ReduceOp(c10d::ReduceOp::MAX);
    case Reduction::kSum:
      break;
  }
  return c10d::ReduceOp(c10d::ReduceOp::SUM);
}

c10::intrusive_ptr<c10d::Work> ProcessGroup::all_reduce(at::Tensor& tensor, Reduction op) {
  std::vector<at::Tensor> tensors{tensor};
  c10d::AllreduceOptions opts;
  opts.reduceOp = to_reduce_op(op);
  return backend_->allreduce(tensors, opts);
}

c10::intrusive_ptr<c10d::Work> ProcessGroup::reduce_scatter(at::Tensor& out, at::Tensor& in,
                                                            Reduction op) {
  c10d::ReduceScatterOptions opts;
  opts.reduceOp = to_reduce_op(op);
  return backend_->_reduce_scatter_base(out, in, opts);
}

c10::intrusive_ptr<c10d::Work> ProcessGroup::all_gather(at::Tensor& out, at::Tensor& in) {
  return backend_->_allgather_base(out, in);
}

c10::intrusive_ptr<c10d::Work> ProcessGroup::broadcast(at::Tensor& tensor, int root) {
  std::vector<at::Tensor> tensors{tensor};
  c10d::BroadcastOptions opts;
  opts.rootRank = root;
  return backend_->broadcast(tensors, opts);
}

c10::intrusive_ptr<c10d::Work> ProcessGroup::all_to_all(at::Tensor& out, at::Tensor& in,
                                                        std::vector<int64_t> out_splits,
                                                        std::vector<int64_t> in_splits) {
  if (static_cast<int>(out_splits.size()) != world_ ||
      static_cast<int>(in_splits.size()) != world_) {
    throw std::invalid_argument("all_to_all: " + std::to_string(out_splits.size()) + " and " +
                                std::to_string(in_splits.size()) + " split sizes for " +
                                std::to_string(world_) + " ranks");
  }
  return backend_->alltoall_base(out, in, out_splits, in_splits);
}

void ProcessGroup::barrier() {
  c10d::BarrierOptions opts;
  if (options_.backend == CommBackend::kNccl) {
    opts.device_ids = {options_.device_index};
  }
  // NCCL's barrier blocks the host too (until its all-reduce ran on the device): a rank waiting
  // here for a peer that hung keeps telling the launcher so, under NCCL as under gloo.
  WaitingScope waiting("barrier");
  wait_work(backend_->barrier(opts), "barrier");
}

void ProcessGroup::shutdown() { backend_->shutdown(); }

void ProcessGroup::abort() { backend_->abort(); }

void prepare_thread_ranks() {
  // torch 2.11's FlightRecorderDetail.hpp, recordWithResetEnabled: the first record of each
  // process group inserts into a map outside the recorder's mutex, so concurrent first
  // collectives of groups on different threads corrupt it (a SIGSEGV in
  // ProcessGroupGloo::enqueue). The recorder reads this once, when the first group records.
  setenv("TORCH_FR_BUFFER_SIZE", "0", /*overwrite=*/0);
}

void wait_work(const c10::intrusive_ptr<c10d::Work>& work, const char* what) {
  if (!work) return;
  try {
    // A CPU rank blocked in a collective tells the launcher it is waiting, not hung, so that a
    // hang is pinned on the rank that actually stopped. NCCL waits do not block the host.
    WaitingScope waiting(work_is_cuda(*work) ? nullptr : what);
    work->wait();
  } catch (const std::exception& e) {
    throw std::runtime_error(std::string(what) + " failed: " + e.what());
  }
}

}  // namespace shardbench
