#include "harness/engine/device_runtime.hpp"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <nccl.h>
#include <torch/version.h>

namespace shardbench {

bool cuda_available() { return at::hasCUDA() && c10::cuda::device_count() > 0; }

int cuda_device_count() { return c10::cuda::device_count(); }

void set_cuda_device(int index) { c10::cuda::set_device(static_cast<c10::DeviceIndex>(index)); }

std::string device_name(const at::Device& device) {
  if (!device.is_cuda()) return "cpu";
  return at::cuda::getDeviceProperties(device.index())->name;
}

void synchronize_device(const at::Device& device) {
  if (device.is_cuda()) c10::cuda::device_synchronize();
}

namespace {

// The caching allocator sets up its per-device state on the first allocation; its statistics
// calls reject a device it has not seen yet ("Invalid device argument").
void touch_allocator(const at::Device& device) {
  (void)at::empty({1}, at::TensorOptions().device(device).dtype(at::kByte));
}

}  // namespace

AllocatorSnapshot allocator_snapshot(const at::Device& device, const std::string& when, int rank) {
  AllocatorSnapshot s;
  s.when = when;
  s.rank = rank;
  if (!device.is_cuda()) return s;
  touch_allocator(device);
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
  constexpr size_t kAll = 0;  // StatType::AGGREGATE
  s.allocated_bytes = stats.allocated_bytes[kAll].current;
  s.max_allocated_bytes = stats.allocated_bytes[kAll].peak;
  s.reserved_bytes = stats.reserved_bytes[kAll].current;
  s.max_reserved_bytes = stats.reserved_bytes[kAll].peak;
  s.num_alloc_retries = stats.num_alloc_retries;
  s.num_ooms = stats.num_ooms;
  return s;
}

int64_t allocator_reserved_bytes(const at::Device& device) {
  if (!device.is_cuda()) return 0;
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
  return stats.reserved_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)]
      .current;
}

void copy_to_device_async(at::Tensor& dst, const at::Tensor& src) {
  if (!dst.is_cuda() || !src.is_cpu()) {
    dst.copy_(src);
    return;
  }
  at::Tensor staged = at::empty(src.sizes(), src.options().pinned_memory(true));
  staged.copy_(src);
  dst.copy_(staged, /*non_blocking=*/true);
}

at::Tensor to_device_async(const at::Tensor& src, const at::Device& device) {
  if (!device.is_cuda() || !src.is_cpu()) return src.to(device);
  at::Tensor dst = at::empty(src.sizes(), src.options().device(device));
  copy_to_device_async(dst, src);
  return dst;
}

void empty_allocator_cache(const at::Device& device) {
  if (!device.is_cuda()) return;
  c10::cuda::CUDACachingAllocator::emptyCache();
}

void reset_allocator_peaks(const at::Device& device) {
  if (!device.is_cuda()) return;
  touch_allocator(device);
  c10::cuda::CUDACachingAllocator::resetPeakStats(device.index());
}

int64_t device_total_bytes(const at::Device& device) {
  if (!device.is_cuda()) return 0;
  return static_cast<int64_t>(at::cuda::getDeviceProperties(device.index())->totalGlobalMem);
}

RuntimeVersions runtime_versions() {
  RuntimeVersions v;
  v.torch = TORCH_VERSION;
  int runtime = 0;
  if (cudaRuntimeGetVersion(&runtime) == cudaSuccess) {
    v.cuda = std::to_string(runtime / 1000) + "." + std::to_string((runtime % 1000) / 10);
  }
  v.nccl = std::to_string(NCCL_MAJOR) + "." + std::to_string(NCCL_MINOR) + "." +
           std::to_string(NCCL_PATCH);
  const long cudnn = at::detail::getCUDAHooks().versionCuDNN();
  if (cudnn > 0) v.cudnn = std::to_string(cudnn);
  return v;
}

}  // namespace shardbench
