// What the data-parallel engine, the flat layouts and the projection know about a model's
// parameters, independent of which model it is. Torch-free: a model family (workloads/llama/)
// describes its parameters with these and the engine places them; nothing here names a model.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace shardbench {

// The data-parallel group a parameter's gradients are reduced over and its buffers sharded
// over. Dense parameters use the data-parallel group; a mixture of experts' expert weights use
// the expert-data-parallel group (the ranks that hold the same experts).
enum class ReduceGroup { kDataParallel, kExpertDataParallel };

// One parameter of a model, in forward execution order. `module` is the index of the module
// that uses it: the engine groups parameters by module (an FSDP unit or a module outside the
// units) and gathers, prefetches and releases them around that module's forward and backward.
struct ParamSpec {
  std::string name;               // Megatron-style name, e.g. "decoder.layers.3.mlp.linear_fc1.weight"
  std::vector<int64_t> shape;
  int module = 0;                 // the model's module index (Llama: module_count())
  int layer = -1;                 // FSDP unit (transformer layer) index, -1 outside units
  ReduceGroup reduce_group = ReduceGroup::kDataParallel;
  bool no_weight_decay = false;   // Megatron skips weight decay for norms (1-D params)
  double init_std = 0.0;          // 0: initialised to ones (norm weights)
  // Tensor parallelism (docs/tensor-parallel.md): the dimension of the full parameter that the
  // TP ranks split, 0 (column-parallel qkv and fc1, vocab-parallel embedding and output layer:
  // output rows) or 1 (row-parallel proj and fc2: input columns), or -1 where every TP rank
  // holds the whole parameter (the RMSNorm weights). `shape` is this rank's part, `full_shape`
  // the parameter before the split (equal with one TP rank).
  int tp_dim = -1;
  std::vector<int64_t> full_shape;
  int64_t numel() const;
  int64_t row_elems() const;      // elements per dim-0 row
};

// One parameter as TP rank parts of `tp` hold it: `full_shape` split on `tp_dim` (-1: whole on
// every TP rank; the dimension must divide, which the model family checks first, naming its
// field).
ParamSpec make_param_spec(std::string name, std::vector<int64_t> full_shape, int module, int layer,
                          bool no_weight_decay, double init_std, int tp_dim, int tp,
                          ReduceGroup reduce_group = ReduceGroup::kDataParallel);

// Megatron's scaled_init_method_normal: projections that write into the residual stream
// (attention out, MLP fc2) start with init_std / sqrt(2 * num_layers).
double scaled_init_std(double init_std, int64_t num_layers);

}  // namespace shardbench
