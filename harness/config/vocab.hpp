// The vocabulary a model's embedding table and output layer hold. Torch-free; resolution checks
// the tensor-parallel split with it, the FLOPs and memory accounting and the models size their
// tables with it.
#pragma once

#include <cstdint>

namespace shardbench {

// The vocabulary the embedding table holds: `vocab` rounded up to a multiple of
// `divisible_by` x `tp` when `should_pad` (model.should_pad_vocab,
// model.make_vocab_size_divisible_by, the tensor-parallel size), as Megatron-LM's
// _vocab_size_with_padding (megatron/training/tokenizer/tokenizer.py) and the engine
// (workloads/llama/llama_config.cpp, llama_dims_from) pad it.
int64_t padded_vocab_size(int64_t vocab, int64_t divisible_by, bool should_pad, int tp = 1);

}  // namespace shardbench
