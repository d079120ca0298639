// Console lines in the shapes Megatron users already read and parse: the per-iteration line,
// Megatron-Bridge's "Step Time" line, the per-rank memory line, and a short FSDP-vs-DDP summary.
// Every line keeps the substrings Megatron-Bridge's evaluate.py regexes match:
//   iteration\s+(\d+)/\s+\d+             elapsed time per iteration \(ms\):\s+([\d.]+)
//   lm loss:\s+([\d.E+\-]+)              grad norm:\s+([\d.]+|nan|inf)
//   GPU utilization:\s+([\d.]+)          Step Time :\s+([\d.]+)s
//   mem-allocated-gigabytes:\s*([\d\.]+) (and mem-max-allocated-, mem-max-reserved-)
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "harness/report/run_record.hpp"

namespace shardbench {

// The values of one iteration line.
struct IterationLog {
  int64_t iteration = 0;
  int64_t train_iters = 0;
  int64_t consumed_samples = 0;
  double elapsed_ms = 0;
  std::optional<double> tflops_per_gpu;          // omitted from the line when unknown
  std::optional<double> tokens_per_sec_per_gpu;  // omitted from the line when unknown
  double learning_rate = 0;
  int64_t global_batch_size = 0;
  double loss = 0;
  double grad_norm = 0;
  int64_t skipped_iterations = 0;
  int64_t nan_iterations = 0;  // so far, this one included
};

// From the run being recorded and its latest step. consumed samples = iteration * GBS;
// nan_iterations_so_far counts earlier steps only (this step is added when its loss or grad
// norm is not finite).
IterationLog iteration_log(const RunRecord& run, const StepRecord& step,
                           int64_t nan_iterations_so_far);

// " iteration        3/      50 | consumed samples:            6 | elapsed time per iteration
// (ms): 123.4 | throughput per GPU (TFLOP/s/GPU): 456.7 | tokens per GPU (tokens/s/GPU): 55123.4 |
// learning rate: 3.000000E-04 | global batch size:     2 | lm loss: 1.234567E+01 | grad norm:
// 1.234 | number of skipped iterations:   0 | number of nan iterations:   0 |"
// (one line; Megatron-LM training_log field formats).
std::string format_iteration_line(const IterationLog& log);

// "Step Time : 0.12s GPU utilization: 456.7MODEL_TFLOP/s/GPU" (Megatron-Bridge train_utils).
std::string format_step_time_line(double elapsed_ms, double tflops_per_gpu);

// "[Rank 0] (after 2 iterations) memory (GB) | mem-allocated-gigabytes: 21.345 |
// mem-max-allocated-gigabytes: 43.399 | mem-reserved-gigabytes: .. | mem-max-reserved-gigabytes:
// .. | mem-alloc-retries: 0 |", GB = 1e9 bytes to 5 significant digits as Megatron-Bridge prints.
std::string format_memory_line(const AllocatorSnapshot& snapshot, int64_t iterations);

// Aligned lines of the report's comparisons (time, throughput, memory per class, each with its
// signed change against DDP), one column pair per FSDP run side by side, and one verdict per
// FSDP run; empty when the report has no comparison.
std::string format_comparison_summary(const nlohmann::json& report);

}  // namespace shardbench
