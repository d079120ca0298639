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

// train_step in its two halves, for a caller that runs the first one as a CUDA graph
// (step_graph.hpp). forward_backward: every micro-batch's forward and backward and
// finish_backward; returns the sum of the micro-batch losses (a device scalar it allocates).
// `inputs.global_batch` may already be on the engine's device.
at::Tensor forward_backward(const TrainableModel& model, DataParallelEngine& engine,
                            const StepInputs& inputs, PhaseTimer* phases);
// The rest of the step: the optimizer step (with train.empty_unused_memory_level's emptying of
// the allocator around it) and the step's outputs, the loss being loss_sum / micro-batches.
StepOutputs optimizer_part(const TrainableModel& model, DataParallelEngine& engine,
                           const StepInputs& inputs, const at::Tensor& loss_sum,
                           PhaseTimer* phases);
// Micro-batches per step: GBS / (micro batch x DP); throws when it does not divide.
int micro_batches_per_step(const DataParallelEngine& engine, const StepInputs& inputs);

}  // namespace shardbench
