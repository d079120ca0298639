// The layout a checkpoint's metadata records, and the check that a checkpoint fits the engine
// it is loaded into (checkpoint.hpp).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/parallel/engine.hpp"

namespace shardbench {

inline constexpr int kCheckpointMetadataVersion = 1;

// Wrapper, strategy, label, DP size (TP and EP sizes where above 1), compute dtype, the dims that
// shape the parameters, the seed, per group its elements, padding, shard size, parameter slots
// and buffers (name, dtype, elements, sharded), and the model's own state tensors (name, dtype,
// elements; only where it has some): everything that must match for `state` and `model_state`
// to load into another engine and model.
nlohmann::json checkpoint_layout_of(DataParallelEngine& engine,
                                    const std::vector<DataParallelEngine::StateBuffer>& state,
                                    const std::vector<ModelStateTensor>& model_state = {});

// Throws std::runtime_error naming the first field where the metadata `meta` of the checkpoint
// in `dir` differs from this run (`layout`, `format`): its value there, here, and what this run
// accepts.
void check_checkpoint_metadata(const nlohmann::json& meta, const nlohmann::json& layout,
                               const std::string& format, const std::filesystem::path& dir);

}  // namespace shardbench
