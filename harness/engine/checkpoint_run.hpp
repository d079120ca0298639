// checkpoint.save / checkpoint.load in a measured run, with Megatron's semantics over
// harness/parallel/checkpoint.hpp:
//   - checkpoint.load=<dir> resumes from the iteration its latest_checkpointed_iteration.txt
//     names (weights, optimizer state, step count, the model's state across steps such as the
//     MoE router's expert bias; the loop continues with that iteration's batch and learning
//     rate). A folder without a checkpoint starts from scratch, as Megatron
//     does; checkpoint.load=null (the FSDP and common perf override sets) loads nothing.
//   - checkpoint.save=<dir> saves every checkpoint.save_interval iterations and after the last
//     one (null interval: only after the last one).
// Save and load run outside the timed steps (Megatron times them separately); the record says
// what happened, with times and bytes, for the report.
#pragma once

#include <cstdint>

#include <nlohmann/json.hpp>

#include "harness/config/config.hpp"
#include "harness/parallel/engine.hpp"
#include "harness/report/run_record.hpp"

namespace shardbench {

class RunCheckpoints {
 public:
  // Throws std::invalid_argument naming a checkpoint setting the engine does not implement.
  // `provenance`: the run's field sources, to say who set checkpoint.load when it is null.
  RunCheckpoints(const ConfigContainer& config, const nlohmann::json& provenance);

  // Loads checkpoint.load when set and present into the engine and `model` (the model it
  // trains). Returns the completed iterations the run continues after (0: from scratch); throws
  // std::invalid_argument when that leaves none of `train_iters` to run. Collective.
  int64_t resume(DataParallelEngine& engine, const TrainableModel& model, ProcessGroup& world,
                 int64_t train_iters, bool print);
  // After 1-based iteration `completed` of `train_iters`: saves when one is due. Collective.
  void after_iteration(DataParallelEngine& engine, const TrainableModel& model, ProcessGroup& world,
                       int64_t completed, int64_t train_iters, bool print);

  const CheckpointRecord& record() const { return record_; }

 private:
  void save(DataParallelEngine& engine, const TrainableModel& model, ProcessGroup& world,
            int64_t iteration, bool print);

  CheckpointRecord record_;
  int64_t most_recent_k_ = -1;
  int64_t last_saved_ = -1;
};

}  // namespace shardbench
