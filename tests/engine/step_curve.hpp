// A run's losses and gradient norms step by step, as the expert-parallel parity tests hold a
// multi-rank run to its one-rank reference.
#pragma once

#include <cmath>
#include <vector>

#include <gtest/gtest.h>

#include "harness/engine/train_step.hpp"
#include "harness/parallel/engine.hpp"

namespace shardbench::testing {

struct StepCurve {
  std::vector<double> losses, norms;

  // One step: its loss averaged over every data-parallel rank (the instance, then the HSDP
  // instances) and the global gradient norm.
  void append(const StepOutputs& out, ProcessGroups& pgs) {
    at::Tensor loss = out.loss.reshape({1}).clone();
    wait_work(pgs.world->all_reduce(loss, Reduction::kAvg), "loss");
    if (pgs.outer) wait_work(pgs.outer->all_reduce(loss, Reduction::kAvg), "loss");
    losses.push_back(loss.item<double>());
    norms.push_back(out.grad_norm.item<double>());
  }
};

// Every step's loss and gradient norm within `rel` of the reference's.
inline void expect_curve_near(const StepCurve& got, const StepCurve& ref, double rel) {
  ASSERT_EQ(got.losses.size(), ref.losses.size());
  for (size_t i = 0; i < ref.losses.size(); ++i) {
    EXPECT_NEAR(got.losses[i], ref.losses[i], rel * std::abs(ref.losses[i])) << "step " << i;
    EXPECT_NEAR(got.norms[i], ref.norms[i], rel * std::abs(ref.norms[i])) << "step " << i;
  }
}

}  // namespace shardbench::testing
