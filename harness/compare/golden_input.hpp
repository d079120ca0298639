// Megatron-Bridge golden values (scripts/performance/utils/evaluate.py) as a comparison side:
//   {"0": {"lm loss": .., "elapsed time per iteration (ms)": .., "GPU utilization": ..}, ..,
//    "alloc": .., "max_alloc": .., "max_reserved": ..}
// The file is turned into a one-run report so that the same metric and verdict code judges it.
// Export goes the other way through harness/report/golden_values.hpp.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace shardbench {

// Label of the run a golden-values file becomes.
inline constexpr const char* kGoldenRunLabel = "golden values";

// True for an object with at least one step key ("0", "1", ..) holding an object, or one of
// alloc / max_alloc / max_reserved, and no schema_version.
bool looks_like_golden_values(const nlohmann::json& doc);

// Report-shaped document: steps (iteration = key + 1, elapsed_ms, loss, tflops_per_gpu) and one
// allocator snapshot carrying alloc / max_alloc / max_reserved (GB), as golden_values() reads
// them. The run's identity is empty: it takes the identity of the run it is compared with.
// Throws InputError naming `file` and the key for a value of the wrong type.
nlohmann::json golden_to_report(const nlohmann::json& golden, const std::string& file);

}  // namespace shardbench
