#!/usr/bin/env bash
# ctest driver: scripts/nightly end to end with an already built perf-launch, on the tiny CPU
# recipe: a first nightly stores the baseline branch's reports, a second one (another branch)
# runs the matrix again, compares, writes the HTML page and must exit 0 (the timing gate is
# widened past CPU noise; memory, which is deterministic, keeps the default threshold). A third
# comparison against a head report with doubled step times must exit 1.
#   nightly_smoke_test.sh REPO PERF_LAUNCH PERF_COMPARE WORK_DIR ARTEFACT_DIR
# Exit: 0 pass, 1 fail (perf-launch not built is a build failure), 77 Chromium missing: the HTML
# check could not run, so ctest lists the test as skipped (SKIP_RETURN_CODE), not passed.
set -euo pipefail
repo="$1" perf_launch="$2" perf_compare="$3" work="$4" artefacts="$5"
[ -x "$perf_launch" ] || { echo "perf-launch is not built ($perf_launch)"; exit 1; }
rm -rf "$work" && mkdir -p "$work" "$artefacts"
common=(--results "$work/results" --perf-launch "$perf_launch" --perf-compare "$perf_compare"
        --gpu cpu --num-gpus 2 --recipes llama3_tiny_cpu --strategies ddp,fsdp --steps 10
        --workload-args "")  # the recipe's own small steps: a smoke run, not a measurement

"$repo/scripts/nightly" "${common[@]}" --branch main --date 2026-01-01
ls "$work/results/main/2026-01-01/"*.json > /dev/null

rc=0
# CPU step times of two runs differ by more than perf-compare's 5% default: the timing threshold
# is widened to +900% so that only a real failure (or a memory change) fails the comparison.
"$repo/scripts/nightly" "${common[@]}" --branch feature/x --baseline main --date 2026-01-02 \
  --compare-args "--timing_threshold 9" || rc=$?
# One run per side: without a noise model for the ranks' scheduling mode (real-time ranks have a
# committed default, pinned ones none) the timing verdict is inconclusive (3), never a failure.
[ "$rc" = 0 ] || [ "$rc" = 3 ] || { echo "nightly exited $rc, expected 0 or 3 (no regression)"; exit 1; }
out="$work/results/feature_x/2026-01-02"
for f in llama3_tiny_cpu_ddp.json llama3_tiny_cpu_fsdp.json compare/compare.html compare/compare.md compare/compare.json; do
  [ -s "$out/$f" ] || { echo "missing $out/$f"; exit 1; }
done
grep -q '"matched": 2' "$out/compare/compare.json" || { echo "expected 2 matched pairs"; cat "$out/compare/compare.json"; exit 1; }

# The gate must still see a regression: the same head report with every step time doubled (and
# throughput halved).
slow="$work/slow" && mkdir -p "$slow"
python3 - "$out/llama3_tiny_cpu_ddp.json" "$slow/llama3_tiny_cpu_ddp.json" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
def double_times(node):
    if isinstance(node, dict):
        for key, value in node.items():
            if key.endswith("_ms") and isinstance(value, (int, float)):
                node[key] = value * 2
            elif key in ("tflops_per_gpu", "tokens_per_sec_per_gpu") and isinstance(value, (int, float)):
                node[key] = value / 2
            elif key.endswith("_ms") and isinstance(value, list):
                node[key] = [v * 2 if isinstance(v, (int, float)) else v for v in value]
            else:
                double_times(value)
    elif isinstance(node, list):
        for value in node:
            double_times(value)
double_times(report)
json.dump(report, open(sys.argv[2], "w"))
PY
slow_rc=0
# Base: the head report itself, so the doubling is the only difference (two separate CPU runs
# can differ by tens of percent, which leaves the bootstrap interval too wide to call). One run
# per side, so perf-compare wants the machine's run-to-run noise: both sides are one run, so a
# calibration with none, of the report's device class (cpu-<scheduling>).
python3 - "$out/llama3_tiny_cpu_ddp.json" "$slow/noise.json" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
cls = "cpu-" + doc["runs"][0]["identity"].get("cpu_scheduling", "default")
json.dump({"device_class": cls, "host": doc["environment"]["host_name"], "run_to_run_sd": 0,
           "pairs": 2}, open(sys.argv[2], "w"))
PY
"$perf_compare" --base "$out/llama3_tiny_cpu_ddp.json" --noise_model "$slow/noise.json" \
  --head "$slow/llama3_tiny_cpu_ddp.json" --timing_threshold 0.5 > "$slow/compare.txt" || slow_rc=$?
[ "$slow_rc" = 1 ] || { echo "doubled step times: perf-compare exited $slow_rc, expected 1"; cat "$slow/compare.txt"; exit 1; }

# A base run now, alternating with the head (--baseline-perf-launch, as --baseline-ref without a
# build), twice each: four reports, named per repetition, in b h h b order, judged --paired.
rc=0
"$repo/scripts/nightly" "${common[@]}" --strategies ddp --steps 8 --repeats 2 \
  --baseline-perf-launch "$perf_launch" --baseline pairbase --branch pairhead --date 2026-01-03 \
  --compare-args "--timing_threshold 9" 2> "$work/paired_nightly.log" || rc=$?
# Two pairs give Student's t one degree of freedom: an interval this wide may well be
# inconclusive (3); a regression (1) or an error is a failure.
[ "$rc" = 0 ] || [ "$rc" = 3 ] || { echo "paired nightly exited $rc, expected 0 or 3"; cat "$work/paired_nightly.log"; exit 1; }
python3 - "$work/results/pairbase/2026-01-03" "$work/results/pairhead/2026-01-03" "$work/paired_nightly.log" <<'PY'
import json, re, sys
base_dir, head_dir, log = sys.argv[1:4]
# The order the runs started in, from the nightly's own "run NAME (...) -> REPORT" lines (start
# times in the reports have a resolution of one second, less than a run of 8 steps).
order = re.findall(r"^\[nightly\] run \S+ \(.*\) -> (.*)$", open(log).read(), re.M)
expected = [f"{base_dir}/llama3_tiny_cpu_ddp.r1.json", f"{head_dir}/llama3_tiny_cpu_ddp.r1.json",
            f"{head_dir}/llama3_tiny_cpu_ddp.r2.json", f"{base_dir}/llama3_tiny_cpu_ddp.r2.json"]
assert order == expected, ("expected b1 h1 h2 b2", order)
doc = json.load(open(f"{head_dir}/compare/compare.json"))
assert doc["thresholds"]["paired"] is True, doc["thresholds"]
assert doc["pairs"][0]["step_time"]["run_pairs"] == 2, doc["pairs"][0]["step_time"]
assert len(doc["pairs"][0]["base_runs"]) == 2 and len(doc["pairs"][0]["head_runs"]) == 2
print("paired nightly: b h h b, judged over", len(doc["pairs"][0]["head_runs"]), "run pairs")
PY

cp "$out/compare/compare.html" "$artefacts/nightly-smoke.html"
check_rc=0
"$repo/scripts/check_html.sh" "$artefacts/nightly-smoke.html" "$artefacts/nightly-smoke.png" --min-charts 4 || check_rc=$?
if [ "$check_rc" = 77 ]; then
  echo "nightly smoke: comparison ok; HTML check SKIPPED: Chromium not installed (scripts/setup installs it)"
  exit 77
fi
[ "$check_rc" = 0 ] || exit 1
echo "nightly smoke: ok"
