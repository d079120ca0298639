// train_step (train_step.hpp) with its phases marked on a PhaseTimer: each micro-batch's forward
// and backward (the backward phase ends once finish_backward has completed the gradient
// reductions), then the optimizer step.
#pragma once

#include "harness/engine/train_step.hpp"
#include "harness/measure/phase_timer.hpp"

namespace shardbench {

// Same as train_step(model, engine, inputs); `phases` may be null.
StepOutputs train_step(const TrainableModel& model, DataParallelEngine& engine,
                       const StepInputs& inputs, PhaseTimer* phases);

}  // namespace shardbench
