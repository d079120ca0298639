#!/usr/bin/env bash
# ctest driver: fixture reports -> perf-compare --html (with history) -> headless Chromium check.
#   html_check_test.sh WRITE_FIXTURES PERF_COMPARE CHECK_HTML WORK_DIR ARTEFACT_DIR
set -euo pipefail
write_fixtures="$1" perf_compare="$2" check_html="$3" work="$4" artefacts="$5"
rm -rf "$work" && mkdir -p "$work" "$artefacts"
"$write_fixtures" "$work"
# The fixtures' machine (host "fixture") calibrated with no run-to-run noise, so that one run per
# side is judged by its steps and the planted regression is called one.
mkdir -p "$work/noise"
printf '{"device_class": "cpu-default", "host": "fixture", "run_to_run_sd": 0, "pairs": 20}\n' \
  > "$work/noise/cpu-default@fixture.json"
export SHARDBENCH_NOISE_DIR="$work/noise"
rc=0
"$perf_compare" "$work/base" "$work/head" --history "$work/history" \
  --html "$artefacts/perf-compare.html" --markdown "$artefacts/perf-compare.md" > "$work/table.txt" || rc=$?
# The fixtures hold a regression: exit 1 is expected; 2 (bad input) or a crash is not.
[ "$rc" = 1 ] || { echo "perf-compare exited $rc, expected 1"; cat "$work/table.txt"; exit 1; }
# 2 throughput/memory + 2 DDP-vs-FSDP + 5 history charts.
"$check_html" "$artefacts/perf-compare.html" "$artefacts/perf-compare.png" --min-charts 9
