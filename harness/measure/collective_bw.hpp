// Collective bandwidth as nccl-tests reports it (doc/PERFORMANCE.md, src/*.cu GetBw): algbw and
// busbw in decimal GB/s, plus the message-size sweep and size parsing of its -b/-e/-f flags.
// Torch-free.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace shardbench {

// The collectives the engines issue (harness/parallel/engine_step.cpp).
enum class CollectiveOp { kAllReduce, kAllGather, kReduceScatter };

const char* to_string(CollectiveOp op);

// busbw / algbw, nccl-tests' correction that makes bus bandwidth comparable across rank counts:
// 2(n-1)/n for all-reduce, (n-1)/n for all-gather and reduce-scatter. 0 at n = 1 (no traffic).
double bus_bandwidth_factor(CollectiveOp op, int world);

// One message as nccl-tests sizes it. `bytes` is S, the size nccl-tests prints and divides by
// the time: the buffer for all-reduce, the total array (all-gather output, reduce-scatter input,
// world * per-rank chunk) for the other two.
struct CollectiveMessage {
  int64_t elems = 0;       // elements of S
  int64_t rank_elems = 0;  // per-rank chunk (all-gather input, reduce-scatter output); = elems
                           // for all-reduce
  int64_t bytes = 0;       // S in bytes
};

// The message for a requested size: count = requested_bytes / elem_bytes, and for all-gather
// and reduce-scatter the per-rank chunk count / world, rounded down as nccl-tests does
// (AllGatherGetCollByteCount). A size too small for one element per rank has elems == 0.
CollectiveMessage collective_message(CollectiveOp op, int64_t requested_bytes, int64_t elem_bytes,
                                     int world);

struct CollectiveBandwidth {
  double algbw_gbps = 0;  // S / t, GB = 1e9 bytes
  double busbw_gbps = 0;  // algbw * bus_bandwidth_factor
};

// Bandwidth of moving `bytes` (S above) in `seconds` over `world` ranks.
CollectiveBandwidth collective_bandwidth(CollectiveOp op, int64_t bytes, double seconds, int world);

// nccl-tests' size sweep (-b min, -e max, -f factor): min, min*factor, ... while <= max.
// Throws std::invalid_argument for min < 1, max < min or factor < 2.
std::vector<int64_t> message_sizes(int64_t min_bytes, int64_t max_bytes, int64_t factor);

// A size as nccl-tests' parsesize reads it: a number with an optional K, M or G suffix (binary
// multiples, either case): "8", "128K", "64M", "1G", "1.5M". Throws std::invalid_argument
// naming the text otherwise.
int64_t parse_size_bytes(std::string_view text);

}  // namespace shardbench
