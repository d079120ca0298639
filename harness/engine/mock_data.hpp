// Mock pretraining data, as Megatron's mock dataset: random token ids from a seed. Every
// strategy sees the same global batch at the same iteration; each data-parallel rank takes its
// part of it in Megatron's sampler order.
#pragma once

#include <cstdint>

#include <ATen/ATen.h>

namespace shardbench {

// [global_batch, seq + 1] int64 token ids on the CPU for 0-based `iteration`.
at::Tensor mock_global_batch(uint64_t seed, int64_t iteration, int64_t global_batch, int64_t seq,
                             int64_t vocab);

// Micro-batch `micro` of data-parallel rank `rank`: Megatron's pretraining sampler hands each
// step of micro-batches out as consecutive blocks of `micro_batch` samples, rank-major inside a
// step: samples [micro*MBS*DP + rank*MBS, ... + MBS).
at::Tensor microbatch_rows(const at::Tensor& global_batch, int64_t micro, int64_t micro_batch,
                           int64_t dp, int64_t rank);

}  // namespace shardbench
