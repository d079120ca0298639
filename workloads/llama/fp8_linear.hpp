// FP8 linear layers with per-tensor current scaling (Megatron's `-c fp8_cs`: Transformer Engine's
// "hybrid" format with the "tensorwise" recipe). Forward runs x @ w^T with both operands in e4m3;
// backward quantises the output gradient to e5m2 and runs the data and weight gradients in FP8
// too. Every cast takes its scale from the tensor's own amax at that moment (no history).
//
// Hopper's FP8 GEMM accepts only row-major x column-major operands, so each tensor is needed in
// two layouts: the input's transposed copy is made in forward (for the weight gradient) and the
// weight's transposed copy is the "transpose cache" of `ddp.keep_fp8_transpose_cache`: kept from
// forward to backward (one byte per weight element held across the step's forward), or dropped
// after forward and rebuilt from the weight in backward (one more cast per weight). Both give
// bitwise the same results, since the weight and so its scale are the same in both passes.
#pragma once

#include <atomic>
#include <cstdint>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

#include "harness/model/model.hpp"  // fp8::Quantized, ModuleHooks

namespace shardbench::fp8 {

// Current scaling of a 2-D contiguous bf16 or fp32 tensor into `fp8_dtype` (kFloat8_e4m3fn or
// kFloat8_e5m2): scale = max_finite / amax (1 when amax is 0), saturating cast. On CUDA with
// shardbench's kernels one amax pass and one cast-transpose pass; ATen ops otherwise (same
// values).
Quantized quantize(const at::Tensor& x, at::ScalarType fp8_dtype, bool rowwise, bool transposed);

// The ATen composition of quantize() (what the CPU runs), to check the CUDA kernels against.
Quantized quantize_reference(const at::Tensor& x, at::ScalarType fp8_dtype, bool rowwise,
                             bool transposed);

// The FP8 copies of weights that stay put for a whole step (DDP, and Megatron FSDP strategies
// that keep bf16 weights), so each is cast once per step rather than once per micro-batch (what
// Transformer Engine does for the first micro-batch). clear() at the start of every step, after
// the optimizer changed the weights. Weights gathered for each forward (FSDP
// optim_grads_params, FSDP2) are cast after each gather instead: caching them would hold every
// layer's FP8 copy, the memory FSDP exists to save.
class WeightCache {
 public:
  void clear();
  // The weight's FP8 copies, cast on first use in this step (`transposed` too when asked).
  Quantized get(const at::Tensor& weight, bool transposed);
  int64_t bytes() const;

 private:
  struct Entry {
    const void* data = nullptr;
    Quantized q;
  };
  std::vector<std::pair<const c10::TensorImpl*, Entry>> entries_;
};

// y = x @ weight^T for x [..., in] and weight [out, in], in FP8 as described above; the weight's
// FP8 copies come from `cache` when one is given. With `main_grads` (gradient-accumulation
// fusion) and a buffer from main_grads->main_grad(weight), the weight-gradient GEMM writes fp32
// and is added into that buffer (no bf16 rounding of the gradient; _scaled_mm cannot accumulate
// in place, so the add is a kernel of its own), and no gradient goes to autograd for the weight.
//
// `gathered`: the weight already in e4m3 (`data` [out, in] and `scale_inv`), as the FP8
// parameter all-gather delivers it (ddp.fp8_param_gather). `weight` is then read for its shape
// and as the leaf its gradient belongs to, never for its values: nothing is cast. The transpose
// backward needs is a transpose of those bytes with the same scale, made in forward and kept
// (keep_transpose_cache) or made again in backward from `data`, which must then hold the same
// bytes in backward (the engine gathers into the same storage).
at::Tensor linear(const at::Tensor& x, const at::Tensor& weight, bool keep_transpose_cache,
                  WeightCache* cache = nullptr, ModuleHooks* main_grads = nullptr,
                  const Quantized* gathered = nullptr);

// Whether the FP8 path can run on this device (CPU, or CUDA compute capability >= 8.9).
bool device_supported(const at::Device& device);

// Bookkeeping for tests and the report, over all FP8 linears of the process.
struct Counters {
  std::atomic<int64_t> weight_casts{0};           // weight quantisations (forward and backward)
  std::atomic<int64_t> backward_weight_casts{0};  // of which rebuilt the transpose in backward
  // Pre-quantised (gathered FP8) weights: GEMMs fed without a cast, and transposes of their bytes
  // (in forward when kept, else in backward).
  std::atomic<int64_t> gathered_weight_uses{0};
  std::atomic<int64_t> gathered_weight_transposes{0};
  std::atomic<int64_t> cache_bytes_live{0};  // transposed weights held from forward to bwd
  std::atomic<int64_t> cache_bytes_peak{0};
};
Counters& counters();
void reset_counters();

}  // namespace shardbench::fp8
