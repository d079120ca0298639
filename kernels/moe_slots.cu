// The MoE combine's sum over each token's slots (docs/moe.md, "Permute and unpermute"): for each
// token, the sum of the routed rows its slots name, in fp32 with one rounding. ATen's composition
// gathers the [tokens * slots, hidden] rows into a copy, sums over the slot dimension, and, where
// a slot is empty, first appends a zero row to the whole source (another full copy): three passes
// over the routed rows. Here each routed row is read once and each output row written once.
#include "kernels/common.cuh"

namespace shardbench::kernels {
namespace {

using detail::to_float;
using detail::Vec;
using detail::vec_elems;

constexpr int kThreads = 256;

// Grid-stride over (token, column-vector) pairs; W elements per thread step.
template <typename T, int W>
__global__ void sum_slots_kernel(const T* __restrict__ rows,
                                 const int64_t* __restrict__ row_of_slot, T* __restrict__ out,
                                 int64_t tokens, int64_t slots, int64_t hidden, int64_t n_rows) {
  const int64_t cols = hidden / W;
  const int64_t total = tokens * cols;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = i / cols, c = (i % cols) * W;
    float acc[W];
#pragma unroll
    for (int j = 0; j < W; ++j) acc[j] = 0.f;
    for (int64_t s = 0; s < slots; ++s) {
      const int64_t r = row_of_slot[t * slots + s];
      if (r < 0 || r >= n_rows) continue;  // an empty slot
      const T* src = rows + r * hidden + c;
      if constexpr (W == vec_elems<T>()) {
        const Vec<T> v = *reinterpret_cast<const Vec<T>*>(src);
#pragma unroll
        for (int j = 0; j < W; ++j) acc[j] += to_float(v.v[j]);
      } else {
        for (int j = 0; j < W; ++j) acc[j] += to_float(src[j]);
      }
    }
    T* o = out + t * hidden + c;
    if constexpr (W == vec_elems<T>()) {
      Vec<T> v;
#pragma unroll
      for (int j = 0; j < W; ++j) v.v[j] = detail::from_float<T>(acc[j]);
      *reinterpret_cast<Vec<T>*>(o) = v;
    } else {
      for (int j = 0; j < W; ++j) o[j] = detail::from_float<T>(acc[j]);
    }
  }
}

template <typename T>
void launch(const void* rows, const int64_t* row_of_slot, void* out, int64_t tokens, int64_t slots,
            int64_t hidden, int64_t n_rows, Stream stream) {
  const auto* r = static_cast<const T*>(rows);
  auto* o = static_cast<T*>(out);
  if (detail::vectorizable<T>(hidden, {rows, out})) {
    constexpr int W = vec_elems<T>();
    const int blocks = detail::grid_stride_blocks(tokens * (hidden / W), kThreads, 8);
    sum_slots_kernel<T, W>
        <<<blocks, kThreads, 0, stream>>>(r, row_of_slot, o, tokens, slots, hidden, n_rows);
  } else {
    const int blocks = detail::grid_stride_blocks(tokens * hidden, kThreads, 8);
    sum_slots_kernel<T, 1>
        <<<blocks, kThreads, 0, stream>>>(r, row_of_slot, o, tokens, slots, hidden, n_rows);
  }
  detail::check_launch("sum_slots");
}

}  // namespace

void sum_slots(const void* rows, const int64_t* row_of_slot, void* out, DType dtype, int64_t tokens,
               int64_t slots, int64_t hidden, int64_t n_rows, Stream stream) {
  if (tokens == 0 || hidden == 0) return;
  if (dtype == DType::kBFloat16) {
    launch<__nv_bfloat16>(rows, row_of_slot, out, tokens, slots, hidden, n_rows, stream);
  } else {
    launch<float>(rows, row_of_slot, out, tokens, slots, hidden, n_rows, stream);
  }
}

}  // namespace shardbench::kernels
