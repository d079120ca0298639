// One training iteration: every micro-batch's forward and backward through the engine's hooks,
// then the gradient reductions' completion and the optimizer step.
#pragma once

#include <cstdint>

#include <ATen/ATen.h>

#include "harness/parallel/engine.hpp"
#include "harness/model/model.hpp"

namespace shardbench {

struct StepInputs {
  at::Tensor global_batch;  // [GBS, seq + 1] on the CPU (mock_global_batch)
  int64_t micro_batch = 1;
  double lr = 0;
  // train.empty_unused_memory_level, as Megatron's train_step: >= 1 empties the CUDA caching
  // allocator after forward and backward (grads reduced), >= 2 also after the optimizer step.
  int64_t empty_unused_memory_level = 0;
  // TEST ONLY (shardbench.test_fault_grad_scale): multiplies this rank's loss before backward.
  double loss_scale = 1;
};

struct StepOutputs {
  at::Tensor loss;       // this rank's mean micro-batch loss (device scalar, fp32)
  at::Tensor grad_norm;  // global gradient norm before clipping (device scalar)
};

// Runs one iteration on this rank. Collective: every rank of the engine's group must call it.
StepOutputs train_step(const TrainableModel& model, DataParallelEngine& engine,
                       const StepInputs& inputs);

}  // namespace shardbench
