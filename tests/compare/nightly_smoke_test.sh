#!/usr/bin/env bash
# ctest driver: scripts/nightly end to end with an already built perf-launch, on the tiny CPU
# recipe: a first nightly stores the baseline branch's reports, a second one (another branch)
# runs the matrix again, compares, writes the HTML page and exits 0 or 1.
#   nightly_smoke_test.sh REPO PERF_LAUNCH PERF_COMPARE WORK_DIR ARTEFACT_DIR
set -euo pipefail
repo="$1" perf_launch="$2" perf_compare="$3" work="$4" artefacts="$5"
[ -x "$perf_launch" ] || { echo "perf-launch is not built ($perf_launch): skipped"; exit 77; }
rm -rf "$work" && mkdir -p "$work" "$artefacts"
common=(--results "$work/results" --perf-launch "$perf_launch" --perf-compare "$perf_compare"
        --gpu cpu --num-gpus 2 --recipes llama3_tiny_cpu --strategies ddp,fsdp --steps 10)

"$repo/scripts/nightly" "${common[@]}" --branch main --date 2026-01-01
ls "$work/results/main/2026-01-01/"*.json > /dev/null

rc=0
"$repo/scripts/nightly" "${common[@]}" --branch feature/x --baseline main --date 2026-01-02 || rc=$?
# CPU step times are noisy: a regression (1) or inconclusive (3) verdict is a valid outcome
# here; 2 (bad input) and 4 (no report) are not.
[ "$rc" = 0 ] || [ "$rc" = 1 ] || [ "$rc" = 3 ] || { echo "nightly exited $rc"; exit 1; }
out="$work/results/feature_x/2026-01-02"
for f in llama3_tiny_cpu_ddp.json llama3_tiny_cpu_fsdp.json compare/compare.html compare/compare.md compare/compare.json; do
  [ -s "$out/$f" ] || { echo "missing $out/$f"; exit 1; }
done
grep -q '"matched": 2' "$out/compare/compare.json" || { echo "expected 2 matched pairs"; cat "$out/compare/compare.json"; exit 1; }
cp "$out/compare/compare.html" "$artefacts/nightly-smoke.html"
check_rc=0
"$repo/scripts/check_html.sh" "$artefacts/nightly-smoke.html" "$artefacts/nightly-smoke.png" --min-charts 4 || check_rc=$?
[ "$check_rc" = 0 ] || [ "$check_rc" = 77 ] || exit 1
echo "nightly smoke: ok (compare exit $rc)"
