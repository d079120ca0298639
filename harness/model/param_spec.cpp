#include "harness/model/param_spec.hpp"

#include <cmath>
#include <utility>

namespace shardbench {

int64_t ParamSpec::numel() const {
  int64_t n = 1;
  for (auto s : shape) n *= s;
  return n;
}

int64_t ParamSpec::row_elems() const {
  int64_t n = 1;
  for (size_t i = 1; i < shape.size(); ++i) n *= shape[i];
  return n;
}

ParamSpec make_param_spec(std::string name, std::vector<int64_t> full_shape, int module, int layer,
                          bool no_weight_decay, double init_std, int tp_dim, int tp,
                          ReduceGroup reduce_group) {
  ParamSpec s;
  s.name = std::move(name);
  s.shape = full_shape;
  s.module = module;
  s.layer = layer;
  s.reduce_group = reduce_group;
  s.no_weight_decay = no_weight_decay;
  s.init_std = init_std;
  s.tp_dim = tp_dim;
  s.full_shape = std::move(full_shape);
  if (tp_dim >= 0) s.shape[static_cast<size_t>(tp_dim)] /= tp;
  return s;
}

double scaled_init_std(double init_std, int64_t num_layers) {
  return init_std / std::sqrt(2.0 * static_cast<double>(num_layers));
}

}  // namespace shardbench
