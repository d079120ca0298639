// Megatron's OptimizerParamScheduler: linear warmup from 0 over lr_warmup_iters, then decay to
// min_lr at lr_decay_iters ("cosine", "linear" or "constant").
#pragma once

#include <cstdint>
#include <string>

namespace shardbench {

struct LrSchedule {
  double max_lr = 3e-4;
  double min_lr = 3e-5;
  int64_t warmup_iters = 0;
  int64_t decay_iters = 0;  // 0: no decay after warmup
  std::string style = "cosine";

  // Learning rate used by 0-based iteration `step` (Megatron's num_steps before the increment).
  double at(int64_t step) const;
};

}  // namespace shardbench
