// The mixture-of-experts models shardbench's MoE recipes train, as data (docs/moe.md, "Models"):
// DeepSeek-V3, Qwen3-30B-A3B and Qwen3-235B-A22B with Megatron-Bridge's dimensions and router
// settings, DeepSeek-V3 cut to one GPU and to CPU-test size, and a one-GPU bench shape.
// Torch-free. The recipes (moe_recipes.hpp) write them into the configuration.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "workloads/moe/moe_specs.hpp"

namespace shardbench {

// The router's settings, named as Megatron's TransformerConfig fields (docs/moe.md, "Models").
enum class MoeRouterScore { kSoftmax, kSigmoid };  // moe_router_score_function
enum class MoeLoadBalancing {
  kAuxLoss,
  kSeqAuxLoss,
  kGlobalAuxLoss,
  kNone
};  // ..._load_balancing_type
struct MoeRouterSettings {
  MoeRouterScore score_function = MoeRouterScore::kSoftmax;
  bool pre_softmax = false;                   // moe_router_pre_softmax
  int64_t num_groups = 0;                     // moe_router_num_groups (0: no group limit)
  int64_t group_topk = 0;                     // moe_router_group_topk
  std::optional<double> topk_scaling_factor;  // moe_router_topk_scaling_factor (unset: none)
  MoeLoadBalancing load_balancing = MoeLoadBalancing::kAuxLoss;
  double aux_loss_coeff = 0.0;     // moe_aux_loss_coeff
  double bias_update_rate = 1e-3;  // moe_router_bias_update_rate (with expert bias)
  bool router_fp32 = false;        // moe_router_dtype fp32 (false: unset)
  // moe_router_force_load_balancing (benchmarks): the logits are replaced by random normals with a
  // straight-through gradient, so that tokens spread evenly over the experts whatever the
  // weights (Megatron's RandomSTE, moe_utils.py).
  bool force_load_balancing = false;
};

struct MoeModelFacts {
  std::string name;  // the recipe name it will carry (-mr)
  MoeDims dims;
  MoeRouterSettings router;
  // make_vocab_size_divisible_by: Megatron pads the vocabulary to a multiple of this times TP.
  int64_t make_vocab_size_divisible_by = 128;
  std::string source;  // where the numbers come from (docs/moe.md says more)
};

MoeDims deepseek_v3_dims();
MoeDims qwen3_30b_a3b_dims();
MoeDims qwen3_235b_a22b_dims();
// DeepSeek-V3's architecture (MLA with its ranks and head dims and YaRN, sigmoid router with the
// expert bias and group-limited top-k, a shared expert, dense first layers, one MTP layer) cut to
// one 80 GB GPU with fp32 Adam state: 8 layers of hidden 2048 (the first dense, FFN 5632), 16
// heads, 64 experts of 768 plus one shared expert of 768, top-8 over 8 groups keeping 4,
// DeepSeek-V3's vocabulary; 2.83 B parameters and 0.33 B more in the MTP layer, 3.17 B trained
// (50.6 GB of weights, gradients and Adam state at 16 bytes each).
MoeDims deepseek_v3_cut_1gpu_dims();
// The same kinds at CPU-test size: 3 layers of hidden 64 (the first dense), 4 heads, MLA ranks
// 24 / 16 with head dims 8 + 4 RoPE and 8 for values, 8 experts of 32, top-2 over 4 groups
// keeping 2, a shared expert, one MTP layer, a 512-token vocabulary, sequence 32.
MoeDims deepseek_v3_tiny_cpu_dims();
// One GPU: hidden 2048, 8 layers of 64 experts of width 768, top-8, seq 4096, Qwen3-MoE's
// attention (GQA 32/4 x 128 with QK-norm) and vocabulary. Not a published model: no real
// model's name.
MoeDims moe_bench_3b_dims();

// Every model above with its router settings, in that order.
const std::vector<MoeModelFacts>& moe_models();
// Throws std::invalid_argument naming the unknown name and the known ones.
const MoeModelFacts& find_moe_model(const std::string& name);

}  // namespace shardbench
