// Context parallelism at resolution time (docs/context-parallel.md, "Validation"): what the
// engine runs with model.context_parallel_size > 1, checked before any worker starts. Torch-free.
#pragma once

#include "harness/config/config.hpp"
#include "harness/config/provenance.hpp"

namespace shardbench {

// Refuses what the context-parallel engine does not run, with one UsageError naming the field,
// its value, the source that set it and what is accepted. With CP > 1:
//  - model.seq_length a multiple of 2 x CP x TP (2 x CP chunks, Megatron's rule; each CP rank's
//    positions split again over the TP ranks by sequence parallelism);
//  - no mixture-of-experts model (its router and token dispatch are not CP-aware here), no FP8
//    compute or FP8 parameter gather, no CPU activation offload, no flash-only attention
//    (shardbench.sdpa_backend=flash: the chunks' attention takes an explicit mask).
// model.cp_comm_type is restricted to all_gather by its field domain.
void check_context_parallel(const ConfigContainer& config, const Provenance& provenance);

}  // namespace shardbench
