#include "workloads/llama/llama_specs.hpp"

#include <stdexcept>
#include <string>
#include <utility>

namespace shardbench {

std::vector<ParamSpec> llama_param_specs(const LlamaDims& d, int tp) {
  if (tp < 1) {
    throw std::invalid_argument("tensor-parallel size " + std::to_string(tp) +
                                ": accepted 1 or more");
  }
  const std::pair<const char*, int64_t> split[] = {{"model.num_attention_heads", d.heads},
                                                   {"model.num_query_groups", d.kv_heads},
                                                   {"model.ffn_hidden_size", d.ffn},
                                                   {"model.vocab_size", d.vocab}};
  for (const auto& [field, value] : split) {
    if (value % tp != 0) {
      throw std::invalid_argument(std::string(field) + "=" + std::to_string(value) +
                                  ": tensor parallelism over " + std::to_string(tp) +
                                  " ranks needs a multiple of " + std::to_string(tp));
    }
  }
  const double scaled_std = scaled_init_std(d.init_std, d.num_layers);
  std::vector<ParamSpec> specs;
  auto add = [&](std::string name, std::vector<int64_t> full, int module, int layer, bool norm,
                 double std_dev, int tp_dim) {
    specs.push_back(make_param_spec(std::move(name), std::move(full), module, layer, norm, std_dev,
                                    tp_dim, tp));
  };
  add("embedding.word_embeddings.weight", {d.vocab, d.hidden}, 0, -1, false, d.init_std, 0);
  for (int64_t l = 0; l < d.num_layers; ++l) {
    const int m = static_cast<int>(l) + 1;
    const std::string p = "decoder.layers." + std::to_string(l) + ".";
    const int li = static_cast<int>(l);
    add(p + "self_attention.linear_qkv.layer_norm_weight", {d.hidden}, m, li, true, 0, -1);
    add(p + "self_attention.linear_qkv.weight", {d.q_dim() + 2 * d.kv_dim(), d.hidden}, m, li,
        false, d.init_std, 0);
    add(p + "self_attention.linear_proj.weight", {d.hidden, d.q_dim()}, m, li, false, scaled_std,
        1);
    add(p + "mlp.linear_fc1.layer_norm_weight", {d.hidden}, m, li, true, 0, -1);
    add(p + "mlp.linear_fc1.weight", {2 * d.ffn, d.hidden}, m, li, false, d.init_std, 0);
    add(p + "mlp.linear_fc2.weight", {d.hidden, d.ffn}, m, li, false, scaled_std, 1);
  }
  const int head = head_module(d);
  add("decoder.final_layernorm.weight", {d.hidden}, head, -1, true, 0, -1);
  add("output_layer.weight", {d.vocab, d.hidden}, head, -1, false, d.init_std, 0);
  return specs;
}

std::vector<int64_t> tp_part_indices(const ParamSpec& spec, const LlamaDims& d, int tp,
                                     int tp_rank) {
  if (spec.tp_dim < 0) throw std::logic_error("tp_part_indices: " + spec.name + " is not split");
  std::vector<int64_t> idx;
  auto range = [&](int64_t start, int64_t count) {
    for (int64_t i = 0; i < count; ++i) idx.push_back(start + i);
  };
  const int64_t full = spec.full_shape[static_cast<size_t>(spec.tp_dim)];
  const bool qkv = spec.tp_dim == 0 && spec.layer >= 0 && full == d.q_dim() + 2 * d.kv_dim() &&
                   spec.name.find("linear_qkv") != std::string::npos;
  const bool fc1 = spec.tp_dim == 0 && spec.name.find("linear_fc1") != std::string::npos;
  if (qkv) {
    const int64_t q = d.q_dim() / tp, kv = d.kv_dim() / tp;
    range(tp_rank * q, q);
    range(d.q_dim() + tp_rank * kv, kv);
    range(d.q_dim() + d.kv_dim() + tp_rank * kv, kv);
  } else if (fc1) {
    const int64_t f = d.ffn / tp;
    range(tp_rank * f, f);
    range(d.ffn + tp_rank * f, f);
  } else {
    const int64_t part = full / tp;
    range(tp_rank * part, part);
  }
  return idx;
}

}  // namespace shardbench
