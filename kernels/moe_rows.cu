// The MoE dispatch's routed rows from the routing map (docs/moe.md, "Permute and unpermute"):
// every (token, expert) pair of the [T, E] map in expert-major order, tokens in order inside an
// expert (the order of at::nonzero over the transposed map), with each row's token, its index in
// the flattened [T, E] probabilities, and each token's slots (the rows of its experts in
// increasing expert order, then empty slots). ATen's composition runs nonzero over a transposed
// copy of the map, a scan along each token's experts in int64, and a dozen index-arithmetic,
// gather, fill and scatter launches. Here two launches over chunks of 256 tokens: one counts each
// expert's pairs per chunk, the next turns the counts into each chunk's first row per expert and
// places every pair by the rank of its token among the chunk's tokens of that expert (warp
// ballots). The order is the same every run, so the grouped GEMM's weight gradients, which sum
// over an expert's rows, are too.
#include <stdexcept>
#include <string>

#include "kernels/common.cuh"

namespace shardbench::kernels {
namespace {

constexpr int kChunk = 256;  // tokens per block, one per thread
constexpr int kWarps = kChunk / 32;
constexpr int kWords = kMaxRouterExperts / 32;

// The token's row of the map as a bit mask (bit e % 32 of word e / 32), read 16 bytes at a time
// where the rows allow it.
__device__ __forceinline__ void load_bits(const bool* __restrict__ map, int64_t t, int experts,
                                          bool vector, uint32_t (&bits)[kWords]) {
#pragma unroll
  for (int w = 0; w < kWords; ++w) bits[w] = 0;
  const bool* row = map + t * experts;
  if (vector) {
    for (int e0 = 0; e0 < experts; e0 += 16) {
      const uint4 v = *reinterpret_cast<const uint4*>(row + e0);
      const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
      for (int j = 0; j < 16; ++j) {
        if ((words[j / 4] >> (8 * (j % 4))) & 0xffu) bits[(e0 + j) / 32] |= 1u << ((e0 + j) % 32);
      }
    }
  } else {
    for (int e = 0; e < experts; ++e) {
      if (row[e]) bits[e / 32] |= 1u << (e % 32);
    }
  }
}

__global__ void count_kernel(const bool* __restrict__ map, int64_t tokens, int experts, bool vector,
                             int* __restrict__ chunk_counts) {
  extern __shared__ int counts[];  // [experts]
  for (int e = threadIdx.x; e < experts; e += blockDim.x) counts[e] = 0;
  __syncthreads();
  const int64_t t = int64_t(blockIdx.x) * kChunk + threadIdx.x;
  if (t < tokens) {
    uint32_t bits[kWords];
    load_bits(map, t, experts, vector, bits);
#pragma unroll
    for (int w = 0; w < kWords; ++w) {
      for (uint32_t b = bits[w]; b != 0; b &= b - 1) {
        atomicAdd(&counts[w * 32 + __ffs(b) - 1], 1);  // integer counts: order does not matter
      }
    }
  }
  __syncthreads();
  for (int e = threadIdx.x; e < experts; e += blockDim.x) {
    chunk_counts[int64_t(blockIdx.x) * experts + e] = counts[e];
  }
}

__global__ void place_kernel(const bool* __restrict__ map, int64_t tokens, int experts, bool vector,
                             int64_t rows, int slots, const int* __restrict__ chunk_counts,
                             int64_t* __restrict__ token_of_row, int64_t* __restrict__ flat_index,
                             int64_t* __restrict__ row_of_slot) {
  extern __shared__ int64_t shared[];  // [2 * experts]
  int64_t* base = shared;              // this chunk's first row of each expert
  int64_t* total = shared + experts;   // each expert's rows over all chunks
  __shared__ int warp_counts[2][kWarps];
  const int chunks = gridDim.x, c = blockIdx.x;
  // Expert e's rows start after every earlier expert's rows, and after its own rows of the
  // earlier chunks.
  for (int e = threadIdx.x; e < experts; e += blockDim.x) {
    int64_t all = 0, before = 0;
    for (int k = 0; k < chunks; ++k) {
      const int n = chunk_counts[int64_t(k) * experts + e];
      all += n;
      if (k < c) before += n;
    }
    base[e] = before;
    total[e] = all;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int64_t offset = 0;
    for (int e = 0; e < experts; ++e) {
      base[e] += offset;
      offset += total[e];
    }
  }
  __syncthreads();
  const int64_t t = int64_t(c) * kChunk + threadIdx.x;
  const bool live = t < tokens;
  uint32_t bits[kWords];
  if (live) {
    load_bits(map, t, experts, vector, bits);
  } else {
#pragma unroll
    for (int w = 0; w < kWords; ++w) bits[w] = 0;
  }
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const uint32_t below = (1u << lane) - 1u;
  int slot = 0;
  // Every thread of the block takes every expert (ballots and barriers need them all). Expert e
  // writes warp_counts[e % 2]; expert e + 2 writes it again only after expert e + 1's barrier,
  // which every thread reaches after reading it for expert e.
  for (int e = 0; e < experts; ++e) {
    const bool on = (bits[e / 32] >> (e % 32)) & 1u;
    const uint32_t mask = __ballot_sync(0xffffffffu, on);
    int* counts = warp_counts[e % 2];
    if (lane == 0) counts[warp] = __popc(mask);
    __syncthreads();
    if (on) {
      int rank = __popc(mask & below);
      for (int w = 0; w < warp; ++w) rank += counts[w];
      const int64_t row = base[e] + rank;
      if (row < rows) {
        token_of_row[row] = t;
        flat_index[row] = t * experts + e;
        if (row_of_slot != nullptr && slot < slots) row_of_slot[t * slots + slot] = row;
      }
      ++slot;
    }
  }
  if (live && row_of_slot != nullptr) {
    for (int s = slot; s < slots; ++s) row_of_slot[t * slots + s] = rows;  // empty slots
  }
}

}  // namespace

void routed_rows(const bool* map, int64_t tokens, int experts, int64_t rows, int slots,
                 int* chunk_counts, int64_t* token_of_row, int64_t* flat_index,
                 int64_t* row_of_slot, Stream stream) {
  if (experts < 1 || experts > kMaxRouterExperts) {
    throw std::invalid_argument("shardbench kernel routed_rows: " + std::to_string(experts) +
                                " experts (accepted: 1 to " + std::to_string(kMaxRouterExperts) +
                                ")");
  }
  if (tokens == 0) return;
  const int chunks = static_cast<int>(routed_rows_chunks(tokens));
  const bool vector = experts % 16 == 0 && detail::aligned16(map);
  count_kernel<<<chunks, kChunk, experts * sizeof(int), stream>>>(map, tokens, experts, vector,
                                                                  chunk_counts);
  detail::check_launch("routed_rows (count)");
  place_kernel<<<chunks, kChunk, 2 * experts * sizeof(int64_t), stream>>>(
      map, tokens, experts, vector, rows, slots, chunk_counts, token_of_row, flat_index,
      row_of_slot);
  detail::check_launch("routed_rows (place)");
}

int64_t routed_rows_chunks(int64_t tokens) { return (tokens + kChunk - 1) / kChunk; }

}  // namespace shardbench::kernels
