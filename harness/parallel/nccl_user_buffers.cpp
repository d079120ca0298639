#include "harness/parallel/nccl_user_buffers.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <thread>

#include "harness/parallel/process_group.hpp"

#ifdef SHARDBENCH_WITH_NCCL
#include <dlfcn.h>

#include <ATen/cuda/MemPool.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/csrc/cuda/CUDAPluggableAllocator.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

namespace shardbench {

#ifdef SHARDBENCH_WITH_NCCL

namespace {

c10d::ProcessGroupNCCL* nccl_of(ProcessGroup& pg) {
  if (pg.backend_kind() != CommBackend::kNccl) return nullptr;
  return dynamic_cast<c10d::ProcessGroupNCCL*>(&pg.backend());
}

[[noreturn]] void refuse(const std::string& why) {
  throw std::invalid_argument("ddp.nccl_ub=true: " + why + "; accepted: false");
}

// NCCL's allocation entry points (nccl.h, NCCL >= 2.19), looked up in the libnccl that
// libtorch_cuda already loaded: shardbench does not link NCCL itself, and the symbols are in the
// process's global scope through libtorch_cuda's own dependency on it.
using MemAllocFn = ncclResult_t (*)(void**, size_t);
using MemFreeFn = ncclResult_t (*)(void*);
using GetVersionFn = ncclResult_t (*)(int*);

struct NcclMemFns {
  MemAllocFn alloc = nullptr;
  MemFreeFn free = nullptr;
  int version = 0;
};

NcclMemFns nccl_mem_fns() {
  // The global scope first; then libnccl by name, if it is loaded but not global.
  void* scope = RTLD_DEFAULT;
  if (dlsym(scope, "ncclGetVersion") == nullptr) {
    if (void* lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_NOLOAD)) scope = lib;
  }
  NcclMemFns f;
  f.alloc = reinterpret_cast<MemAllocFn>(dlsym(scope, "ncclMemAlloc"));
  f.free = reinterpret_cast<MemFreeFn>(dlsym(scope, "ncclMemFree"));
  auto get_version = reinterpret_cast<GetVersionFn>(dlsym(scope, "ncclGetVersion"));
  if (get_version != nullptr) get_version(&f.version);
  return f;
}

// torch's pluggable allocator over ncclMemAlloc/ncclMemFree: the allocator Megatron's
// nccl_allocator module builds for its MemPool. torch's ProcessGroupNCCL::getMemAllocator is not
// used: in torch 2.11 it refuses unless the device supports NVLink multicast (what
// symmetric-memory tensors need), which the shared machines turn off and local user-buffer
// registration does not need.
std::shared_ptr<c10::cuda::CUDACachingAllocator::CUDAAllocator> nccl_allocator(int device_index) {
  const NcclMemFns f = nccl_mem_fns();
  if (f.alloc == nullptr || f.free == nullptr) {
    refuse("the NCCL loaded by libtorch_cuda (version code " + std::to_string(f.version) +
           ") has no ncclMemAlloc/ncclMemFree (NCCL 2.19 and newer have them), so it cannot "
           "allocate registrable memory on cuda:" + std::to_string(device_index));
  }
  auto alloc = [fn = f.alloc](size_t bytes, int device, cudaStream_t) -> void* {
    c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
    void* ptr = nullptr;
    const ncclResult_t rc = fn(&ptr, bytes);
    if (rc != ncclSuccess) {
      throw std::runtime_error("ddp.nccl_ub=true: ncclMemAlloc of " + std::to_string(bytes) +
                               " bytes on cuda:" + std::to_string(device) +
                               " failed with ncclResult_t " + std::to_string(rc));
    }
    return ptr;
  };
  auto release = [fn = f.free](void* ptr, size_t, int device, cudaStream_t) {
    c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
    fn(ptr);
  };
  return torch::cuda::CUDAPluggableAllocator::createCustomAllocator(alloc, release);
}

}  // namespace

struct CommBufferPool::Impl {
  c10::DeviceIndex device = 0;
  std::unique_ptr<at::cuda::MemPool> pool;
};

