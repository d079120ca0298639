// Per-layer CUDA graphs as the model sees them (model.cuda_graph_impl=local with
// model.cuda_graph_scope=[attn], [mlp] or [attn, mlp]; docs/cuda-graphs.md, "Per-layer scopes").
//
// A model that supports them hands each graphable sub-block of each layer to a LayerGraphRunner
// instead of running it: its input, the weights it reads and a function that runs it. The runner
// (harness/engine/layer_graphs.hpp) runs it eagerly during the warm-up steps, then captures its
// forward and its backward once and replays them for every later micro-batch, behind an autograd
// node whose backward hands the weights' gradients to autograd, so that the engine's gradient
// hooks fire outside the graphs as in eager mode. Megatron-LM's CudaGraphManager
// (cuda_graph_impl=local) captures the same sub-blocks: `attn` is TransformerLayer's
// _forward_attention (input norm, QKV, attention, output projection, residual add), `mlp` its
// _forward_mlp of a dense layer (pre-MLP norm, fc1, SwiGLU, fc2, residual add).
//
// Needs ATen; only the engine library includes it.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include <ATen/ATen.h>

#include "harness/model/model.hpp"

namespace shardbench {

enum class LayerScope { kAttn, kMlp };

inline const char* layer_scope_name(LayerScope s) {
  return s == LayerScope::kAttn ? "attn" : "mlp";
}

// One sub-block of one layer, as the model hands it to the runner.
struct LayerBlock {
  int64_t layer = 0;
  LayerScope scope = LayerScope::kAttn;
  at::Tensor input;  // the sub-block's input activations
  // The weights it reads, the engine's leaves (DataParallelEngine::params()): a graph reads them
  // where they were at capture, and their gradients go to autograd through the runner's node.
  std::vector<at::Tensor> params;
  // The hooks its linears hand weight gradients to under gradient-accumulation fusion
  // (ModuleHooks::main_grad); null without.
  ModuleHooks* wgrad = nullptr;
  // Runs the sub-block on `x` with grad mode as the caller set it. `wgrad_hooks` replaces `wgrad`
  // for this call when not null (the runner records the fused weight gradients through it).
  std::function<at::Tensor(const at::Tensor& x, ModuleHooks* wgrad_hooks)> forward;
};

class LayerGraphRunner {
 public:
  virtual ~LayerGraphRunner() = default;
  // The sub-block's output for `block.input`: the forward run eagerly, or replayed.
  virtual at::Tensor run(const LayerBlock& block) = 0;
};

}  // namespace shardbench
