#include <gtest/gtest.h>

#include <limits>
#include <regex>
#include <string>

#include "harness/report/console.hpp"
#include "harness/report/units.hpp"

namespace shardbench {
namespace {

// Megatron-Bridge scripts/performance/utils/evaluate.py get_metrics_from_logfiles.
const std::regex kIteration(R"(iteration\s+(\d+)/\s+\d+)");
const std::regex kElapsed(R"(elapsed time per iteration \(ms\):\s+([\d.]+))");
const std::regex kLoss(R"(lm loss:\s+([\d.E+\-]+))");
const std::regex kGradNorm(R"(grad norm:\s+([\d.]+|nan|inf))");
const std::regex kGpuUtilization(R"(GPU utilization:\s+([\d.]+))");
const std::regex kStepTime(R"(Step Time :\s+([\d.]+)s)");
const std::regex kAlloc(R"(mem-allocated-gigabytes:\s*([\d\.]+))");
const std::regex kMaxAlloc(R"(mem-max-allocated-gigabytes:\s*([\d\.]+))");
const std::regex kMaxReserved(R"(mem-max-reserved-gigabytes:\s*([\d\.]+))");

std::string capture(const std::string& line, const std::regex& re) {
  std::smatch m;
  return std::regex_search(line, m, re) ? m[1].str() : "<no match>";
}

IterationLog sample_log() {
  IterationLog log;
  log.iteration = 3;
  log.train_iters = 50;
  log.consumed_samples = 6;
  log.elapsed_ms = 123.44;
  log.tflops_per_gpu = 456.66;
  log.tokens_per_sec_per_gpu = 55123.46;
  log.learning_rate = 3e-4;
  log.global_batch_size = 2;
  log.loss = 12.3456749;
  log.grad_norm = 1.2344;
  return log;
}

TEST(ReportConsole, IterationLineMatchesMegatron) {
  EXPECT_EQ(format_iteration_line(sample_log()),
            " iteration        3/      50 | consumed samples:            6 |"
            " elapsed time per iteration (ms): 123.4 | throughput per GPU (TFLOP/s/GPU): 456.7 |"
            " tokens per GPU (tokens/s/GPU): 55123.5 | learning rate: 3.000000E-04 |"
            " global batch size:     2 | lm loss: 1.234567E+01 | grad norm: 1.234 |"
            " number of skipped iterations:   0 | number of nan iterations:   0 |");
}

TEST(ReportConsole, EvaluatePyRegexesParseOurLines) {
  const std::string line = format_iteration_line(sample_log());
  EXPECT_EQ(capture(line, kIteration), "3");
  EXPECT_EQ(capture(line, kElapsed), "123.4");
  EXPECT_EQ(capture(line, kLoss), "1.234567E+01");
  EXPECT_EQ(capture(line, kGradNorm), "1.234");
  const std::string step = format_step_time_line(123.44, 456.66);
  EXPECT_EQ(step, "Step Time : 0.12s GPU utilization: 456.7MODEL_TFLOP/s/GPU");
  EXPECT_EQ(capture(step, kStepTime), "0.12");
  EXPECT_EQ(capture(step, kGpuUtilization), "456.7");
}

TEST(ReportConsole, NanAndInfGradNorm) {
  IterationLog log = sample_log();
  log.grad_norm = std::numeric_limits<double>::quiet_NaN();
  log.nan_iterations = 1;
  const std::string nan_line = format_iteration_line(log);
  EXPECT_EQ(capture(nan_line, kGradNorm), "nan");
  EXPECT_NE(nan_line.find("number of nan iterations:   1 |"), std::string::npos);
  log.grad_norm = std::numeric_limits<double>::infinity();
  EXPECT_EQ(capture(format_iteration_line(log), kGradNorm), "inf");
}

TEST(ReportConsole, IterationLogFromRun) {
  RunRecord run;
  run.world_size = 2;
  run.global_batch_size = 4;
  run.seq_length = 128;
  run.train_iters = 10;
  run.model_flops_per_step = 1e12;
  StepRecord step;
  step.iteration = 3;
  step.elapsed_ms = 100;
  step.loss = std::numeric_limits<double>::quiet_NaN();
  const IterationLog log = iteration_log(run, step, 1);
  EXPECT_EQ(log.consumed_samples, 12);
  EXPECT_EQ(log.train_iters, 10);
  EXPECT_DOUBLE_EQ(*log.tflops_per_gpu, 5);
  EXPECT_DOUBLE_EQ(*log.tokens_per_sec_per_gpu, 2560);
  EXPECT_EQ(log.nan_iterations, 2);
  run.model_flops_per_step = 0;  // unknown: the throughput field is left out
  const std::string line = format_iteration_line(iteration_log(run, step, 0));
  EXPECT_EQ(line.find("TFLOP/s/GPU"), std::string::npos);
  EXPECT_EQ(capture(line, kIteration), "3");
}

TEST(ReportConsole, MemoryLine) {
  AllocatorSnapshot s;
  s.rank = 0;
  s.allocated_bytes = 21'345'678'901;
  s.max_allocated_bytes = 43'398'765'432;
  s.reserved_bytes = 45'000'000'000;
  s.max_reserved_bytes = 46'600'000'000;
  const std::string line = format_memory_line(s, 2);
  EXPECT_EQ(line,
            "[Rank 0] (after 2 iterations) memory (GB) | mem-allocated-gigabytes: 21.346 |"
            " mem-max-allocated-gigabytes: 43.399 | mem-reserved-gigabytes: 45.000 |"
            " mem-max-reserved-gigabytes: 46.600 | mem-alloc-retries: 0 |");
  EXPECT_EQ(capture(line, kAlloc), "21.346");
  EXPECT_EQ(capture(line, kMaxAlloc), "43.399");
  EXPECT_EQ(capture(line, kMaxReserved), "46.600");
}

TEST(ReportUnits, SignificantDigits) {
  EXPECT_DOUBLE_EQ(round_significant(43.398765432, 5), 43.399);
  EXPECT_DOUBLE_EQ(round_significant(0.000123456, 5), 0.00012346);
  EXPECT_DOUBLE_EQ(round_significant(123456789.0, 5), 123460000.0);
  EXPECT_DOUBLE_EQ(round_significant(0, 5), 0);
  EXPECT_EQ(format_significant(0.000123456, 5), "0.00012346");  // never an exponent
  EXPECT_EQ(format_significant(123456789.0, 5), "123460000");
  EXPECT_EQ(format_significant(0, 5), "0");
  EXPECT_EQ(format_significant(9.99996, 5), "10.000");
  EXPECT_TRUE(number_or_null(std::numeric_limits<double>::infinity()).is_null());
}

}  // namespace
}  // namespace shardbench
