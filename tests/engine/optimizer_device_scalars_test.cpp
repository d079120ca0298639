// The optimizer graph's AdamW on the CPU (optimizer.optimizer_cuda_graph, docs/cuda-graphs.md):
// with device scalars, FlatAdamW reads each step's learning rate and bias corrections from a
// tensor and its step count from counters of its own, so that its device part can be captured
// once and replayed. Here, through ATen's fused AdamW (its tensor-lr overload): that path trains
// bit for bit like the host-scalar path at the same fp32 learning rate, for fp32 and bf16
// moments, while the device part is handed a host learning rate of NaN (a graph replays the
// capture step's host values: one it read would show); and an engine built with device scalars
// trains every wrapper like the host-scalar engine, bit for bit. The GPU tests
// (tests/gpu/cuda_graph_gpu_test.cpp) capture and replay it.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "harness/engine/mock_data.hpp"
#include "harness/engine/train_step.hpp"
#include "harness/engine/train_step_phases.hpp"
#include "harness/parallel/flat_adamw.hpp"
#include "tests/engine/case_strategy.hpp"
#include "tests/engine/rank_threads.hpp"
#include "tests/engine/reference_training.hpp"
#include "workloads/llama/llama_model.hpp"

namespace shardbench {
namespace {

// Two weight-decay classes in three segments.
std::vector<AdamSegment> segments(int64_t n) {
  return {{0, n / 2, false}, {n / 2, 1000, true}, {n / 2 + 1000, n - n / 2 - 1000, false}};
}

// A learning rate per step that fp32 does not hold exactly (1e-3 x ...), so that the fp32
// rounding of the device path shows where it is not accounted for.
double lr_at(int step) { return 1e-3 * (1.0 + 0.37 * step); }

void write(at::Tensor& scalars, const AdamScalars& s) {
  scalars.copy_(at::tensor({s.lr, s.bias_correction1, s.bias_correction2}, at::kFloat));
}

struct Moments {
  at::ScalarType avg, avg_sq;
  const char* name;
};

TEST(OptimizerDeviceScalars, FlatAdamWTrainsLikeTheHostPathAtTheFp32LearningRate) {
  const int64_t n = 10000;
  const AdamWHyper hyper = reference::hyper();
  // What a replayed graph would hand the device part: the capture step's host values. None
  // may be read; a NaN learning rate would poison every weight.
  AdamWHyper stale = hyper;
  stale.lr = std::numeric_limits<double>::quiet_NaN();
  for (const Moments m : {Moments{at::kFloat, at::kFloat, "fp32 moments"},
                          Moments{at::kBFloat16, at::kBFloat16, "bf16 moments"},
                          Moments{at::kFloat, at::kBFloat16, "fp32/bf16 moments"}}) {
    at::manual_seed(7);
    const at::Tensor init = at::randn({n});
    at::Tensor host_main = init.clone(), device_main = init.clone();
    FlatAdamW host(host_main, segments(n), false, m.avg, m.avg_sq);
    FlatAdamW device(device_main, segments(n), false, m.avg, m.avg_sq);
    at::Tensor scalars = at::zeros({kAdamScalarElems});
    device.use_device_scalars(scalars);
    EXPECT_TRUE(device.uses_device_scalars());
    for (int step = 0; step < 6; ++step) {
      // A checkpoint load in the middle: the device counters follow the loaded step count.
      if (step == 3) {
        host.set_steps_taken(40);
        device.set_steps_taken(40);
      }
      const at::Tensor grad = at::randn({n}) * 0.01;
      const at::Tensor scale = at::full({1}, 1.5);  // grads divided by 1.5, as clipping does
      AdamWHyper at_fp32 = hyper;
      at_fp32.lr = static_cast<double>(static_cast<float>(lr_at(step)));
      // Each its own copy: with a grad_scale, ATen's fused AdamW writes the unscaled grads back.
      host.step(grad.clone(), at_fp32, scale);
      const AdamScalars s = device.next_scalars(lr_at(step), hyper);
      const double t = static_cast<double>(device.steps_taken());
      EXPECT_EQ(s.lr, static_cast<float>(lr_at(step))) << m.name;
      EXPECT_EQ(s.bias_correction1, static_cast<float>(1.0 - std::pow(hyper.beta1, t)));
      EXPECT_EQ(s.bias_correction2, static_cast<float>(1.0 - std::pow(hyper.beta2, t)));
      write(scalars, s);
      EXPECT_FALSE(device.step_on_device(grad.clone(), stale, scale));
      ASSERT_TRUE(at::equal(device_main, host_main)) << m.name << ", step " << step + 1;
      ASSERT_TRUE(at::equal(device.exp_avg(), host.exp_avg())) << m.name << ", step " << step + 1;
      ASSERT_TRUE(at::equal(device.exp_avg_sq(), host.exp_avg_sq()))
          << m.name << ", step " << step + 1;
      EXPECT_EQ(device.steps_taken(), host.steps_taken()) << m.name;
    }
    EXPECT_EQ(device.steps_taken(), 43);
    EXPECT_TRUE(at::isfinite(device_main).all().item<bool>()) << m.name;
  }
}

// step() on an optimizer with device scalars runs both parts (what an eager warm-up step of a
// graphed run does), with the same bits as the host path at the fp32 learning rate.
TEST(OptimizerDeviceScalars, StepRunsBothParts) {
  const int64_t n = 4000;
  at::manual_seed(11);
  const at::Tensor init = at::randn({n});
  at::Tensor host_main = init.clone(), device_main = init.clone();
  FlatAdamW host(host_main, segments(n));
  FlatAdamW device(device_main, segments(n));
  at::Tensor scalars = at::zeros({kAdamScalarElems});
  device.use_device_scalars(scalars);
  for (int step = 0; step < 3; ++step) {
    const at::Tensor grad = at::randn({n}) * 0.01;
    AdamWHyper h = reference::hyper();
    h.lr = lr_at(step);
    device.step(grad, h);
    h.lr = static_cast<double>(static_cast<float>(lr_at(step)));
    host.step(grad, h);
    ASSERT_TRUE(at::equal(device_main, host_main)) << "step " << step + 1;
  }
  // The scalars of the last step were written where the device part reads them.
  EXPECT_EQ(scalars[0].item<float>(), static_cast<float>(lr_at(2)));
  EXPECT_EQ(scalars[1].item<float>(), static_cast<float>(1.0 - std::pow(0.9, 3.0)));
}

TEST(OptimizerDeviceScalars, RefusesWhatItCannotRead) {
  at::Tensor main = at::zeros({100});
  FlatAdamW opt(main, {{0, 100, false}});
  EXPECT_FALSE(opt.uses_device_scalars());
  EXPECT_THROW(opt.step_on_device(at::zeros({100}), reference::hyper()), std::logic_error);
  EXPECT_THROW(opt.use_device_scalars(at::zeros({4})), std::invalid_argument);
  EXPECT_THROW(opt.use_device_scalars(at::zeros({3}, at::kDouble)), std::invalid_argument);
  EXPECT_THROW(opt.use_device_scalars(at::zeros({1, 3})), std::invalid_argument);
}

// ---- the engine ------------------------------------------------------------------------------

struct EngineCase {
  const char* wrapper;
  const char* strategy;
  bool distopt = false;
  bool overlap_param_gather = false;
  bool bf16_moments = false;
};

struct Trained {
  std::vector<double> losses, grad_norms;
  std::vector<at::Tensor> weights;
  int64_t optimizer_steps = 0;
  int64_t param_syncs = 0, unit_gathers = 0;
};

// Four steps at 2 gloo ranks, each with its own batch and learning rate (fp32-rounded for the
// host-scalar engine when `round_lr`); the device-scalar engine runs each optimizer step as its
// two parts, as the optimizer graph does.
Trained train(const EngineCase& c, bool device_scalars, bool round_lr) {
  const LlamaDims dims = reference::odd_dims();
  std::mutex mu;
  Trained out;
  testing::run_on_ranks(2, [&](int rank, ProcessGroups& pgs) {
    EngineOptions o;
    o.wrapper = wrapper_spec(c.wrapper).id;
    o.strategy = testing::case_strategy(c.strategy);
    o.use_distributed_optimizer = c.distopt;
    o.overlap_param_gather = c.overlap_param_gather;
    o.seed = reference::kSeed;
    o.adam = reference::hyper();
    o.optimizer_device_scalars = device_scalars;
    if (c.bf16_moments) o.exp_avg_dtype = o.exp_avg_sq_dtype = at::kBFloat16;
    DataParallelEngine engine(LlamaSpec(dims), o, pgs);
    LlamaModel model(dims, at::kCPU);
    Trained r;
    for (int it = 0; it < 4; ++it) {
      const double lr = round_lr ? static_cast<double>(static_cast<float>(lr_at(it))) : lr_at(it);
      const StepInputs in{mock_global_batch(reference::kSeed, it, 8, dims.seq_length, dims.vocab),
                          2, lr};
      at::Tensor loss, norm;
      if (device_scalars) {
        loss = forward_backward(model, engine, in, nullptr) / 2.0;
        engine.stage_optimizer_step(lr);
        norm = engine.optimizer_step_on_device();
      } else {
        const StepOutputs s = train_step(model, engine, in);
        loss = s.loss;
        norm = s.grad_norm;
      }
      r.losses.push_back(loss.item<double>());
      r.grad_norms.push_back(norm.item<double>());
    }
    r.weights = engine.gather_main_weights();
    r.optimizer_steps = engine.optimizer_steps();
    r.param_syncs = engine.param_sync_stats().gathers;
    r.unit_gathers = engine.unit_gather_stats().gathers;
    if (rank == 0) {
      std::lock_guard<std::mutex> lock(mu);
      out = r;
    }
  });
  return out;
}

TEST(OptimizerDeviceScalars, EveryWrapperTrainsLikeTheHostScalarEngine) {
  const EngineCase cases[] = {
      {"ddp", "ddp"},
      {"ddp", "ddp", true},
      {"ddp", "ddp", true, true},
      {"megatron_fsdp", "optim"},
      {"megatron_fsdp", "optim_grads_params"},
      {"megatron_fsdp", "optim_grads_params", false, false, true},
      {"torch_fsdp2", "reshard_after_forward"},
  };
  for (const EngineCase& c : cases) {
    const std::string what =
        std::string(c.wrapper) + "/" + c.strategy + (c.distopt ? "+distopt" : "") +
        (c.overlap_param_gather ? "+overlap" : "") + (c.bf16_moments ? "+bf16_moments" : "");
    const Trained host = train(c, false, true);
    const Trained device = train(c, true, false);
    ASSERT_EQ(device.losses.size(), host.losses.size()) << what;
    for (size_t i = 0; i < host.losses.size(); ++i) {
      EXPECT_EQ(device.losses[i], host.losses[i]) << what << ", step " << i + 1;
      EXPECT_EQ(device.grad_norms[i], host.grad_norms[i]) << what << ", step " << i + 1;
    }
    ASSERT_EQ(device.weights.size(), host.weights.size()) << what;
    for (size_t p = 0; p < host.weights.size(); ++p) {
      EXPECT_TRUE(at::equal(device.weights[p], host.weights[p])) << what << ", parameter " << p;
    }
    EXPECT_EQ(device.optimizer_steps, 4) << what;
    EXPECT_EQ(device.param_syncs, host.param_syncs) << what;
    EXPECT_EQ(device.unit_gathers, host.unit_gathers) << what;
  }
}

TEST(OptimizerDeviceScalars, EngineRefusesTheTwoPartsWithoutThem) {
  testing::run_on_ranks(1, [&](int, ProcessGroups& pgs) {
    EngineOptions o;
    DataParallelEngine engine(LlamaSpec(reference::odd_dims()), o, pgs);
    EXPECT_THROW(engine.stage_optimizer_step(1e-3), std::logic_error);
    EXPECT_THROW(engine.optimizer_step_on_device(), std::logic_error);
  });
}

}  // namespace
}  // namespace shardbench
