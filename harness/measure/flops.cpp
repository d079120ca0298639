#include "harness/measure/flops.hpp"

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

}  // namespace shardbench
