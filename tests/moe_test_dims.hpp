// The small mixture of experts the MoE tests share (torch-free): 3 layers of hidden 32, the first
// dense, 8 experts of width 16, top-2, GQA 4/2 heads of 8, a 64-token vocabulary. Each test sets
// what it studies on top (shared experts, QK-norm, sequence length, init std).
#pragma once

#include "workloads/moe/moe_models.hpp"
#include "workloads/moe/moe_specs.hpp"

namespace shardbench::testing {

inline MoeDims small_moe_dims() {
  MoeDims d;
  d.num_layers = 3;
  d.first_k_dense_replace = 1;
  d.hidden = 32;
  d.ffn = 48;
  d.heads = 4;
  d.kv_heads = 2;
  d.head_dim = 8;
  d.vocab = 64;
  d.num_experts = 8;
  d.moe_ffn_hidden = 16;
  d.router_topk = 2;
  return d;
}

// The GPU tests' MoE: 2 layers of hidden 256, the first dense, 16 experts of width 128, top-4,
// GQA 4/2 heads of 64, a 512-token vocabulary, sequences of 128 (widths the grouped GEMM takes).
inline MoeDims gpu_moe_dims() {
  MoeDims d;
  d.num_layers = 2;
  d.first_k_dense_replace = 1;
  d.hidden = 256;
  d.ffn = 512;
  d.heads = 4;
  d.kv_heads = 2;
  d.head_dim = 64;
  d.vocab = 512;
  d.seq_length = 128;
  d.num_experts = 16;
  d.moe_ffn_hidden = 128;
  d.router_topk = 4;
  d.init_std = 0.05;
  return d;
}

// DeepSeek-V3's aux-loss-free balancing: sigmoid scores, the top-k's probs scaled by 2.5, no aux
// loss, the expert bias moved by 1e-2 a step (with dims.router_expert_bias).
inline MoeRouterSettings expert_bias_router() {
  MoeRouterSettings r;
  r.score_function = MoeRouterScore::kSigmoid;
  r.load_balancing = MoeLoadBalancing::kNone;
  r.topk_scaling_factor = 2.5;
  r.bias_update_rate = 1e-2;
  return r;
}

}  // namespace shardbench::testing
