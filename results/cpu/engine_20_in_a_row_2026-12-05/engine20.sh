#!/usr/bin/env bash
# The engine label 20 times in a row, no retry of any test; the one named in-process gloo connect
# retry of tests/engine/rank_threads.hpp is counted per run from SHARDBENCH_TEST_RETRY_LOG.
set -u
build="$1" out="$2"
mkdir -p "$out"
: > "$out/summary.txt"
for i in $(seq 1 20); do
  load="$(cut -d' ' -f1-3 /proc/loadavg)" start=$(date -u +%s) at=$(date -u +%H:%M:%S)
  export SHARDBENCH_TEST_RETRY_LOG="$out/retries_run$i.log"
  rm -f "$SHARDBENCH_TEST_RETRY_LOG"
  ctest --test-dir "$build" -L engine -j2 --timeout 120 --output-on-failure > "$out/run$i.log" 2>&1
  rc=$?
  line="$(grep -E '^[0-9]+% tests passed' "$out/run$i.log" | tail -1)"
  retries=0
  [ -f "$SHARDBENCH_TEST_RETRY_LOG" ] && retries=$(grep -c '^shardbench-test-retry:' "$SHARDBENCH_TEST_RETRY_LOG")
  echo "run $i: exit $rc, $line, $(( $(date -u +%s) - start )) s, load $load, $at, gloo connect retries $retries" >> "$out/summary.txt"
  # Keep the logs of runs with a failure or a retry only.
  if [ "$rc" = 0 ] && [ "$retries" = 0 ]; then rm -f "$out/run$i.log" "$SHARDBENCH_TEST_RETRY_LOG"; fi
done
echo finished >> "$out/summary.txt"
