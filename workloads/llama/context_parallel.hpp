// Context parallelism for the Llama model (docs/context-parallel.md): each context-parallel (CP)
// rank holds two of the sequence's 2 x cp chunks in the load-balanced order of
// harness/config/parallel_layout.hpp (cp_chunk_ids: rank r keeps chunks r and 2cp-1-r), computes
// every module on its own positions, and exchanges keys and values for attention only:
//
//   gather_kv   forward: all-gather of this rank's K/V over the CP group, reordered into the
//               sequence's natural order         backward: reduce-scatter (sum) of dK/dV back to
//               the ranks that hold those positions
//
// The all-gather variant of Megatron's cp_comm_type (Transformer Engine's
// AttnFuncWithCPAndKVAllGather): one collective per layer and pass, not overlapped with the
// attention; each rank holds the full K/V of its micro-batch while the layer runs.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include <ATen/ATen.h>

namespace shardbench {

class ProcessGroup;  // harness/parallel/process_group.hpp
class PhaseTimer;    // harness/measure/phase_timer.hpp

struct ContextParallel {
  int size = 1;
  int rank = 0;
  std::shared_ptr<ProcessGroup> group;  // the CP group; null with one CP rank
};

// The K/V bytes a rank exchanged with the other CP ranks: received in the forward all-gathers,
// sent in the backward reduce-scatters ((cp - 1) x its own K/V bytes each).
struct CpExchangeStats {
  int64_t kv_bytes_received = 0;
  int64_t grad_bytes_sent = 0;
  int64_t exchanges = 0;  // collectives run (forward and backward)
};

namespace cp {

// x: [B, s, ...] this rank's positions in its local order (its two chunks) -> [B, cp * s, ...]
// the whole sequence in natural order. Backward: the gradient reduce-scattered (summed over the
// CP ranks) back to this rank's positions. `stats` and `timer` may be null; the wait is marked on
// `timer` as exposed communication and as Phase::kCpExchange.
at::Tensor gather_kv(const at::Tensor& x, ProcessGroup& group, CpExchangeStats* stats,
                     PhaseTimer* timer);

// Causal attention of this rank's queries q [B, H, s, D] (its two chunks, in local order) over
// the whole sequence's k, v [B, K, S, D] (natural order): the first chunk (c0) attends to keys
// [0, (c0 + 1) x chunk), the second (c1) to [0, (c1 + 1) x chunk), each with the causal mask of
// its global positions (PyTorch's is_causal is top-left aligned, so a query chunk that sees a
// longer key range needs an explicit mask). Returns [B, H, s, D].
at::Tensor causal_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int cp,
                            int cp_rank, bool enable_gqa);

}  // namespace cp
}  // namespace shardbench
