// Sharded checkpoints of a DataParallelEngine, in Megatron's folder layout:
//   <root>/latest_checkpointed_iteration.txt  the newest complete checkpoint's iteration
//   <root>/iter_0000004/rank_00000.bin        each rank's own state (checkpoint_file.hpp)
//   <root>/iter_0000004/metadata.json         rank 0, once every rank's file is complete
// The format names are Megatron's (ckpt_format "torch_dist" for DDP, "fsdp_dtensor" for
// Megatron FSDP), the bytes are shardbench's own: each rank writes the buffers it holds (main
// weights, AdamW moments, compute weights where they are a separate copy; its shard where the
// strategy shards them, all of it where it does not) and the state the model carries across
// steps (TrainableModel::checkpoint_state: the MoE router's expert bias), and the metadata
// records the layout they belong to. Each rank's file holds its own experts (its EP rank's) and
// its shard of them (its expert-data-parallel rank's); the file header and the metadata name
// both. A checkpoint resumes only into the same layout: same format, wrapper, strategy, TP, EP
// and DP sizes, model dims, buffer layout, model state and seed; anything else is refused before
// any byte is loaded.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/parallel/engine.hpp"
#include "harness/parallel/process_group.hpp"

namespace shardbench {

inline constexpr const char* kCheckpointTrackerFile = "latest_checkpointed_iteration.txt";
inline constexpr const char* kCheckpointMetadataFile = "metadata.json";

// Megatron's folder name for a checkpoint of `iteration` completed iterations: iter_0000004.
std::string checkpoint_iteration_folder(int64_t iteration);
// This rank's shard file name inside that folder: rank_00000.bin.
std::string checkpoint_rank_file(int rank);

// What one save or load did, as seen by this rank.
struct CheckpointIo {
  std::filesystem::path dir;  // the iter_XXXXXXX folder
  int64_t iteration = 0;      // completed training iterations the state belongs to
  double ms = 0;              // wall time on this rank, from entry until every rank is done
  std::vector<int64_t> bytes_per_rank;  // each rank's shard file
  int64_t metadata_bytes = 0;
  int64_t total_bytes() const;
};

// Writes the engine's state after `iteration` completed iterations under `root`, then (rank 0)
// the metadata and last the tracker, so a reader never sees a partial checkpoint as the latest.
// `most_recent_k` > 0 removes older iter_ folders beyond the newest k. Collective over `world`
// (the engine's DP group). `model`: the model the engine trains, whose checkpoint_state() is
// saved with the engine's (null: none). Throws std::runtime_error on every rank if any rank fails.
CheckpointIo save_checkpoint(DataParallelEngine& engine, ProcessGroup& world,
                             const std::filesystem::path& root, const std::string& format,
                             int64_t iteration, int64_t most_recent_k = -1,
                             const TrainableModel* model = nullptr);

// The iteration the tracker in `root` names; nullopt when there is no tracker (Megatron then
// starts from scratch). Throws std::runtime_error when the tracker exists but is unreadable.
std::optional<int64_t> latest_checkpoint_iteration(const std::filesystem::path& root);

// Loads the latest checkpoint under `root` into the engine; nullopt (and nothing changed) when
// `root` holds none. Collective over `world`. Every rank reads and verifies the metadata and its
// own file completely before any rank changes its engine: a checkpoint of another layout or
// format, a missing or damaged file throws std::runtime_error on every rank (naming the field,
// the checkpoint's value and what this run accepts) and leaves every engine as it was. `model`
// (null: none) takes back its checkpoint_state() after the engine's.
std::optional<CheckpointIo> load_checkpoint(DataParallelEngine& engine, ProcessGroup& world,
                                            const std::filesystem::path& root,
                                            const std::string& format,
                                            const TrainableModel* model = nullptr);

// The layout description a checkpoint's metadata records for this engine and model (for tests
// and the layout check).
nlohmann::json checkpoint_layout(DataParallelEngine& engine, const TrainableModel* model = nullptr);

}  // namespace shardbench
