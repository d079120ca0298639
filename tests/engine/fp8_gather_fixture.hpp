// Shared by the FP8 parameter all-gather tests (fp8_gather_test.cpp for Megatron FSDP units,
// fp8_gather_distopt_test.cpp for the distributed optimizer): the small FP8-friendly shape, the
// leaves in llama_param_specs' order, and the check that a gathered parameter is what its fp32
// main weight says it should be.
#pragma once

#include <cstdint>
#include <vector>

#include <ATen/ATen.h>

#include "harness/parallel/engine.hpp"
#include "workloads/llama/fp8_linear.hpp"
#include "workloads/llama/llama_model.hpp"

namespace shardbench::testing {

inline LlamaDims fp8_gather_dims(int64_t layers) {
  LlamaDims d;
  d.num_layers = layers;
  d.hidden = 32;
  d.heads = 4;
  d.kv_heads = 2;
  d.head_dim = 8;
  d.ffn = 48;
  d.vocab = 64;
  d.seq_length = 16;
  return d;
}

// What the layers compute with, against the whole fp32 main weight `main`: a bf16 parameter is
// the main weight in bf16; an FP8 linear's gathered bytes and scale are the main weight cast with
// one per-tensor scale (what fp8::quantize makes of it on one rank).
inline bool gathered_like_main(DataParallelEngine& engine, const ParamSpec& spec,
                               const at::Tensor& leaf, const at::Tensor& main) {
  if (!is_fp8_linear_weight(spec)) return at::equal(leaf, main.to(at::kBFloat16));
  const fp8::Quantized* q = engine.fp8_weight(leaf);
  const fp8::Quantized ref = fp8::quantize(main, at::kFloat8_e4m3fn, true, false);
  return q != nullptr && at::equal(q->data.view(at::kByte), ref.data.view(at::kByte)) &&
         at::equal(q->scale_inv, ref.scale_inv);
}

}  // namespace shardbench::testing
