// Bytes a tensor's elements occupy (numel x element size); 0 for an undefined tensor. One
// definition for the engines' memory accounting, their NVTX payloads and the offload counters.
#pragma once

#include <cstdint>

#include <ATen/core/Tensor.h>

namespace shardbench {

inline int64_t tensor_bytes(const at::Tensor& t) {
  return t.defined() ? t.numel() * static_cast<int64_t>(t.element_size()) : 0;
}

}  // namespace shardbench
