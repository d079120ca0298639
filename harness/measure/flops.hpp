// Model FLOPs and parameter count of a dense Llama-style decoder (GQA attention, SwiGLU MLP,
// RMSNorm, no biases, untied embedding and output head). Torch-free.
#pragma once

#include <cstdint>

namespace shardbench {

// The dimensions the FLOPs formula and the parameter count need; names follow Megatron's
// TransformerConfig (num_query_groups = KV heads, kv_channels = head dim).
struct DecoderDims {
  int64_t num_layers = 0;
  int64_t hidden_size = 0;
  int64_t ffn_hidden_size = 0;
  int64_t num_attention_heads = 0;
  int64_t num_query_groups = 0;  // KV heads
  int64_t kv_channels = 0;       // head dim
  int64_t vocab_size = 0;        // padded vocabulary (what the embedding table holds)
};

// Megatron-LM `num_floating_point_operations` (megatron/training/training.py) for one global
// batch of `batch` samples of `seq` tokens, dense GQA with SwiGLU (ffn factor 3):
//   6*T*[L*(h*ffn*3 + h*(q+2k) + q*h) + h*V] + 6*B*s^2*L*q,   T = B*s,
//   q = heads*head_dim, k = kv_heads*head_dim.
// 6 = 3 passes (forward, weight grad, input grad) x 2 FLOPs per multiply-add; the attention
// term is halved for the causal mask. A double: 405B-class batches exceed int64.
double model_flops_per_step(const DecoderDims& dims, int64_t batch, int64_t seq);

// model_flops_per_step / (batch * seq); independent of batch.
double model_flops_per_token(const DecoderDims& dims, int64_t seq);

// Parameter count split the way FSDP groups them: per transformer layer (an FSDP unit) and the
// modules outside units (embedding, final norm, output head).
struct DecoderParamCounts {
  int64_t embedding = 0;    // V*h
  int64_t per_layer = 0;    // q,k,v,o projections + 3 SwiGLU matrices + 2 RMSNorm weights
  int64_t final_norm = 0;   // h
  int64_t output_head = 0;  // V*h (untied)
  int64_t num_layers = 0;

  int64_t layers_total() const { return per_layer * num_layers; }
  int64_t outside_layers() const { return embedding + final_norm + output_head; }
  int64_t total() const { return layers_total() + outside_layers(); }
};

DecoderParamCounts decoder_param_counts(const DecoderDims& dims);

}  // namespace shardbench
