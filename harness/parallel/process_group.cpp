#include "harness/parallel/process_group.hpp"

#include <stdexcept>
#include <vector>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#ifdef SHARDBENCH_WITH_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

namespace shardbench {

const char* to_string(CommBackend backend) {
  return backend == CommBackend::kNccl ? "nccl" : "gloo";
}

std::shared_ptr<ProcessGroup> ProcessGroup::create(const c10::intrusive_ptr<c10d::Store>& store,
                                                   const std::string& prefix, int rank, int world,
                                                   const ProcessGroupOptions& options) {
  auto prefixed = c10::make_intrusive<c10d::PrefixStore>(prefix, store);
  c10::intrusive_ptr<c10d::Backend> backend;
  if (options.backend == CommBackend::kGloo) {
    // Options::create() has no device and a 30-minute default timeout: set both.
    auto gloo_options = c10d::ProcessGroupGloo::Options::create(options.timeout);
    gloo_options->devices.push_back(
        options.gloo_hostname.empty()
            ? c10d::ProcessGroupGloo::createDefaultDevice()
            : c10d::ProcessGroupGloo::createDeviceForHostname(options.gloo_hostname));
    backend = c10::make_intrusive<c10d::ProcessGroupGloo>(prefixed, rank, world, gloo_options);
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
  return op == Reduction::kAvg ? c10d::ReduceOp(c10d::ReduceOp::AVG)
                               : c10d::ReduceOp(c10d::ReduceOp::SUM);
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

void ProcessGroup::barrier() {
  c10d::BarrierOptions opts;
  if (options_.backend == CommBackend::kNccl) {
    opts.device_ids = {options_.device_index};
  }
  wait_work(backend_->barrier(opts), "barrier");
}

void wait_work(const c10::intrusive_ptr<c10d::Work>& work, const char* what) {
  if (!work) return;
  try {
    work->wait();
  } catch (const std::exception& e) {
    throw std::runtime_error(std::string(what) + " failed: " + e.what());
  }
}

}  // namespace shardbench
