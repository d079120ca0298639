// Model FLOPs and parameter count of a dense Llama-style decoder (GQA attention, SwiGLU MLP,
// RMSNorm, no biases, untied embedding and output head). Torch-free.
#pragma once

#include <cstdint>

namespace shardbench {

struct ModelConfig;  // harness/config/config.hpp

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

// The dims of a model config (model.*), null fields taking Megatron's defaults (ffn 4h, one KV
// head per query head, head dim h / heads) and the vocabulary padded for `tp` tensor-parallel
// ranks (padded_vocab_size). No validation: resolution has checked the fields.
DecoderDims decoder_dims_of(const ModelConfig& model, int tp = 1);

// The same counts for one of `tp` tensor-parallel ranks (docs/tensor-parallel.md, "Memory model
// and FLOPs"): every matrix is split over the TP ranks (column-parallel qkv and fc1, row-parallel
// proj and fc2, vocab-parallel embedding and output layer), the RMSNorm weights are whole on every
// rank. per_layer, embedding, final_norm and output_head are then a rank's elements; tp = 1 is
// decoder_param_counts(dims). Throws std::invalid_argument when tp < 1 or does not divide the
// heads, the query groups, the FFN size or the vocabulary (validation refuses those first).
DecoderParamCounts decoder_param_counts(const DecoderDims& dims, int tp);

// Elements of one TP rank's parameters that every TP rank holds whole (the RMSNorm weights:
// 2 per layer and the final norm), which the gradient norm must count once, not tp times.
int64_t tp_replicated_params(const DecoderDims& dims);


// Megatron-LM's activation memory per rank with sequence parallelism
// (megatron/training/theoretical_memory_usage.py, compute_activation_memory; Table 2 of Korthikanti
// et al., "Reducing Activation Recomputation in Large Transformer Models", arXiv 2205.05198), in
// bytes, for one micro-batch of `micro_batch` sequences of `seq` tokens, pipeline size 1:
//   L * s*b*h*(18 + 4*ffn/h) + 8*s*b + s*b*h + 4*s*b*h*(1 + V/h),   all divided by tp.
// With sequence parallelism every activation of a layer is split over the TP ranks (the norms,
// the residual stream and dropout along the sequence, the attention and MLP along heads and FFN
// columns), so the whole sum divides by tp. The per-layer term is Megatron's (it assumes 16-bit
// activations and selective recompute of the attention core; it ignores GQA's narrower K and V):
// a model, not the census (memory.saved_activations measures what this engine keeps).
double megatron_activation_bytes(const DecoderDims& dims, int64_t seq, int64_t micro_batch,
                                 int tp);
// The per-layer term alone, s*b*h*(18 + 4*ffn/h) / tp.
double megatron_layer_activation_bytes(const DecoderDims& dims, int64_t seq, int64_t micro_batch,
                                       int tp);

}  // namespace shardbench
