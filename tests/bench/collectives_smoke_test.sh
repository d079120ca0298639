#!/usr/bin/env bash
# Smoke test of benchmarks/collectives_bench on CPU gloo: 2 ranks and 1 rank, tiny messages, one
# timed iteration each. Passes when the binary exits 0 (its data check passed on every run) and
# reports bytes/algbw/busbw on the console and in Google Benchmark's JSON. Not a timing test.
#   collectives_smoke_test.sh BENCH_BINARY WORK_DIR
set -euo pipefail
bench=$1
work=$2
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL: $*" >&2; exit 1; }

for ranks in 2 1; do
  out="$work/ranks$ranks.txt"
  json="$work/ranks$ranks.json"
  "$bench" --backend gloo --world_size "$ranks" -b 64 -e 1K -f 4 --iterations 1 \
    --benchmark_out="$json" --benchmark_out_format=json > "$out" 2>&1 \
    || { cat "$out"; fail "collectives_bench exited non-zero at $ranks rank(s)"; }
  cat "$out"
  # 7 variants (no in-place all-gather on gloo) x sizes 64, 256, 1024 bytes of fp32.
  for op in all_gather reduce_scatter_sum reduce_scatter_avg_in_place all_reduce_avg; do
    grep -Eq "^$op/fp32/ranks:$ranks/bytes:1024/[^ ]* .*algbw=.*busbw=" "$out" \
      || fail "no $op line with algbw/busbw at $ranks rank(s)"
  done
  rows=$(grep -c "busbw=" "$out")
  [ "$rows" -eq 21 ] || fail "expected 21 benchmark rows with busbw at $ranks rank(s), got $rows"
  grep -q '"busbw": ' "$json" || fail "no busbw counter in $json"
  grep -q '"world_size": "'"$ranks"'"' "$json" || fail "no world_size context in $json"
  if grep -q '"error_occurred": true' "$json"; then fail "a benchmark reported an error"; fi
done
# One rank: no bus traffic by definition.
grep -Eq "^all_reduce_sum/.* busbw=0 " "$work/ranks1.txt" || fail "busbw is not 0 at 1 rank"
echo "PASS"