CommBufferPool::CommBufferPool(ProcessGroup& pg, int device_index, bool symmetric)
    : impl_(std::make_unique<Impl>()), symmetric_(symmetric) {
  if (nccl_of(pg) == nullptr) {
    refuse(std::string("NCCL user buffers need the NCCL backend, and this group runs ") +
           to_string(pg.backend_kind()));
  }
  impl_->device = static_cast<c10::DeviceIndex>(device_index);
  std::shared_ptr<c10::cuda::CUDACachingAllocator::CUDAAllocator> allocator =
      nccl_allocator(device_index);
  c10::cuda::CUDAGuard guard(impl_->device);
  impl_->pool = std::make_unique<at::cuda::MemPool>(allocator);
}

CommBufferPool::~CommBufferPool() = default;

CommBufferPool::Scope::Scope(CommBufferPool& pool) : pool_(pool) {
  const auto tid = std::this_thread::get_id();
  c10::cuda::CUDACachingAllocator::beginAllocateToPool(
      pool_.impl_->device, pool_.impl_->pool->id(),
      [tid](cudaStream_t) { return std::this_thread::get_id() == tid; });
}

CommBufferPool::Scope::~Scope() {
  // torch.cuda.use_mem_pool's exit: stop routing, then drop the reference begin took.
  c10::cuda::CUDACachingAllocator::endAllocateToPool(pool_.impl_->device,
                                                     pool_.impl_->pool->id());
  c10::cuda::CUDACachingAllocator::releasePool(pool_.impl_->device, pool_.impl_->pool->id());
}

void CommBufferPool::register_with(const std::vector<ProcessGroup*>& groups) {
  // As Megatron's manual registration: every allocation made so far has completed.
  c10::cuda::device_synchronize();
  for (ProcessGroup* pg : groups) {
    if (pg == nullptr) continue;
    if (std::find(registered_.begin(), registered_.end(), pg) != registered_.end()) continue;
    c10d::ProcessGroupNCCL* nccl = nccl_of(*pg);
    if (nccl == nullptr) {
      refuse(std::string("a communicator of this run is ") + to_string(pg->backend_kind()) +
             ", and only NCCL registers user buffers");
    }
    nccl->registerMemPool(impl_->pool.get(), symmetric_);
    registered_.push_back(pg);
  }
}

CommBufferPool::Segments CommBufferPool::segments() const {
  Segments s;
  for (const auto& seg : c10::cuda::CUDACachingAllocator::snapshot(impl_->pool->id(), false)
                             .segments) {
    s.count += 1;
    s.bytes += static_cast<int64_t>(seg.total_size);
  }
  return s;
}

bool CommBufferPool::holds(const void* ptr, int64_t bytes) const {
  const auto begin = reinterpret_cast<size_t>(ptr);
  const auto end = begin + static_cast<size_t>(std::max<int64_t>(bytes, 0));
  for (const auto& seg : c10::cuda::CUDACachingAllocator::snapshot(impl_->pool->id(), false)
                             .segments) {
    if (begin >= seg.address && end <= seg.address + seg.total_size) return true;
  }
  return false;
}

#else  // !SHARDBENCH_WITH_NCCL

struct CommBufferPool::Impl {};

CommBufferPool::CommBufferPool(ProcessGroup&, int, bool symmetric) : symmetric_(symmetric) {
  throw std::invalid_argument(
      "ddp.nccl_ub=true: this shardbench was built without NCCL; accepted: false");
}
CommBufferPool::~CommBufferPool() = default;
CommBufferPool::Scope::Scope(CommBufferPool& pool) : pool_(pool) {}
CommBufferPool::Scope::~Scope() = default;
void CommBufferPool::register_with(const std::vector<ProcessGroup*>&) {}
CommBufferPool::Segments CommBufferPool::segments() const { return {}; }
bool CommBufferPool::holds(const void*, int64_t) const { return false; }

#endif

}  // namespace shardbench
