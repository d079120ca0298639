// The Llama model's dimensions from a resolved configuration, and the same dimensions as the
// torch-free FLOPs and memory formulas take them. Torch-free: perf-launch's worker and
// perf-project both read the model through these.
#pragma once

#include "harness/config/config.hpp"
#include "harness/measure/flops.hpp"
#include "workloads/llama/llama_specs.hpp"

namespace shardbench {

// Throws std::invalid_argument when the layers, hidden size, heads or vocabulary are not
// positive. The vocabulary is padded as Megatron pads it (padded_vocab_size).
LlamaDims llama_dims_from(const ConfigContainer& config);
// The model's dimensions as the torch-free FLOPs and memory formulas take them.
DecoderDims decoder_dims(const LlamaDims& dims);

}  // namespace shardbench
