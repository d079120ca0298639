// Collective cost parameters measured on the target machine: reads a collectives_bench JSON
// (Google Benchmark's format: a context block and one entry per variant and message size) and
// fits t = alpha + wire_bytes / B per variant by least squares over the sizes. The fits replace
// the table's intra-node parameters in a CollectiveModel (collective_model.hpp). Torch-free.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "harness/project/collective_model.hpp"

namespace shardbench {

struct CollectiveSample {
  int64_t bytes = 0;      // S, the `bytes` counter
  double seconds = 0;     // time per iteration
  double busbw_gbps = 0;  // the `busbw` counter
};

// t = alpha + x * seconds_per_byte fitted to (x, t) points.
struct AlphaBetaFit {
  double alpha_s = 0;
  double seconds_per_byte = 0;  // 0: not identified (every x equal, or t not growing with x)
};

// Least squares on relative residuals ((t - fit) / t, so the microsecond times of small messages
// weigh as much as the millisecond ones of large messages), under alpha >= 0 and
// seconds_per_byte >= 0: when the free optimum breaks a bound, the bound holds and the other
// parameter is refitted. Throws std::invalid_argument for sizes that differ, no point, or a time
// <= 0.
AlphaBetaFit fit_alpha_beta(const std::vector<double>& wire_bytes,
                            const std::vector<double>& seconds);

// One benchmark family of collectives_bench: all_gather, all_gather_in_place,
// reduce_scatter_{sum,avg}[_in_place], all_reduce_{sum,avg}.
struct CollectiveFit {
  std::string variant;
  CollectiveOp op = CollectiveOp::kAllReduce;
  std::vector<CollectiveSample> samples;  // in file order
  double alpha_s = 0;
  // The fitted bus bandwidth 1 / seconds_per_byte in GB/s; 0 when not identified. At one rank
  // nothing crosses a link (wire bytes are 0), so only alpha is measured.
  double bandwidth_gbps = 0;
  double max_relative_residual = 0;  // max |t - fit| / t over the samples
};

struct CollectiveBenchRun {
  std::string path;
  std::string backend;              // context.backend: nccl, gloo
  std::string device;               // context.device, "" when absent
  int world = 0;                    // context.world_size
  std::vector<CollectiveFit> fits;  // one per variant, in file order

  // The fit of `variant`; throws std::invalid_argument naming the file and the variants it holds.
  const CollectiveFit& fit(std::string_view variant) const;
};

// Parses collectives_bench JSON text read from `path` (named in errors) and fits every variant.
// Reads context.world_size and context.backend, and per entry name, run_type, real_time,
// time_unit and the counters bytes and busbw; aggregate entries (--benchmark_repetitions' mean,
// median, stddev) are skipped. Anything malformed is refused with one std::invalid_argument
// naming the file, the field and the value: "collectives_bench JSON '<path>': <field> is
// <value>; expected <what>".
CollectiveBenchRun read_collectives_bench(std::string_view json_text, const std::string& path);

// read_collectives_bench on the file at `path`; a file that cannot be read is refused the same
// way.
CollectiveBenchRun load_collectives_bench(const std::string& path);

// Which measured variant stands for each collective: by default the ones the engines issue most
// (FSDP gathers out of place, gradients are summed).
struct MeasuredVariants {
  std::string all_gather = "all_gather";
  std::string reduce_scatter = "reduce_scatter_sum";
  std::string all_reduce = "all_reduce_sum";
};

// `base` with the intra-node parameters of each collective taken from `run` (one process, so
// one node): the fitted bandwidth becomes the intra-node bandwidth, and the fitted alpha, less
// the ring steps at the measured world size times base's intra-node step latency, becomes the
// base latency (clamped at 0). A fit without bandwidth (world size 1) keeps base's bandwidth and
// gives only the per-call latency. Inter-node parameters stay base's.
CollectiveModel with_measured_intra_node(const CollectiveModel& base, const CollectiveBenchRun& run,
                                         const MeasuredVariants& variants = {});

}  // namespace shardbench
