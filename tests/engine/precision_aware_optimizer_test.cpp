// Megatron's precision-aware optimizer fields: bf16 AdamW moments against fp32 ones within a
// stated tolerance, their bytes exactly, the report's prediction, and the refusals
// (docs/precision_aware_optimizer.md).
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "harness/config/errors.hpp"
#include "harness/config/resolve.hpp"
#include "harness/config/validate.hpp"
#include "harness/engine/bench_run.hpp"
#include "harness/engine/worker_context.hpp"
#include "harness/parallel/flat_adamw.hpp"
#include "tests/engine/rank_threads.hpp"
#include "tests/perf_launch_process.hpp"
#include "tests/resolve_error.hpp"
#include "workloads/llama/llama_model.hpp"

namespace shardbench {
namespace {

// Two weight-decay classes, the first segment longer than one low-precision chunk.
std::vector<AdamSegment> segments(int64_t n) {
  return {{0, n - 1000, false}, {n - 1000, 1000, true}};
}

at::Tensor train(at::ScalarType avg, at::ScalarType avg_sq, int64_t n, int64_t* state_bytes) {
  at::manual_seed(3);
  at::Tensor main = at::randn({n});
  FlatAdamW opt(main, segments(n), false, avg, avg_sq);
  EXPECT_EQ(opt.exp_avg().scalar_type(), avg);
  EXPECT_EQ(opt.exp_avg_sq().scalar_type(), avg_sq);
  AdamWHyper h;
  h.lr = 1e-3;
  for (int step = 0; step < 10; ++step) {
    at::Tensor grad = at::randn({n}) * 0.01;
    opt.step(grad, h, at::full({1}, 2.0));  // grad_scale: grads divided by 2, as clipping does
  }
  *state_bytes = opt.state_bytes();
  return main;
}

TEST(PrecisionAwareOptimizer, Bf16MomentsTrackFp32WithinATenthOfOneUpdate) {
  const int64_t n = (int64_t{1} << 22) + 3000;
  int64_t fp32_bytes = 0, bf16_bytes = 0, mixed_bytes = 0;
  const at::Tensor ref = train(at::kFloat, at::kFloat, n, &fp32_bytes);
  const at::Tensor low = train(at::kBFloat16, at::kBFloat16, n, &bf16_bytes);
  const at::Tensor mixed = train(at::kFloat, at::kBFloat16, n, &mixed_bytes);
  // Ten steps of at most lr = 1e-3 each; bf16 keeps 8 bits of the moments (relative error
  // 2^-9), so the weights may differ by about 10 x 1e-3 x 2^-8: allowed 1e-4, a tenth of one
  // update.
  const double diff = (low - ref).abs().max().item<double>();
  EXPECT_LT(diff, 1e-4);
  EXPECT_GT(diff, 0.0) << "the moments were not stored in bf16";
  EXPECT_LT((mixed - ref).abs().max().item<double>(), 1e-4);
  // Bytes exactly: 4 + 4, 2 + 2 and 4 + 2 per element.
  EXPECT_EQ(fp32_bytes, n * 8);
  EXPECT_EQ(bf16_bytes, n * 4);
  EXPECT_EQ(mixed_bytes, n * 6);
}

TEST(PrecisionAwareOptimizer, EngineMemoryCountsTheMomentBytes) {
  const LlamaDims dims;
  std::mutex mu;
  int64_t fp32_state = 0, low_state = 0, main_elems_total = 0;
  testing::run_on_ranks(2, [&](int rank, ProcessGroups& pgs) {
    for (const bool low : {false, true}) {
      EngineOptions o;
      o.wrapper = Wrapper::kMegatronFsdp;
      o.strategy = FsdpStrategy::kOptimGradsParams;
      if (low) {
        o.exp_avg_dtype = at::kBFloat16;
        o.exp_avg_sq_dtype = at::kFloat;
      }
      DataParallelEngine engine(LlamaSpec(dims), o, pgs);
      const EngineMemory m = engine.memory();
      int64_t main_elems = 0;
      for (const auto& g : engine.group_info()) main_elems += g.main_weight_elems;
      if (rank != 0) continue;
      std::lock_guard<std::mutex> lock(mu);
      (low ? low_state : fp32_state) = m.optimizer_state_bytes;
      main_elems_total = main_elems;
    }
  });
  EXPECT_EQ(fp32_state, main_elems_total * 8);
  EXPECT_EQ(low_state, main_elems_total * 6);
}

using testing_util::resolve_error;

// Refused at resolution (field_domains.cpp and validate.cpp), before any worker starts.
TEST(PrecisionAwareOptimizer, RefusalsNameTheField) {
  const std::string on = "optimizer.use_precision_aware_optimizer=true";
  // Megatron-Bridge's post_overrides set turns the optimizer on after every user override, so
  // only validation of a configuration built by hand reaches this refusal.
  ValidationContext ctx;
  ctx.cuda_device_count = [] { return 0; };
  ResolvedConfig r =
      resolve_from_args({"-m", "llama", "-mr", "llama3_tiny_cpu", "-ng", "1", "-g", "cpu"}, ctx);
  r.config.optimizer.use_precision_aware_optimizer = false;
  r.config.optimizer.exp_avg_dtype = "bf16";
  try {
    validate_config(r.config, r.provenance, ctx);
    ADD_FAILURE() << "exp_avg_dtype=bf16 without the precision-aware optimizer was accepted";
  } catch (const UsageError& e) {
    EXPECT_EQ(std::string(e.what()),
              "optimizer.exp_avg_dtype=bf16: accepted: fp32 without "
              "optimizer.use_precision_aware_optimizer=true");
  }
  EXPECT_EQ(resolve_error({on, "optimizer.exp_avg_dtype=bf16"}), "");
  EXPECT_EQ(resolve_error({on, "optimizer.exp_avg_sq_dtype=fp16"}),
            "optimizer.exp_avg_sq_dtype=fp16 (from override optimizer.exp_avg_sq_dtype=fp16): not "
            "implemented: Megatron's precision-aware optimizer "
            "(docs/precision_aware_optimizer.md); fp16 moments are not implemented; accepted: "
            "fp32, bf16");
  EXPECT_EQ(
      resolve_error({on, "optimizer.main_params_dtype=fp16"}),
      "optimizer.main_params_dtype=fp16 (from override optimizer.main_params_dtype=fp16): not "
      "implemented: Megatron's precision-aware optimizer "
      "(docs/precision_aware_optimizer.md); fp16 main params are not implemented; accepted: "
      "fp32");
  EXPECT_EQ(resolve_error({on, "optimizer.main_grads_dtype=bf16", "shardbench.compute_dtype=bf16",
                           "ddp.grad_reduce_in_fp32=false"}),
            "");
  EXPECT_EQ(resolve_error({on, "optimizer.main_grads_dtype=bf16", "shardbench.compute_dtype=bf16",
                           "ddp.grad_reduce_in_fp32=true"}),
            "optimizer.main_grads_dtype=bf16: accepted: fp32 with ddp.grad_reduce_in_fp32=true or "
            "shardbench.compute_dtype=fp32");
}

TEST(PrecisionAwareOptimizer, ReportPredictsTheMomentBytes) {
  const std::filesystem::path report = std::filesystem::temp_directory_path() /
                                       ("shardbench_pao_" + std::to_string(getpid()) + ".json");
  std::filesystem::remove(report);
  const testing_util::LaunchResult r = testing_util::run_perf_launch(
      "-m llama -mr llama3_tiny_cpu -ng 2 -g cpu -ms 2 "
      "optimizer.use_precision_aware_optimizer=true "
      "optimizer.exp_avg_dtype=bf16 optimizer.exp_avg_sq_dtype=bf16 shardbench.report_path=" +
      report.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream in(report);
  const auto j = nlohmann::json::parse(in);
  const auto& run0 = j["runs"][0];
  const auto& predicted = run0["memory"]["predicted"];
  EXPECT_EQ(predicted["dtype_policy"]["optimizer_state_bytes"], 4);
  const int64_t params = run0["identity"]["num_parameters"];
  const int64_t world = run0["identity"]["world_size"];
  // The distributed optimizer shards the state: ceil(P / N) elements of 2 + 2 bytes.
  EXPECT_EQ(predicted["optimizer_state_bytes"], (params + world - 1) / world * 4);
  const double engine = run0["memory"]["engine"]["optimizer_state_bytes"];
  EXPECT_NEAR(engine / predicted["optimizer_state_bytes"].get<double>(), 1.0, 0.01);
}

}  // namespace
}  // namespace shardbench
