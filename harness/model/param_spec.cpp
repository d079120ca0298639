#include "harness/model/param_spec.hpp"

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

}  // namespace shardbench
