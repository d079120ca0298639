#include "harness/measure/flops.hpp"
#include "harness/config/config.hpp"
#include "harness/config/vocab.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

namespace shardbench {

double model_flops_per_step(const DecoderDims& d, int64_t batch, int64_t seq) {
  const double h = static_cast<double>(d.hidden_size);
  const double q = static_cast<double>(d.num_attention_heads * d.kv_channels);
  const double k = static_cast<double>(d.num_query_groups * d.kv_channels);
  const double layers = static_cast<double>(d.num_layers);
  const double tokens = static_cast<double>(batch) * static_cast<double>(seq);
  constexpr double kSwiGluFactor = 3;  // gate, up and down projections
  const double per_layer_matmul =
      h * static_cast<double>(d.ffn_hidden_size) * kSwiGluFactor + h * (q + 2 * k) + q * h;
  const double linear = 6 * tokens * (layers * per_layer_matmul + h * d.vocab_size);
  const double causal_attention =
      6 * static_cast<double>(batch) * static_cast<double>(seq) * seq * layers * q;
  return linear + causal_attention;
}

double model_flops_per_token(const DecoderDims& dims, int64_t seq) {
  return model_flops_per_step(dims, 1, seq) / static_cast<double>(seq);
}

DecoderParamCounts decoder_param_counts(const DecoderDims& d) {
  const int64_t h = d.hidden_size;
  const int64_t q = d.num_attention_heads * d.kv_channels;
  const int64_t k = d.num_query_groups * d.kv_channels;
  DecoderParamCounts c;
  c.embedding = d.vocab_size * h;
  const int64_t attention = h * q + 2 * h * k + q * h;  // q, k, v, o; no biases
  const int64_t mlp = 3 * h * d.ffn_hidden_size;        // SwiGLU gate, up, down
  const int64_t norms = 2 * h;                          // pre-attention and pre-MLP RMSNorm
  c.per_layer = attention + mlp + norms;
  c.final_norm = h;
  c.output_head = d.vocab_size * h;
  c.num_layers = d.num_layers;
  return c;
}

DecoderParamCounts decoder_param_counts(const DecoderDims& d, int tp) {
  if (tp < 1) {
    throw std::invalid_argument("tensor-parallel size " + std::to_string(tp) +
                                ": accepted 1 or more");
  }
  const std::pair<const char*, int64_t> split[] = {
      {"model.num_attention_heads", d.num_attention_heads},
      {"model.num_query_groups", d.num_query_groups},
      {"model.ffn_hidden_size", d.ffn_hidden_size},
      {"model.vocab_size", d.vocab_size}};
  for (const auto& [field, value] : split) {
    if (value % tp != 0) {
      throw std::invalid_argument(std::string(field) + "=" + std::to_string(value) +
                                  ": tensor parallelism over " + std::to_string(tp) +
                                  " ranks needs a multiple of " + std::to_string(tp));
    }
  }
  DecoderParamCounts c = decoder_param_counts(d);
  const int64_t norms = 2 * d.hidden_size;  // replicated in the TP group
  c.embedding /= tp;
  c.per_layer = (c.per_layer - norms) / tp + norms;
  c.output_head /= tp;
  return c;
}

int64_t tp_replicated_params(const DecoderDims& d) {
  return (2 * d.num_layers + 1) * d.hidden_size;
}

double megatron_layer_activation_bytes(const DecoderDims& d, int64_t seq, int64_t micro_batch,
                                       int tp) {
  const double sbh = static_cast<double>(seq) * static_cast<double>(micro_batch) *
                     static_cast<double>(d.hidden_size);
  const double ffn_ratio =
      static_cast<double>(d.ffn_hidden_size) / static_cast<double>(d.hidden_size);
  return sbh * (18 + 4 * ffn_ratio) / tp;
}

double megatron_activation_bytes(const DecoderDims& d, int64_t seq, int64_t micro_batch, int tp) {
  const double sb = static_cast<double>(seq) * static_cast<double>(micro_batch);
  const double h = static_cast<double>(d.hidden_size);
  double bytes =
      megatron_layer_activation_bytes(d, seq, micro_batch, 1) * static_cast<double>(d.num_layers);
  bytes += 8 * sb;  // the embedding's input (token ids)
  bytes += sb * h;  // the embedding's output (Megatron counts its dropout mask)
  bytes += sb * h * 4 * (1 + static_cast<double>(d.vocab_size) / h);  // output layer and loss
  return bytes / tp;
}

DecoderDims decoder_dims_of(const ModelConfig& m, int tp) {
  DecoderDims d;
  d.num_layers = m.num_layers;
  d.hidden_size = m.hidden_size;
  d.ffn_hidden_size = ffn_hidden_of(m);
  d.num_attention_heads = m.num_attention_heads;
  d.num_query_groups = query_groups_of(m);
  d.kv_channels = head_dim_of(m);
  d.vocab_size = padded_vocab_size(m.vocab_size.value_or(0), m.make_vocab_size_divisible_by,
                                   m.should_pad_vocab, tp);
  return d;
}

}  // namespace shardbench
