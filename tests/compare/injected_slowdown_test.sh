#!/usr/bin/env bash
# ctest driver: a report with an injected slowdown (shardbench.inject_slowdown, the calibration
# knob) is refused as a match for a real run, and compared with one when perf-compare is told to
# ignore that identity field: a fourfold step time is a regression. This is the comparison
# scripts/compare_calibration makes K times.
#   injected_slowdown_test.sh PERF_LAUNCH PERF_COMPARE WORK_DIR
set -euo pipefail
perf_launch="$1" perf_compare="$2" work="$3"
[ -x "$perf_launch" ] || { echo "perf-launch is not built ($perf_launch): skipped"; exit 77; }
rm -rf "$work" && mkdir -p "$work"
common=(-m llama -mr llama3_tiny_cpu -ng 2 -g cpu --use_megatron_fsdp true --compare_ddp false -ms 12)

rc=0
"$perf_launch" "${common[@]}" --report "$work/clean.json" > "$work/clean.log" 2>&1 || rc=$?
[ "$rc" = 0 ] || { echo "clean run exited $rc"; tail -20 "$work/clean.log"; exit 1; }
rc=0
"$perf_launch" "${common[@]}" shardbench.inject_slowdown=3 --report "$work/slow.json" \
  > "$work/slow.log" 2>&1 || rc=$?
[ "$rc" = 0 ] || { echo "slowed run exited $rc"; tail -20 "$work/slow.log"; exit 1; }

python3 - "$work/clean.json" "$work/slow.json" <<'PY'
import json, sys
clean, slow = (json.load(open(p)) for p in sys.argv[1:3])
assert clean["runs"][0]["identity"]["injected_slowdown"] is None
assert slow["runs"][0]["identity"]["injected_slowdown"] == "fraction=3,delay_ms=0", \
    slow["runs"][0]["identity"]["injected_slowdown"]
PY

# A slowed run never passes for a real one ..
rc=0
"$perf_compare" "$work/clean.json" "$work/slow.json" > "$work/compare_strict.txt" 2>&1 || rc=$?
[ "$rc" = 2 ] || { echo "perf-compare matched a slowed run with a real one (exit $rc)"; cat "$work/compare_strict.txt"; exit 1; }
# .. and compared with one on request, a fourfold step time is a regression.
rc=0
# One run per side: perf-compare needs this machine's run-to-run noise. These ranks are placed by
# the OS (no committed default for cpu-default), so the test supplies the committed real-time CPU
# default's sd, 0.203 (a 49% band): a fourfold step time is far beyond it.
python3 - "$work/clean.json" "$work/noise.json" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
cls = "cpu-" + doc["runs"][0]["identity"].get("cpu_scheduling", "default")
json.dump({"device_class": cls, "host": doc["environment"]["host_name"], "run_to_run_sd": 0.203,
           "pairs": 200}, open(sys.argv[2], "w"))
PY
"$perf_compare" "$work/clean.json" "$work/slow.json" --ignore_identity injected_slowdown \
  --noise_model "$work/noise.json" --format json > "$work/compare.json" 2> "$work/compare.err" || rc=$?
[ "$rc" = 1 ] || { echo "perf-compare exited $rc, expected 1"; cat "$work/compare.err"; head -c 2000 "$work/compare.json"; exit 1; }
python3 - "$work/compare.json" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
verdicts = [p["verdict"] for p in doc["pairs"]]
assert verdicts == ["regression"], verdicts
print("injected slowdown: change", doc["pairs"][0]["metrics"]["step_time_median_ms"]["relative_change"])
PY
