#include "harness/parallel/checkpoint.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "harness/launch/heartbeat.hpp"
#include "harness/parallel/checkpoint_file.hpp"
#include "harness/parallel/checkpoint_layout.hpp"
#include "harness/atomic_write.hpp"

namespace shardbench {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// Every rank learns whether any rank failed, and all of them throw if one did: a rank that
// throws alone would leave the others waiting in the next collective (or, on load, resumed from
// a state the failing rank does not have).
void agree(ProcessGroup& world, const at::Device& device, const std::string& local_error,
           const std::string& what, const std::string& suffix = "") {
  at::Tensor flags = at::zeros({world.world()}, at::TensorOptions().device(device));
  if (!local_error.empty()) flags.narrow(0, world.rank(), 1).fill_(1);
  wait_work(world.all_reduce(flags, Reduction::kSum), "checkpoint agreement");
  const at::Tensor host = flags.to(at::kCPU);
  for (int r = 0; r < world.world(); ++r) {
    if (host[r].item<float>() == 0) continue;
    if (!local_error.empty()) throw std::runtime_error(local_error);
    throw PeerFailedError(what + ": rank " + std::to_string(r) + " failed (see its error)" + suffix,
                          r);
  }
}

std::vector<int64_t> all_gather_int(ProcessGroup& world, const at::Device& device, int64_t mine) {
  at::Tensor in = at::full({1}, mine, at::TensorOptions().device(device).dtype(at::kLong));
  at::Tensor out = at::empty({world.world()}, in.options());
  wait_work(world.all_gather(out, in), "checkpoint byte counts");
  const at::Tensor host = out.to(at::kCPU);
  return std::vector<int64_t>(host.data_ptr<int64_t>(), host.data_ptr<int64_t>() + host.numel());
}

// Keeps perf-launch's hang detector informed through saves and loads of any size.
void progress_heartbeat(const std::string& tensor) { heartbeat("checkpoint: " + tensor); }

std::string tensor_name(const DataParallelEngine::StateBuffer& b) {
  return "group" + std::to_string(b.group) + "/" + b.name;
}

// The model's state across steps, after the engine's buffers in each rank's file.
std::vector<ModelStateTensor> model_state_of(const TrainableModel* model) {
  return model ? model->checkpoint_state() : std::vector<ModelStateTensor>{};
}
std::string tensor_name(const ModelStateTensor& t) { return "model/" + t.name; }

// Where this rank's file belongs in the layout: its rank and, with expert parallelism, which
// experts it holds (EP rank) and which shard of them (expert-data-parallel rank).
json rank_place(DataParallelEngine& engine, int rank) {
  json place = {{"rank", rank}};
  if (engine.ep() > 1) {
    place["ep_rank"] = engine.ep_rank();
    place["expert_dp_rank"] = engine.expert_dp_rank();
  }
  return place;
}

json read_json_file(const fs::path& path, const std::string& missing_hint) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(path.string() + " is missing (" + missing_hint + ")");
  std::stringstream text;
  text << in.rdbuf();
  try {
    return json::parse(text.str());
  } catch (const std::exception& e) {
    throw std::runtime_error(path.string() + " is not valid JSON (" + e.what() + ")");
  }
}

// Throws when the shard file's header (`info`) places it elsewhere than this rank (`place`:
// rank_place's) or at another iteration.
void check_rank_place(const fs::path& shard, const json& info, const json& place,
                      int64_t iteration) {
  for (const auto& [key, want] : place.items()) {
    const json got = info.value(key, json());
    if (got != want) {
      throw std::runtime_error(shard.string() + " was written by the rank with " + key + "=" +
                               got.dump() + ", read here by the rank with " + key + "=" +
                               want.dump() + "; accepted: the layout it was saved with");
    }
  }
  if (info.value("iteration", int64_t{-1}) != iteration) {
    throw std::runtime_error(shard.string() + " belongs to iteration " +
                             std::to_string(info.value("iteration", int64_t{-1})) +
                             "; expected iteration " + std::to_string(iteration));
  }
}

int64_t file_bytes(const fs::path& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? static_cast<int64_t>(st.st_size) : 0;
}

// Removes iter_ folders older than `keep_from` beyond the newest `keep - 1` of them (the one
// just saved is the k-th). Folders newer than it (another run's) are left alone. Best effort:
// a folder that cannot be removed stays.
void prune_older(const fs::path& root, int64_t keep_from, int64_t keep) {
  std::vector<std::pair<int64_t, fs::path>> older;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    const std::string name = entry.path().filename().string();
    int64_t it = -1;
    if (name.size() == 12 && name.starts_with("iter_") &&
        std::sscanf(name.c_str() + 5, "%ld", &it) == 1 && it < keep_from && it >= 0) {
      older.emplace_back(it, entry.path());
    }
  }
  std::sort(older.rbegin(), older.rend());
  for (size_t i = static_cast<size_t>(std::max<int64_t>(0, keep - 1)); i < older.size(); ++i) {
    // (Not fs::remove_all: the libtorch.so of the wheel exports a broken copy of it.)
    for (const auto& entry : fs::directory_iterator(older[i].second, ec))
      ::unlink(entry.path().c_str());
    ::rmdir(older[i].second.c_str());
  }
}

}  // namespace

