#include "harness/config/vocab.hpp"

#include <algorithm>

namespace shardbench {

int64_t padded_vocab_size(int64_t vocab, int64_t divisible_by, bool should_pad, int tp) {
  const int64_t multiple = std::max<int64_t>(1, divisible_by) * std::max(1, tp);
  if (!should_pad || multiple <= 1) return vocab;
  return (vocab + multiple - 1) / multiple * multiple;
}

}  // namespace shardbench
