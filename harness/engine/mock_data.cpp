#include "harness/engine/mock_data.hpp"

#include <ATen/CPUGeneratorImpl.h>

namespace shardbench {

at::Tensor mock_global_batch(uint64_t seed, int64_t iteration, int64_t global_batch, int64_t seq,
                             int64_t vocab) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed * 7919ULL +
                                                      static_cast<uint64_t>(iteration) + 17ULL);
  return at::randint(vocab, {global_batch, seq + 1}, gen, at::TensorOptions().dtype(at::kLong));
}

at::Tensor microbatch_rows(const at::Tensor& global_batch, int64_t micro, int64_t micro_batch,
                           int64_t dp, int64_t rank) {
  return global_batch.narrow(0, micro * micro_batch * dp + rank * micro_batch, micro_batch);
}

}  // namespace shardbench
