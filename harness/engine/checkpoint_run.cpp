#include "harness/engine/checkpoint_run.hpp"

#include <cstdio>
#include <iostream>
#include <stdexcept>

#include "harness/launch/heartbeat.hpp"
#include "harness/parallel/checkpoint.hpp"

namespace shardbench {
namespace {

CheckpointEvent event_of(const CheckpointIo& io) {
  return {io.dir.string(), io.iteration, io.ms, io.bytes_per_rank, io.metadata_bytes};
}

// "1.9 MB, 20.1 ms"
std::string size_and_time(int64_t bytes, double ms) {
  char text[64];
  std::snprintf(text, sizeof(text), "%.1f MB, %.1f ms", static_cast<double>(bytes) / 1e6, ms);
  return text;
}

}  // namespace

RunCheckpoints::RunCheckpoints(const ConfigContainer& config, const nlohmann::json& provenance) {
  // Resolution refused what the engine does not write (field_domains.cpp: pretrained weights,
  // formats other than torch_dist and fsdp_dtensor, asynchronous or non-parallel saves).
  const auto& c = config.checkpoint;
  record_.format = c.ckpt_format;
  record_.save_dir = c.save;
  record_.save_interval = c.save_interval;
  record_.load_dir = c.load;
  most_recent_k_ = c.most_recent_k;
  if (!c.load) {
    record_.load_note = "checkpoint.load=null: no checkpoint was loaded";
    const auto it = provenance.find("checkpoint.load");
    if (it != provenance.end() && it->is_array() && !it->empty()) {
      record_.load_note += " (set by " + it->back().value("source", std::string("?")) + ")";
    }
  }
}

int64_t RunCheckpoints::resume(DataParallelEngine& engine, const TrainableModel& model,
                               ProcessGroup& world, int64_t train_iters, bool print) {
  if (!record_.load_dir) return 0;
  heartbeat("loading checkpoint");
  const std::string& dir = *record_.load_dir;
  const std::optional<CheckpointIo> io =
      load_checkpoint(engine, world, dir, record_.format, &model);
  if (!io) {
    record_.load_note = "no checkpoint in " + dir + " (no " + kCheckpointTrackerFile +
                        "): started from scratch, as Megatron does";
    if (print) std::cout << "perf-launch: WARNING: " << record_.load_note << std::endl;
    return 0;
  }
  record_.loaded = event_of(*io);
  record_.load_note =
      "resumed after iteration " + std::to_string(io->iteration) + " from " + io->dir.string();
  if (print) {
    std::cout << "  successfully loaded checkpoint from " << dir << " at iteration "
              << io->iteration << " (" << size_and_time(io->total_bytes(), io->ms) << ")"
              << std::endl;
  }
  if (io->iteration >= train_iters) {
    throw std::invalid_argument(
        "train.train_iters=" + std::to_string(train_iters) + " leaves nothing to run after the " +
        "checkpoint loaded from " + dir + " (iteration " + std::to_string(io->iteration) +
        "); accepted: train.train_iters > " + std::to_string(io->iteration) +
        " (the total, as in Megatron), or checkpoint.load=null");
  }
  last_saved_ = io->iteration;
  return io->iteration;
}

void RunCheckpoints::after_iteration(DataParallelEngine& engine, const TrainableModel& model,
                                     ProcessGroup& world, int64_t completed, int64_t train_iters,
                                     bool print) {
  if (!record_.save_dir) return;
  const bool interval = record_.save_interval && *record_.save_interval > 0 &&
                        completed % *record_.save_interval == 0;
  // Megatron also saves after the last iteration unless the interval just did.
  const bool last = completed == train_iters;
  if ((interval || last) && last_saved_ != completed) save(engine, model, world, completed, print);
}

void RunCheckpoints::save(DataParallelEngine& engine, const TrainableModel& model,
                          ProcessGroup& world, int64_t iteration, bool print) {
  heartbeat("saving checkpoint " + std::to_string(iteration));
  const CheckpointIo io = save_checkpoint(engine, world, *record_.save_dir, record_.format,
                                          iteration, most_recent_k_, &model);
  record_.saves.push_back(event_of(io));
  last_saved_ = iteration;
  if (print) {
    std::cout << "  successfully saved checkpoint from iteration " << iteration << " to "
              << *record_.save_dir << " (" << size_and_time(io.total_bytes(), io.ms) << ")"
              << std::endl;
  }
}

}  // namespace shardbench
