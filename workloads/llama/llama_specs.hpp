// The Llama model's shape and parameters as the engine, the flat layouts and the projection see
// them, without torch: its dimensions, its modules in forward order and its parameter specs,
// with each tensor-parallel rank's part. The model itself (torch) is llama_model.hpp.
#pragma once

#include <cstdint>
#include <vector>

#include "harness/model/param_spec.hpp"

namespace shardbench {

struct LlamaDims {
  int64_t num_layers = 2;
  int64_t hidden = 64;
  int64_t ffn = 176;
  int64_t heads = 4;
  int64_t kv_heads = 2;
  int64_t head_dim = 16;
  int64_t vocab = 512;
  int64_t seq_length = 32;
  double rope_base = 500000.0;
  double norm_eps = 1e-5;
  double init_std = 0.02;

  int64_t q_dim() const { return heads * head_dim; }
  int64_t kv_dim() const { return kv_heads * head_dim; }
};

// Modules in forward execution order: 0 is the embedding, 1..L are the transformer layers (the
// FSDP units), L+1 is the head (final norm and output projection).
inline int64_t module_count(const LlamaDims& d) { return d.num_layers + 2; }
inline int head_module(const LlamaDims& d) { return static_cast<int>(d.num_layers) + 1; }

// All parameters in forward execution order, each shaped as one of `tp` tensor-parallel ranks
// holds it (the same shapes on every TP rank). Throws std::invalid_argument when `tp` does not
// divide the attention heads, the query groups, the FFN size or the vocabulary.
std::vector<ParamSpec> llama_param_specs(const LlamaDims& dims, int tp = 1);

// The indices along spec.tp_dim of the full parameter that TP rank `tp_rank` of `tp` holds, in
// the order it stores them. qkv keeps [q; k; v] and fc1 [gate; up]: a rank's rows are its heads'
// query rows, then its query groups' key and value rows (its gate rows, then its up rows), so
// its part has the single-rank layout of a model with heads / tp heads (ffn / tp FFN columns).
// Every other split dimension is one contiguous range.
std::vector<int64_t> tp_part_indices(const ParamSpec& spec, const LlamaDims& dims, int tp,
                                     int tp_rank);

// Whether the FP8 linears (-c fp8_cs) compute with this weight: a layer's 2-D weights (qkv,
// proj, fc1, fc2); the norms, the embedding and the output layer stay in the compute dtype.
inline bool is_fp8_linear_weight(const ParamSpec& spec) {
  return spec.layer >= 0 && spec.shape.size() == 2;
}

}  // namespace shardbench
