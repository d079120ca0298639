#include "workloads/llama/llama_config.hpp"

#include <algorithm>
#include <stdexcept>

#include "harness/config/vocab.hpp"

namespace shardbench {

DecoderDims decoder_dims(const LlamaDims& d) {
  return DecoderDims{d.num_layers, d.hidden, d.ffn, d.heads, d.kv_heads, d.head_dim, d.vocab};
}

LlamaDims llama_dims_from(const ConfigContainer& c) {
  const auto& m = c.model;
  LlamaDims d;
  d.num_layers = m.num_layers;
  d.hidden = m.hidden_size;
  d.ffn = ffn_hidden_of(m);
  d.heads = m.num_attention_heads;
  d.kv_heads = query_groups_of(m);
  d.head_dim = head_dim_of(m);
  const int64_t vocab = m.vocab_size.value_or(0);
  // Megatron pads the vocabulary to a multiple of make_vocab_size_divisible_by * TP.
  d.vocab = padded_vocab_size(vocab, m.make_vocab_size_divisible_by, m.should_pad_vocab,
                              static_cast<int>(m.tensor_model_parallel_size));
  d.seq_length = m.seq_length;
  d.rope_base = m.rotary_base;
  d.norm_eps = m.layernorm_epsilon;
  d.init_std = m.init_method_std;
  if (d.num_layers <= 0 || d.hidden <= 0 || d.heads <= 0 || d.vocab <= 0 || d.head_dim <= 0) {
    throw std::invalid_argument(
        "model dims incomplete: num_layers, hidden_size, "
        "num_attention_heads and vocab_size must be positive");
  }
  return d;
}

}  // namespace shardbench
