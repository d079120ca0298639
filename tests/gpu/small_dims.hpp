// GPU test helper: the small Llama shape the GPU tests train (hidden 256, 4 heads over 2 KV
// groups, SwiGLU 704, vocabulary 1000, 128 tokens), with `layers` layers.
#pragma once

#include <cstdint>

#include "workloads/llama/llama_model.hpp"

namespace shardbench::testing {

inline LlamaDims small_gpu_dims(int64_t layers = 2) {
  LlamaDims d;
  d.num_layers = layers;
  d.hidden = 256;
  d.heads = 4;
  d.kv_heads = 2;
  d.head_dim = 64;
  d.ffn = 704;
  d.vocab = 1000;
  d.seq_length = 128;
  return d;
}

}  // namespace shardbench::testing