std::string checkpoint_iteration_folder(int64_t iteration) {
  char name[32];
  std::snprintf(name, sizeof(name), "iter_%07ld", static_cast<long>(iteration));
  return name;
}

std::string checkpoint_rank_file(int rank) {
  char name[32];
  std::snprintf(name, sizeof(name), "rank_%05d.bin", rank);
  return name;
}

int64_t CheckpointIo::total_bytes() const {
  int64_t total = metadata_bytes;
  for (int64_t b : bytes_per_rank) total += b;
  return total;
}

json checkpoint_layout(DataParallelEngine& engine, const TrainableModel* model) {
  return checkpoint_layout_of(engine, engine.checkpoint_state(), model_state_of(model));
}

CheckpointIo save_checkpoint(DataParallelEngine& engine, ProcessGroup& world, const fs::path& root,
                             const std::string& format, int64_t iteration, int64_t most_recent_k,
                             const TrainableModel* model) {
  at::NoGradGuard no_grad;
  const auto t0 = std::chrono::steady_clock::now();
  const at::Device device = engine.options().device;
  const int rank = world.rank();
  CheckpointIo io;
  io.iteration = iteration;
  io.dir = root / checkpoint_iteration_folder(iteration);
  const std::string what = "checkpoint save to " + io.dir.string();

  std::string error;
  if (rank == 0) {
    try {
      fs::create_directories(io.dir);
      // A folder left by an earlier save of this iteration: its metadata must not describe the
      // new shards until they are complete.
      ::unlink((io.dir / kCheckpointMetadataFile).c_str());
    } catch (const std::exception& e) {
      error = what + ": " + e.what();
    }
  }
  agree(world, device, error, what);

  const auto state = engine.checkpoint_state();
  const auto model_state = model_state_of(model);
  int64_t my_bytes = 0;
  try {
    std::vector<ShardTensor> tensors;
    for (const auto& b : state) tensors.push_back({tensor_name(b), b.tensor});
    for (const auto& t : model_state) tensors.push_back({tensor_name(t), t.tensor});
    json info = rank_place(engine, rank);
    info.update({{"world_size", world.world()},
                 {"iteration", iteration},
                 {"format", format},
                 {"label", engine.label()}});
    my_bytes =
        write_shard_file(io.dir / checkpoint_rank_file(rank), tensors, info, progress_heartbeat);
  } catch (const std::exception& e) {
    error = what + ": " + e.what();
  }
  agree(world, device, error, what);
  io.bytes_per_rank = all_gather_int(world, device, my_bytes);
  std::vector<int64_t> ep_ranks, expert_dp_ranks;
  if (engine.ep() > 1) {
    ep_ranks = all_gather_int(world, device, engine.ep_rank());
    expert_dp_ranks = all_gather_int(world, device, engine.expert_dp_rank());
  }

  // Every shard is complete: the metadata, then the tracker (Megatron's order).
  if (rank == 0) {
    try {
      json files = json::array();
      for (int r = 0; r < world.world(); ++r) {
        const size_t i = static_cast<size_t>(r);
        json file = {{"rank", r}};
        if (!ep_ranks.empty()) {
          file.update({{"ep_rank", ep_ranks[i]}, {"expert_dp_rank", expert_dp_ranks[i]}});
        }
        file.update({{"file", checkpoint_rank_file(r)}, {"bytes", io.bytes_per_rank[i]}});
        files.push_back(file);
      }
      int64_t shard_total = 0;
      for (int64_t b : io.bytes_per_rank) shard_total += b;
      const json meta = {{"writer", "shardbench"},
                         {"version", kCheckpointMetadataVersion},
                         {"format", format},
                         {"iteration", iteration},
                         {"optimizer_steps", engine.optimizer_steps()},
                         {"layout", checkpoint_layout_of(engine, state, model_state)},
                         {"files", files},
                         {"shard_bytes_total", shard_total}};
      const std::string text = meta.dump(1);
      write_file_atomically(io.dir / kCheckpointMetadataFile, text);
      io.metadata_bytes = static_cast<int64_t>(text.size());
      write_file_atomically(root / kCheckpointTrackerFile, std::to_string(iteration));
      if (most_recent_k > 0) prune_older(root, iteration, most_recent_k);
    } catch (const std::exception& e) {
      error = what + ": " + e.what();
    }
  }
  agree(world, device, error, what);
  io.metadata_bytes = all_gather_int(world, device, io.metadata_bytes)[0];
  io.ms = ms_since(t0);
  return io;
}

