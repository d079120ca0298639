// Matching runs of two sides by identity and judging each matched pair.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "harness/compare/run_view.hpp"
#include "harness/compare/thresholds.hpp"
#include "harness/compare/verdict.hpp"

namespace shardbench {

// Judges head runs against base runs of one identity. Several runs on a side (repetitions, or a
// DDP run next to the DDP baseline inside an FSDP report) are pooled: their per-step samples are
// concatenated, memory figures take the largest.
//
// Timing gate (evaluate.py): relative change of the mean TFLOP/s/GPU over each run's window
// [max(1, int(n * skip_first_percent_time)) : n] (tokens/s/GPU when FLOPs are unknown). Beyond
// timing_threshold it is a regression or improvement only when the U test on the per-step values
// of the measured window (all steps after warm-up: more samples than the evaluation window, so
// the test has power on short runs) gives p < alpha; otherwise "noise". When the sample sizes
// cannot reach alpha at all (2 vs 2 steps, say) the threshold alone decides and a note says so.
// Memory gate: |change| beyond memory_threshold; an increase is a regression, a decrease an
// improvement (memory figures are one value per run: no U test).
// A head run with a NaN/Inf loss makes the pair "nan"; a failed head run makes it "failed".
PairResult compare_pair(std::span<const RunView* const> base, std::span<const RunView* const> head,
                        const Thresholds& thresholds);

// Groups both sides by identity key and compares every key present on both. A golden-values run
// on the base side takes the identity of the head's run labelled `golden_head_label` (default:
// each head report's first run). Throws InputError when nothing matched, listing both sides'
// identities.
CompareResult compare_sides(std::vector<RunView> base, std::vector<RunView> head,
                            const Thresholds& thresholds,
                            const std::string& golden_head_label = "");

}  // namespace shardbench
