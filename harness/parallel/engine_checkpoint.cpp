// The engine's side of checkpointing: which buffers hold the training state, and how the
// buffers that are not saved are re-derived after a load. The file format is checkpoint.cpp's.
#include <stdexcept>

#include "harness/parallel/engine.hpp"
#include "harness/parallel/engine_group.hpp"

namespace shardbench {

std::vector<DataParallelEngine::StateBuffer> DataParallelEngine::checkpoint_state() {
  // The distributed optimizer's post-step all-gather may still be writing the compute weights.
  wait_in_flight();
  std::vector<StateBuffer> out;
  for (auto& gp : groups_) {
    EngineGroup& g = *gp;
    const bool sharded = g.spec.main_weights_sharded;
    out.push_back({g.index, "main_weights", g.main, sharded});
    out.push_back({g.index, "exp_avg", g.optimizer->exp_avg(), sharded});
    out.push_back({g.index, "exp_avg_sq", g.optimizer->exp_avg_sq(), sharded});
    // With fp32 compute the main weights are the compute weights. Otherwise the compute copy is
    // saved as written (not re-rounded from the main weights on load), so a resumed run sees
    // the very bits the uninterrupted run would, whichever kernel rounded them. FSDP2 keeps no
    // compute copy between steps: each gather casts the main weights again (copy-in).
    if (!g.main_aliases_model && !g.layout.per_param_dim0) {
      out.push_back({g.index, "model_weights", refresh_target(g),
                     g.spec.model_weights_sharded || g.spec.main_weights_sharded});
    }
  }
  return out;
}

bool DataParallelEngine::optimizer_uses_kernel() const {
  return !groups_.empty() && groups_.front()->optimizer->uses_kernel();
}

int64_t DataParallelEngine::optimizer_steps() const {
  return groups_.empty() ? 0 : groups_.front()->optimizer->steps_taken();
}

void DataParallelEngine::restore_checkpoint_state(int64_t optimizer_steps) {
  at::NoGradGuard no_grad;
  if (optimizer_steps < 0) {
    throw std::invalid_argument("restore_checkpoint_state: optimizer_steps=" +
                                std::to_string(optimizer_steps) + "; accepted: >= 0");
  }
  for (auto& gp : groups_) {
    EngineGroup& g = *gp;
    g.optimizer->set_steps_taken(optimizer_steps);
    // A gathered sharded unit would hold the weights from before the load: drop it, the next
    // forward gathers the loaded shards.
    if (g.gather_work) {
      wait_work(g.gather_work, "all-gather of FSDP unit weights");
      g.gather_work.reset();
      if (g.fp8_gather) finish_fp8_gather(g);
      g.gathered = true;
    }
    if (g.is_unit) release_gathered(g);
    // The loaded compute weights are in place (written=true): this only re-gathers the full
    // compute buffer where each rank loaded its own shard of it.
    refresh_model_weights(g, /*written=*/true);
    wait_param_sync(g);
  }
  // The FP8 shards follow the loaded main weights (and the distributed optimizer's buckets
  // gather them).
  cast_fp8_shards();
  launch_fp8_param_syncs();
  for (auto& g : groups_) wait_param_sync(*g);
}

}  // namespace shardbench
