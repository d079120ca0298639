// Effects at scale (docs/projection.md, "Effects at scale"): what a real cluster adds to the
// simulated step of one rank, each a named switch of perf-project, each off by default so that a
// projection without the flags is the simulator's alone:
//
//   nccl_algo            ring (default) | auto: NCCL's choice between its ring and its tree for
//                        all-reduce, by the tuner's cost of each (tree latency grows with
//                        log2(nodes), the ring's with the rank count)
//   inter_node_efficiency the fraction of the table's two-node NIC bandwidth a ring reaches on
//                        the target fabric (1 = the table's figure)
//   jitter               off (default) | normal: the step is paced by the slowest rank, the
//                        expected maximum of N normal step times of the measured spread
//   host_ms              a fixed host cost per step (data loading), added to the step
//
// Torch-free.
#pragma once

#include <string>

#include "harness/project/collective_model.hpp"

namespace shardbench {

// NCCL's tree all-reduce, Simple protocol (NVIDIA/nccl src/graph/tuning.cc, ncclTopoTuneModel:
// baseLat[Tree][Simple] 0, hwLat[NVLINK][Tree][Simple] 28 us and hwLat[NET][Tree][Simple] 28 us,
// latency 2 x ((ranks per node - 1) x intra + log2(nodes) x inter), the topology's extra network
// latency left out); the bus bandwidth 92% of the link's and the algorithm bandwidth half of it
// (each rank sends and receives the whole buffer once up and once down).
inline constexpr double kNcclTreeNvlinkStepUs = 28.0;
inline constexpr double kNcclTreeNetStepUs = 28.0;
inline constexpr double kNcclTreeBandwidthFraction = 0.92;

// NCCL's tree all-reduce of `bytes` on `placement` with the ring's link bound `bandwidth_gbps`:
//   t = 2 * ((world / nodes - 1) * 4 us + floor(log2(nodes)) * 14 us) + 2 S / (0.92 B)
double tree_all_reduce_seconds(int64_t bytes, const Placement& placement, double bandwidth_gbps);

// E[max of n i.i.d. standard normals] by numerical integration of the largest order statistic's
// density n x phi(x) Phi(x)^(n-1): 0 at n = 1, 1/sqrt(pi) at 2, 3/(2 sqrt(pi)) at 3. Throws
// std::invalid_argument for n < 1.
double expected_max_standard_normal(int n);

struct ScaleEffects {
  bool nccl_auto = false;            // --nccl_algo auto
  double inter_node_efficiency = 1;  // --inter_node_efficiency
  bool jitter = false;               // --jitter normal
  double host_ms = 0;                // --host_ms
};

// Reads the four options as given on the command line. Throws std::invalid_argument with one
// line naming the flag, the value and what is accepted.
ScaleEffects parse_scale_effects(const std::string& nccl_algo, const std::string& inter_efficiency,
                                 const std::string& jitter, const std::string& host_ms);

// The collective model with the effects that change collectives: NCCL's tree for all-reduce
// (nccl_auto) and the network bandwidth scaled by inter_node_efficiency.
CollectiveModel with_scale_effects(CollectiveModel model, const ScaleEffects& effects);

// The straggler term added to the simulated step, in ms: sigma x (E[max of N] - E[max of M]),
// the measured step-time standard deviation `sigma_ms` at M measured ranks projected to N.
// 0 with jitter off.
double straggler_ms(const ScaleEffects& effects, double sigma_ms, int measured_world, int world);

}  // namespace shardbench
