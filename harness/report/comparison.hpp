// An FSDP run (Megatron FSDP or Torch FSDP2) against its DDP baseline: signed relative
// differences of time, throughput and memory.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "harness/report/noise_model.hpp"

namespace shardbench {

// Below this relative change a step-time difference is "on par" even when both runs are very
// steady: CUDA-event jitter and clock drift alone move medians by a few tenths of a percent.
inline constexpr double kMinNoiseBand = 0.01;

// How the terminal summary, the verdict lines and perf-compare name a run's wrapper, from the
// report's run "identity": "DDP", "DDP+distopt", "FSDP" (Megatron FSDP) or "FSDP2".
std::string wrapper_display_name(const nlohmann::json& identity);

// A run's parallel layout as the comparison names it (run "parallel_layout", docs/
// parallel-layout.md): "tp2 dp4", with "cp", "pp" and "instances" where they are above 1; empty
// when the report recorded none.
std::string parallel_layout_text(const nlohmann::json& run);
// Whether the run splits the model (tensor, context or pipeline size above 1) or its data-
// parallel ranks (HSDP instances): then the comparison's lines name both sides' layouts.
bool splits_beyond_data_parallel(const nlohmann::json& run);

// Compares two run objects of the report (run_to_json). Every metric holds
// {"baseline", "head", "relative_change" = head / baseline - 1 (null when either is missing or
// the baseline is 0), "better": "lower" | "higher"}:
//   median_step_time_ms (over the measured window), mean_tflops_per_gpu and
//   mean_tokens_per_sec_per_gpu (evaluate.py's evaluation-window means), engine_<class>_bytes for
//   each engine buffer class, and allocator_max_allocated_bytes / allocator_max_reserved_bytes.
// "noise_band" = max(kMinNoiseBand, cv of either run's step time, run_noise_band of the noise
// model at 95%): one run per side, so the run-to-run noise of the machine (noise_model.hpp)
// bounds what the two medians can tell apart; "noise_model" = {"applied", "model"
// (NoiseModel::to_json() or null), "reason" (why none applies, or null)}; the verdict says
// "within noise" inside the band, and "inconclusive" beyond the cv band when no model applies;
// "loss_parity" (below);
// "head_parallel_layout" / "baseline_parallel_layout" (parallel_layout_text, null when not
// recorded); "verdict" is one line, which names each side's layout when either side splits beyond
// data parallelism ("FSDP optim_grads_params (tp2 dp4) vs DDP+distopt (tp2 dp4): ...").
// `noise` is the model for the machine both runs ran on; `no_noise_reason` says why there is none
// (kNoNoiseModelReason when empty).
nlohmann::json compare_runs(const nlohmann::json& head_run, std::size_t head_index,
                            const nlohmann::json& baseline_run, std::size_t baseline_index,
                            const std::optional<NoiseModel>& noise = std::nullopt,
                            const std::string& no_noise_reason = "");

// Per-step loss tolerance of a run against its DDP baseline, relative to the DDP loss, at
// 1-based iteration k: tolerance_per_step * sqrt(k), capped at tolerance_cap. Both runs start
// from the same weights and see the same batches, so they differ only by the order of floating
// point reductions (all-reduce vs reduce-scatter, sharded optimizer), and those rounding
// differences grow like a random walk over steps. Reasoning and measurements:
// docs/loss-parity.md.
struct LossTolerance {
  double per_step = 0;
  double cap = 0;
  double at(long long iteration) const;
};
LossTolerance loss_tolerance(const std::string& compute_dtype);

// {"verdict": "ok" | "fail" | "not_compared", "compute_dtype", "tolerance": {"relative_per_step",
//  "cap", "rule"}, "steps_compared", "max_abs_diff", "max_relative_diff", "worst_iteration",
//  "first_failing_iteration" (or null), "loss_diff": [head - baseline per step, null where a side
//  has no finite loss], "summary": one line}. Compares the steps both runs have.
nlohmann::json loss_parity(const nlohmann::json& head_run, const nlohmann::json& baseline_run);

// The verdict lines of a report's comparisons whose loss parity failed, one per line; empty when
// every compared run trains like its baseline. perf-launch exits 1 when it is not empty.
std::string loss_parity_failures(const nlohmann::json& report);

}  // namespace shardbench
