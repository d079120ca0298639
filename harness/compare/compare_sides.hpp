// Matching runs of two sides by identity and judging each matched pair.
#pragma once

#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "harness/compare/run_view.hpp"
#include "harness/compare/thresholds.hpp"
#include "harness/compare/verdict.hpp"
#include "harness/report/noise_model.hpp"

namespace shardbench {

// Where the run-to-run noise of one-run-per-side comparisons comes from
// (harness/report/noise_model.hpp): `file` when given (perf-compare --noise_model), else the
// calibration of the runs' device class and host in `dir`, else the device class's default.
struct NoiseOptions {
  std::optional<std::filesystem::path> file;
  std::filesystem::path dir = noise_model_dir();
};

// Judges head runs against base runs of one identity. Several runs on a side (repetitions, or a
// DDP run next to the DDP baseline inside an FSDP report) are pooled for the figures; the timing
// interval resamples the runs too, so run-to-run variation counts as noise.
//
// Timing gate: relative change of the median step time over the measured window (steps after
// warm-up) against timing_threshold, with a moving-block bootstrap interval of that same change
// (block_bootstrap.hpp): regression / improvement when the change is beyond the threshold and the
// interval excludes 0; inconclusive when the interval is too wide to tell a threshold-sized change
// from none; ok otherwise. TFLOP/s and tokens/s (evaluate.py's eval-window means) are shown only.
// Memory gate: every memory figure a side has (allocator figures, engine static and temporary
// peak bytes): |change| beyond memory_threshold; an increase is a regression, a decrease an
// improvement.
// One run on a side (and not --paired): the steps of one run cannot show how much a whole run
// moves from one process to the next, so the interval is widened by the run-to-run noise of the
// noise model (widen_by_run_noise); without a noise model for the runs' device the timing verdict
// is inconclusive (kNoNoiseModelReason). pair.noise_model records which model was used.
// A head run with a NaN/Inf loss makes the pair "nan"; a failed head run makes it "failed"; a head
// FSDP run whose report says its loss does not match DDP's makes it "loss_mismatch".
PairResult compare_pair(std::span<const RunView* const> base, std::span<const RunView* const> head,
                        const Thresholds& thresholds, const NoiseOptions& noise = {});

// Groups both sides by identity key and compares every key present on both. A golden-values run
// on the base side takes the identity of the head's run labelled `golden_head_label` (default:
// each head report's first run). Throws InputError when nothing matched, listing both sides'
// identities, the identity fields that differ between the closest base and head runs and the
// --ignore_identity flags that would match them.
CompareResult compare_sides(std::vector<RunView> base, std::vector<RunView> head,
                            const Thresholds& thresholds, const std::string& golden_head_label = "",
                            const NoiseOptions& noise = {});

}  // namespace shardbench
