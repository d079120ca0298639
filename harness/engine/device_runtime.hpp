// What the worker needs from the device runtime, behind plain types: device selection,
// synchronisation, allocator statistics and library versions. The CUDA calls live in
// device_runtime.cpp only.
#pragma once

#include <string>

#include <ATen/ATen.h>

#include "harness/report/run_record.hpp"

namespace shardbench {

bool cuda_available();
int cuda_device_count();
void set_cuda_device(int index);
std::string device_name(const at::Device& device);  // GPU name, or the CPU model
// Waits for all work queued on `device` (no-op on CPU).
void synchronize_device(const at::Device& device);
// Caching-allocator statistics of `device` (CUDA only; zeros elsewhere).
AllocatorSnapshot allocator_snapshot(const at::Device& device, const std::string& when, int rank);
void reset_allocator_peaks(const at::Device& device);
// Bytes the caching allocator holds from the driver now (CUDA only; 0 elsewhere): what a CUDA
// graph's capture adds to it is the graph's pool.
int64_t allocator_reserved_bytes(const at::Device& device);
// The device's whole memory (cudaDeviceProp::totalGlobalMem); 0 on CPU.
int64_t device_total_bytes(const at::Device& device);
// `src` (host memory) into `dst` (on a CUDA device) through a fresh pinned block, without
// blocking the host: a copy from pageable memory waits for the stream's earlier work before it
// returns, and the GPU then idles while the host launches what follows. The caching host
// allocator keeps the block until the copy has read it. Any other pair: a plain copy_.
void copy_to_device_async(at::Tensor& dst, const at::Tensor& src);
// `src` on `device` the same way (a fresh device tensor); `src` itself where it is there already.
at::Tensor to_device_async(const at::Tensor& src, const at::Device& device);
// torch.cuda.empty_cache(): returns the caching allocator's unused blocks to the driver (no-op
// on CPU).
void empty_allocator_cache(const at::Device& device);

struct RuntimeVersions {
  std::string torch, cuda, nccl, cudnn;
};
RuntimeVersions runtime_versions();

}  // namespace shardbench
