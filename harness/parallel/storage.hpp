// Releasing and re-materialising a tensor's memory while keeping its StorageImpl: parameters
// and autograd's saved tensors view the storage, so a gathered FSDP unit can be freed after
// forward and gathered into the same storage again before backward (what PyTorch FSDP does with
// storage resizing). Allocation goes through the storage's own allocator: on CUDA that is the
// caching allocator, on the current stream.
#pragma once

#include <ATen/ATen.h>

namespace shardbench {

inline void release_storage(const at::Tensor& t) {
  auto* impl = t.storage().unsafeGetStorageImpl();
  impl->set_data_ptr_noswap(at::DataPtr(nullptr, impl->device()));
  impl->set_nbytes(0);
}

inline void materialize_storage(const at::Tensor& t, size_t nbytes) {
  auto* impl = t.storage().unsafeGetStorageImpl();
  if (impl->nbytes() == nbytes && impl->data() != nullptr) return;
  impl->set_data_ptr_noswap(impl->allocator()->allocate(nbytes));
  impl->set_nbytes(nbytes);
}

// Points `t`'s storage at the bytes of `owner`, which keeps them (no deleter here): a gathered
// unit's persistent buffer under per-layer CUDA graphs (EngineOptions::stable_unit_weights).
inline void attach_storage(const at::Tensor& t, const at::Tensor& owner) {
  auto* impl = t.storage().unsafeGetStorageImpl();
  impl->set_data_ptr_noswap(at::DataPtr(owner.data_ptr(), impl->device()));
  impl->set_nbytes(owner.nbytes());
}

inline bool storage_materialized(const at::Tensor& t) {
  return t.storage().unsafeGetStorageImpl()->nbytes() > 0;
}

}  // namespace shardbench
