// NCCL user buffers (ddp.nccl_ub; docs/nccl-user-buffers.md): the engine's communication
// buffers are allocated from one CUDA memory pool whose segments come from ncclMemAlloc, and the
// pool is registered with the communicators that move them, so NCCL reads and writes those
// buffers in place (fewer SMs and no staging copies) instead of going through its own buffers.
//
// Megatron's DDP and Megatron FSDP do the same through torch.cuda.MemPool with NCCL's allocator
// and ProcessGroupNCCL.register_mem_pool; this is the C++ side of those two calls.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

namespace shardbench {

class ProcessGroup;

class CommBufferPool {
 public:
  // A pool on CUDA device `device_index` backed by `pg`'s NCCL allocator (ncclMemAlloc).
  // `symmetric`: register as NCCL symmetric windows (ncclCommWindowRegister, Megatron's default)
  // rather than local user buffers (ncclCommRegister). Throws std::invalid_argument naming
  // ddp.nccl_ub when `pg` is not an NCCL group or its NCCL cannot allocate registrable memory.
  CommBufferPool(ProcessGroup& pg, int device_index, bool symmetric);
  ~CommBufferPool();
  CommBufferPool(const CommBufferPool&) = delete;
  CommBufferPool& operator=(const CommBufferPool&) = delete;

  // While a Scope lives, the CUDA allocations this thread makes come from the pool (the C++ form
  // of torch.cuda.use_mem_pool). Other threads allocate as before.
  class Scope {
   public:
    explicit Scope(CommBufferPool& pool);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    CommBufferPool& pool_;
  };

  // Registers the pool with each distinct group in `groups` (ProcessGroupNCCL::registerMemPool):
  // its segments now, and through the allocator's trace hook every segment it grows later.
  // Collective when symmetric. Registers a group once however often it is named.
  void register_with(const std::vector<ProcessGroup*>& groups);
  bool registered() const { return !registered_.empty(); }
  bool symmetric() const { return symmetric_; }

  struct Segments {
    int64_t count = 0;
    int64_t bytes = 0;
  };
  // The pool's segments as the caching allocator's snapshot lists them.
  Segments segments() const;
  // Whether [ptr, ptr + bytes) lies inside one segment of the pool.
  bool holds(const void* ptr, int64_t bytes) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  bool symmetric_ = false;
  std::vector<const ProcessGroup*> registered_;
};

}  // namespace shardbench