std::optional<int64_t> latest_checkpoint_iteration(const fs::path& root) {
  const fs::path tracker = root / kCheckpointTrackerFile;
  std::ifstream in(tracker);
  if (!in) return std::nullopt;
  std::string text;
  in >> text;
  if (text == "release") {
    throw std::runtime_error(tracker.string() +
                             " names a release checkpoint; accepted: an iteration number");
  }
  size_t used = 0;
  int64_t iteration = -1;
  try {
    iteration = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (text.empty() || used != text.size() || iteration < 0) {
    throw std::runtime_error(tracker.string() + " holds \"" + text +
                             "\"; accepted: a non-negative iteration number");
  }
  return iteration;
}

std::optional<CheckpointIo> load_checkpoint(DataParallelEngine& engine, ProcessGroup& world,
                                            const fs::path& root, const std::string& format,
                                            const TrainableModel* model) {
  at::NoGradGuard no_grad;
  const auto t0 = std::chrono::steady_clock::now();
  const at::Device device = engine.options().device;
  const int rank = world.rank();
  const std::string what = "checkpoint load from " + root.string();

  // Rank 0 reads the tracker and tells the others, so every rank loads the same iteration.
  // -1: no checkpoint, -2: unreadable.
  std::string error;
  int64_t found = -1;
  if (rank == 0) {
    try {
      found = latest_checkpoint_iteration(root).value_or(-1);
    } catch (const std::exception& e) {
      error = what + ": " + e.what();
      found = -2;
    }
  }
  at::Tensor it_tensor = at::full({1}, found, at::TensorOptions().device(device).dtype(at::kLong));
  wait_work(world.broadcast(it_tensor, 0), "checkpoint iteration broadcast");
  found = it_tensor.to(at::kCPU).item<int64_t>();
  if (found == -1) return std::nullopt;
  agree(world, device, error, what);

  CheckpointIo io;
  io.iteration = found;
  io.dir = root / checkpoint_iteration_folder(found);
  const std::string refused = "; nothing was loaded";
  const auto state = engine.checkpoint_state();
  const auto model_state = model_state_of(model);
  std::vector<at::Tensor> staged;
  int64_t optimizer_steps = 0;
  int64_t my_bytes = 0;
  try {
    const json meta = read_json_file(io.dir / kCheckpointMetadataFile,
                                     "the save did not complete, or the folder was damaged");
    io.metadata_bytes = file_bytes(io.dir / kCheckpointMetadataFile);
    check_checkpoint_metadata(meta, checkpoint_layout_of(engine, state, model_state), format,
                              io.dir);
    if (meta.value("iteration", int64_t{-1}) != found) {
      throw std::runtime_error(
          io.dir.string() + "/" + kCheckpointMetadataFile +
          " records iteration=" + std::to_string(meta.value("iteration", int64_t{-1})) +
          ", the tracker names " + std::to_string(found));
    }
    optimizer_steps = meta.value("optimizer_steps", int64_t{-1});
    if (optimizer_steps < 0)
      throw std::runtime_error(io.dir.string() + ": metadata lacks optimizer_steps");
    std::vector<ShardExpectation> expected;
    for (const auto& b : state) {
      expected.push_back({tensor_name(b), b.tensor.scalar_type(), b.tensor.numel()});
    }
    for (const auto& t : model_state) {
      expected.push_back({tensor_name(t), t.tensor.scalar_type(), t.tensor.numel()});
    }
    const fs::path shard = io.dir / checkpoint_rank_file(rank);
    json info;
    staged = read_shard_file(shard, expected, &info, progress_heartbeat);
    check_rank_place(shard, info, rank_place(engine, rank), found);
    my_bytes = file_bytes(shard);
  } catch (const std::exception& e) {
    error = std::string(e.what()) + refused;
  }
  agree(world, device, error, what, refused);

  // Every rank holds a verified copy: only now does any engine change.
  for (size_t i = 0; i < state.size(); ++i) state[i].tensor.copy_(staged[i]);
  engine.restore_checkpoint_state(optimizer_steps);
  if (model) {
    model->restore_checkpoint_state(std::vector<at::Tensor>(
        staged.begin() + static_cast<std::ptrdiff_t>(state.size()), staged.end()));
  }
  io.bytes_per_rank = all_gather_int(world, device, my_bytes);
  world.barrier();
  io.ms = ms_since(t0);
  return io;
}

}  // namespace shardbench
