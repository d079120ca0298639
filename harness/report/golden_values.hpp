// Export of one report run as Megatron-Bridge golden values (scripts/performance/utils/
// evaluate.py), so a shardbench run can serve as, or be checked against, a Bridge baseline.
#pragma once

#include <nlohmann/json.hpp>

namespace shardbench {

// From a run object of the report (run_to_json):
//   {"0": {"lm loss": .., "elapsed time per iteration (ms)": .., "GPU utilization": ..}, "1": ..,
//    "alloc": .., "max_alloc": .., "max_reserved": ..}
// Step key = iteration - 1 (evaluate.py). "GPU utilization" is model TFLOP/s/GPU, as in Bridge.
// Memory in GB (1e9) to 5 significant digits, by evaluate.py's rules: alloc and max_alloc from
// the first allocator snapshot, max_reserved the largest over all snapshots; the three keys are
// absent when the run has no allocator snapshots (CPU). Non-finite values are null.
nlohmann::json golden_values(const nlohmann::json& run);

}  // namespace shardbench
