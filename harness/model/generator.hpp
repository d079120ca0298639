// A random generator on a model's device, seeded: the deterministic initial values of the
// models' parameters and the MoE router's forced-balance logits draw from it.
#pragma once

#include <cstdint>

#include <ATen/ATen.h>

namespace shardbench {

// A CUDA generator of `device`'s index, or the CPU generator's kind. Throws std::runtime_error for
// a CUDA device in a build without CUDA.
at::Generator device_generator(const at::Device& device, uint64_t seed);

}  // namespace shardbench
